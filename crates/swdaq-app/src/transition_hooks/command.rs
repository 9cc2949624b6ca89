//! One hook command run to its end or its time limit by swdaq's one child runner
//! (`swdaq_child`: its own process group, killed whole at the limit; stdin closed; stdout and
//! stderr through one pipe drained to the end, so a talkative hook never blocks on a full
//! pipe; waited for at most a second once it ends); here no shell, the run's environment
//! added, and what is kept with the run: how it ended, 64 KiB of its output and how much more.

use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;
use swdaq_child::{Bounds, End, Output};

/// Output kept of one hook (stdout and stderr together); the rest is counted, not kept.
pub const OUTPUT_KEPT: usize = 64 * 1024;

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

/// Runs `argv` with `env` added to swdaq's environment, for at most `limit`.
pub fn run(argv: &[String], env: &[(String, String)], limit: Duration) -> HookOutput {
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)));
    let bounds = Bounds {
        time: limit,
        kept: OUTPUT_KEPT,
        output: Output::Together,
    };
    let ran = swdaq_child::run(command, &bounds, || false);
    let end = match ran.end {
        End::Exited(status) => match (status.code(), status.signal()) {
            (Some(code), _) => HookEnd::Exited { code },
            (None, Some(signal)) => HookEnd::Signalled { signal },
            _ => HookEnd::Exited { code: -1 },
        },
        // Killed at the limit, or when it could no longer be asked (a hook is never stopped).
        End::TimedOut | End::Stopped | End::Lost(_) => HookEnd::TimedOut {
            after_s: limit.as_secs_f64(),
        },
        End::NotStarted(why) => HookEnd::NotStarted { why },
    };
    HookOutput {
        end,
        output: ran.stdout.text(),
        truncated_bytes: ran.stdout.beyond,
        seconds: ran.elapsed.as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
