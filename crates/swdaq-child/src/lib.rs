//! One child program run to its end, its time limit or a stop — the one runner behind the
//! transfer's XRootD client programs (`swdaq-transfer`'s `command`) and the operator's run
//! hooks (`swdaq-app`'s `transition_hooks::command`).
//!
//! What it guarantees, whatever the child does:
//!
//! * the child leads a process group of its own, and at its time limit or a stop the whole
//!   group is killed (SIGKILL) and the child reaped: what it started in its group goes too;
//! * stdin is closed; stdout and stderr are read on threads of their own (apart, or together
//!   through one pipe in the order they came), so a talkative child never blocks on a full
//!   pipe, and at most [`Bounds::kept`] bytes of each are kept (the rest counted);
//! * once the child has ended its output is waited for at most [`OUTPUT_GRACE`]: a process it
//!   left behind (outside its group, or in it after the child exited by itself) may hold the
//!   pipe open for ever; what was read by then is kept;
//! * it is looked at every [`POLL`], so a stop kills it within about that.
//!
//! What a caller makes of the end (messages, records, environment) stays with the caller.
//!
//! ```
//! use std::process::Command;
//! use std::time::Duration;
//! use swdaq_child::{Bounds, End, Output};
//!
//! let mut command = Command::new("sh");
//! command.args(["-c", "echo hello; exit 3"]);
//! let bounds = Bounds { time: Duration::from_secs(10), kept: 4096, output: Output::Apart };
//! let ran = swdaq_child::run(command, &bounds, || false);
//! assert!(matches!(ran.end, End::Exited(status) if status.code() == Some(3)));
//! assert_eq!(ran.stdout.text(), "hello\n");
//! ```

#![deny(missing_docs)]

use std::io::{PipeReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a running child is looked at (and so how soon a stop kills it).
pub const POLL: Duration = Duration::from_millis(10);

/// How long the output is still read once the child has ended.
pub const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// How the child's stdout and stderr are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Each through a pipe of its own: [`Ran::stdout`] and [`Ran::stderr`].
    Apart,
    /// Both through one pipe, in the order they came: all in [`Ran::stdout`].
    Together,
}

/// What a child may take.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Its time limit, from the call.
    pub time: Duration,
    /// The most bytes kept of each pipe.
    pub kept: usize,
    /// How its stdout and stderr are read.
    pub output: Output,
}

/// What was kept of one pipe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The first [`Bounds::kept`] bytes.
    pub bytes: Vec<u8>,
    /// Bytes read beyond those (0: all of it is kept).
    pub beyond: u64,
}

impl Kept {
    /// The bytes kept as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// How a child ended.
#[derive(Debug)]
pub enum End {
    /// It ended by itself.
    Exited(ExitStatus),
    /// Its time was up: killed with its process group.
    TimedOut,
    /// A stop was asked for: killed with its process group.
    Stopped,
    /// It could not be started; why, naming the program.
    NotStarted(String),
    /// It could no longer be waited for (why): killed with its process group.
    Lost(String),
}

/// What one child did.
#[derive(Debug)]
pub struct Ran {
    /// How it ended.
    pub end: End,
    /// Its stdout ([`Output::Together`]: stdout and stderr as they came).
    pub stdout: Kept,
    /// Its stderr ([`Output::Together`]: empty).
    pub stderr: Kept,
    /// From the call to the return.
    pub elapsed: Duration,
}

/// Runs `command` to its end, within `bounds.time`, killed (with its process group) as soon
/// as `stop` says so. Its stdin, stdout, stderr and process group are set here; its program,
/// arguments, environment and directory are the caller's.
pub fn run(mut command: Command, bounds: &Bounds, stop: impl Fn() -> bool) -> Ran {
    let started = Instant::now();
    let name = command.get_program().to_string_lossy().into_owned();
    let ran = |end: End, stdout: Kept, stderr: Kept| Ran {
        end,
        stdout,
        stderr,
        elapsed: started.elapsed(),
    };
    let not_started = |why: String| ran(End::NotStarted(why), Kept::default(), Kept::default());
    let pipes = match pipes(&mut command, bounds.output) {
        Ok(pipes) => pipes,
        Err(e) => return not_started(format!("{name}: no pipe for its output: {e}")),
    };
    command.stdin(Stdio::null()).process_group(0);
    let spawned = command.spawn();
    // Our ends of the pipes' writing sides go with `command`: each reader sees its end once
    // the child (and whatever it started) has closed theirs.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return not_started(format!("{name}: {e}")),
    };
    // Every reader holds a sender: the channel disconnects once all have read to the end.
    let (reading, all_read) = mpsc::channel::<()>();
    let [stdout, stderr] = pipes.map(|pipe| pipe.map(|p| reader(p, bounds.kept, reading.clone())));
    drop(reading);
    let end = loop {
        let why = match child.try_wait() {
            Ok(Some(status)) => break End::Exited(status),
            Ok(None) if stop() => End::Stopped,
            Ok(None) if started.elapsed() >= bounds.time => End::TimedOut,
            Ok(None) => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => End::Lost(e.to_string()),
        };
        // SAFETY: killpg only sends a signal; the group is the child's own, made at spawn
        // with the child's pid as its id, and the child is not yet reaped, so the id is
        // still its group's.
        unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = child.wait();
        break why;
    };
    // Nothing is sent: this returns once every reader is done, or at the grace's end.
    let _ = all_read.recv_timeout(OUTPUT_GRACE);
    let take = |kept: Option<Arc<Mutex<Kept>>>| {
        kept.map(|k| std::mem::take(&mut *k.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default()
    };
    ran(end, take(stdout.flatten()), take(stderr.flatten()))
}

/// The reading ends for stdout and stderr (`None`: none of its own), their writing ends set
/// on `command`.
fn pipes(command: &mut Command, output: Output) -> std::io::Result<[Option<PipeReader>; 2]> {
    let (out, out_writer) = std::io::pipe()?;
    match output {
        Output::Apart => {
            let (err, err_writer) = std::io::pipe()?;
            command.stdout(out_writer).stderr(err_writer);
            Ok([Some(out), Some(err)])
        }
        Output::Together => {
            let err_writer = out_writer.try_clone()?;
            command.stdout(out_writer).stderr(err_writer);
            Ok([Some(out), None])
        }
    }
}

/// What `pipe` carries, the first `kept` bytes, filled in by a thread of its own until the
/// pipe closes (`None`: no thread could be started; the pipe is then closed, so the child
/// is not blocked writing to it).
fn reader(
    mut pipe: PipeReader,
    kept: usize,
    reading: mpsc::Sender<()>,
) -> Option<Arc<Mutex<Kept>>> {
    let collected = Arc::new(Mutex::new(Kept::default()));
    let into = Arc::clone(&collected);
    std::thread::Builder::new()
        .name("child-output".into())
        .spawn(move || {
            let _reading = reading;
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut c = into.lock().unwrap_or_else(|e| e.into_inner());
                let room = kept.saturating_sub(c.bytes.len()).min(n);
                c.bytes.extend_from_slice(&buf[..room]);
                c.beyond += (n - room) as u64;
            }
        })
        .ok()
        .map(|_| collected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn bounds(time: Duration, output: Output) -> Bounds {
        Bounds {
            time,
            kept: 4096,
            output,
        }
    }

    #[test]
    fn status_and_output_are_kept_apart_or_together() {
        let script = "echo out; echo err >&2; exit 3";
        let ran = run(
            sh(script),
            &bounds(Duration::from_secs(10), Output::Apart),
            || false,
        );
        assert!(
            matches!(ran.end, End::Exited(s) if s.code() == Some(3)),
            "{ran:?}"
        );
        assert_eq!(
            (ran.stdout.text(), ran.stderr.text()),
            ("out\n".into(), "err\n".into())
        );
        let ran = run(
            sh(script),
            &bounds(Duration::from_secs(10), Output::Together),
            || false,
        );
        assert_eq!(
            (ran.stdout.text(), ran.stderr.text()),
            ("out\nerr\n".into(), String::new())
        );
    }

    #[test]
    fn the_time_limit_kills_the_whole_process_group() {
        let started = Instant::now();
        // The background sleep holds the pipe too: only its group's kill lets the readers end.
        let ran = run(
            sh("echo begun; sleep 60 & sleep 60"),
            &bounds(Duration::from_millis(300), Output::Together),
            || false,
        );
        assert!(matches!(ran.end, End::TimedOut), "{ran:?}");
        assert_eq!(ran.stdout.text(), "begun\n");
        // Well within the grace: nothing of the group was left holding the pipe.
        assert!(
            ran.elapsed < Duration::from_millis(300) + OUTPUT_GRACE / 2,
            "{ran:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn a_stop_is_honoured_within_a_bound() {
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = Arc::clone(&stop);
        let asked = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stopper.store(true, Ordering::Relaxed);
            Instant::now()
        });
        let ran = run(
            sh("sleep 60 & sleep 60"),
            &bounds(Duration::from_secs(60), Output::Apart),
            || stop.load(Ordering::Relaxed),
        );
        let asked = asked.join().unwrap();
        assert!(matches!(ran.end, End::Stopped), "{ran:?}");
        assert!(asked.elapsed() < Duration::from_millis(500), "{ran:?}");
    }

    #[test]
    fn output_is_kept_bounded_and_the_rest_counted() {
        let ran = run(
            sh("head -c 200000 /dev/zero | tr '\\0' x; head -c 5000 /dev/zero >&2"),
            &Bounds {
                time: Duration::from_secs(10),
                kept: 1000,
                output: Output::Apart,
            },
            || false,
        );
        assert!(matches!(ran.end, End::Exited(s) if s.success()), "{ran:?}");
        assert_eq!((ran.stdout.bytes.len(), ran.stdout.beyond), (1000, 199_000));
        assert_eq!((ran.stderr.bytes.len(), ran.stderr.beyond), (1000, 4000));
    }

    #[test]
    fn a_process_left_holding_the_pipe_holds_the_runner_no_longer_than_the_grace() {
        // Exited by itself, its background child still holding the pipe.
        let ran = run(
            sh("echo left; sleep 3 &"),
            &bounds(Duration::from_secs(10), Output::Apart),
            || false,
        );
        assert!(matches!(ran.end, End::Exited(s) if s.success()), "{ran:?}");
        assert_eq!(ran.stdout.text(), "left\n");
        assert!(
            ran.elapsed < OUTPUT_GRACE + Duration::from_millis(500),
            "{ran:?}"
        );
        // Killed at its limit, a grandchild in a session (and group) of its own holding it.
        let ran = run(
            sh("echo begun; setsid sleep 3 & sleep 60"),
            &bounds(Duration::from_millis(200), Output::Together),
            || false,
        );
        assert!(matches!(ran.end, End::TimedOut), "{ran:?}");
        assert_eq!(ran.stdout.text(), "begun\n");
        let bound = Duration::from_millis(200) + OUTPUT_GRACE + Duration::from_millis(500);
        assert!(
            ran.elapsed >= OUTPUT_GRACE && ran.elapsed < bound,
            "{ran:?}"
        );
    }

    #[test]
    fn a_missing_program_is_named() {
        let ran = run(
            Command::new("/nonexistent/program"),
            &bounds(Duration::from_secs(1), Output::Apart),
            || false,
        );
        assert!(
            matches!(&ran.end, End::NotStarted(why) if why.starts_with("/nonexistent/program: ")),
            "{ran:?}"
        );
    }
}
