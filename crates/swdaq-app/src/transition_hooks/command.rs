//! One hook command run to its end or its time limit: its own process group (killed whole
//! at the limit), no shell, stdin closed, stdout and stderr through one pipe into a bounded
//! buffer that is drained to the end so a talkative hook never blocks on a full pipe.

use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Output kept of one hook (stdout and stderr together); the rest is counted, not kept.
pub const OUTPUT_KEPT: usize = 64 * 1024;

/// How long the output is still read after the hook ended: a child it left behind in
/// another process group may hold the pipe open.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// How often a running hook is looked at.
const POLL: Duration = Duration::from_millis(10);

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum HookEnd {
    Exited {
        code: i32,
    },
    Signalled {
        signal: i32,
    },
    /// Killed (its whole process group) at the time limit.
    TimedOut {
        after_s: f64,
    },
    /// It could not be started (no such program, not executable, ...).
    NotStarted {
        why: String,
    },
}

impl HookEnd {
    pub fn succeeded(&self) -> bool {
        *self == HookEnd::Exited { code: 0 }
    }
}

impl std::fmt::Display for HookEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookEnd::Exited { code } => write!(f, "exited with status {code}"),
            HookEnd::Signalled { signal } => write!(f, "killed by signal {signal}"),
            HookEnd::TimedOut { after_s } => {
                write!(f, "timed out: killed after {after_s} s")
            }
            HookEnd::NotStarted { why } => write!(f, "could not be started: {why}"),
        }
    }
}

/// What one hook did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookOutput {
    pub end: HookEnd,
    /// stdout and stderr as they came, the first [`OUTPUT_KEPT`] bytes (lossy UTF-8).
    pub output: String,
    /// Bytes printed beyond what is kept (0: all of it is kept).
    pub truncated_bytes: u64,
    pub seconds: f64,
}

/// What the reader keeps of the pipe.
#[derive(Default)]
struct Collected {
    kept: Vec<u8>,
    beyond: u64,
}

/// Runs `argv` with `env` added to swdaq's environment, for at most `limit`.
pub fn run(argv: &[String], env: &[(String, String)], limit: Duration) -> HookOutput {
    let started = Instant::now();
    let not_started = |why: String| HookOutput {
        end: HookEnd::NotStarted { why },
        output: String::new(),
        truncated_bytes: 0,
        seconds: started.elapsed().as_secs_f64(),
    };
    let (mut reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return not_started(format!("no pipe for its output: {e}")),
    };
    let writer_too = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return not_started(format!("no pipe for its output: {e}")),
    };
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_too)
        // Its own group, so that the limit kills what it started too.
        .process_group(0);
    let spawned = command.spawn();
    // Our ends of the pipe's writing side go with `command`: the reader sees its end once
    // the hook (and whatever it started) has closed them.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return not_started(format!("{}: {e}", argv[0])),
    };
    let collected = Arc::new(Mutex::new(Collected::default()));
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let into = Arc::clone(&collected);
    let read = std::thread::Builder::new()
        .name("hook-output".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut c = into.lock().unwrap_or_else(|e| e.into_inner());
                let room = OUTPUT_KEPT.saturating_sub(c.kept.len()).min(n);
                c.kept.extend_from_slice(&buf[..room]);
                c.beyond += (n - room) as u64;
            }
            let _ = done_tx.send(());
        });
    let deadline = started + limit;
    let end = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break match (status.code(), status.signal()) {
                    (Some(code), _) => HookEnd::Exited { code },
                    (None, Some(signal)) => HookEnd::Signalled { signal },
                    _ => HookEnd::Exited { code: -1 },
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            // At the limit (or when it can no longer be asked): the whole group goes.
            _ => {
                // SAFETY: killpg only sends a signal; the group is the child's own, made at
                // spawn with the child's pid as its id, and the child is not yet reaped.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
                let _ = child.wait();
                break HookEnd::TimedOut {
                    after_s: limit.as_secs_f64(),
                };
            }
        }
    };
    if read.is_ok() {
        let _ = done_rx.recv_timeout(OUTPUT_GRACE);
    }
    let c = collected.lock().unwrap_or_else(|e| e.into_inner());
    HookOutput {
        end,
        output: String::from_utf8_lossy(&c.kept).into_owned(),
        truncated_bytes: c.beyond,
        seconds: started.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn output_and_status_are_kept_with_the_environment_given() {
        let out = run(
            &argv(&["sh", "-c", "echo out $SWDAQ_X; echo err >&2; exit 3"]),
            &[("SWDAQ_X".into(), "7".into())],
            Duration::from_secs(10),
        );
        assert_eq!(out.end, HookEnd::Exited { code: 3 });
        assert!(out.output.contains("out 7") && out.output.contains("err"));
        assert_eq!(out.truncated_bytes, 0);
    }

    #[test]
    fn a_hook_past_its_limit_is_killed_with_its_children() {
        let started = Instant::now();
        let out = run(
            &argv(&["sh", "-c", "echo begun; sleep 30 & sleep 30"]),
            &[],
            Duration::from_millis(300),
        );
        assert!(matches!(out.end, HookEnd::TimedOut { .. }), "{out:?}");
        assert!(out.output.contains("begun"));
        // The background sleep held the pipe too: it was killed with the group.
        assert!(started.elapsed() < Duration::from_secs(5), "{out:?}");
    }

    #[test]
    fn a_long_output_is_cut_and_counted() {
        let out = run(
            &argv(&["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"]),
            &[],
            Duration::from_secs(10),
        );
        assert!(out.end.succeeded(), "{out:?}");
        assert_eq!(out.output.len(), OUTPUT_KEPT);
        assert_eq!(out.truncated_bytes, 200_000 - OUTPUT_KEPT as u64);
    }

    #[test]
    fn a_missing_program_is_named() {
        let out = run(&argv(&["/nonexistent/hook"]), &[], Duration::from_secs(1));
        assert!(
            matches!(&out.end, HookEnd::NotStarted { why } if why.contains("/nonexistent/hook"))
        );
    }
}
