//! The XRootD client's programs (`xrdcp`, `xrdfs`) run with a time limit and a stop: each in
//! a process group of its own, killed with it (SIGKILL) when its time is up or a stop is
//! asked for, polled every few milliseconds; what it printed kept, bounded.

use crate::stop::Stop;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often a running child is looked at (and so how soon a stop kills it).
const POLL: Duration = Duration::from_millis(20);

/// The most of a child's output kept for a message.
const OUTPUT_KEPT: usize = 4096;

/// How long the output is waited for once the child has ended: a process it started outside
/// its group may hold the pipe open for ever.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// What a child that ran to its end said.
pub struct Finished {
    pub success: bool,
    pub code: Option<i32>,
    /// Its stdout then stderr, at most [`OUTPUT_KEPT`] bytes of each.
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` to its end, within `limit`; `Err` when it could not start, ran out of time
/// or was stopped (it is then killed with its process group, and reaped).
pub fn run(mut command: Command, limit: Duration, stop: &Stop) -> Result<Finished, String> {
    let name = command.get_program().to_string_lossy().into_owned();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    // Read on threads of their own, so a child that prints much never blocks on its pipe.
    let readers = [
        child.stdout.take().map(|o| reader(Box::new(o))),
        child.stderr.take().map(|e| reader(Box::new(e))),
    ];
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(format!("{name}: cannot wait for it: {e}")),
        }
        let why = if stop.requested() {
            Some("stopped".to_string())
        } else if started.elapsed() >= limit {
            Some(format!("no answer within {:.0} s", limit.as_secs_f64()))
        } else {
            None
        };
        if let Some(why) = why {
            kill_group(child.id());
            let _ = child.wait();
            break Err(format!("{name}: {why}: killed"));
        }
        std::thread::sleep(POLL);
    };
    let [stdout, stderr] = readers.map(|r| {
        r.and_then(|r| r.recv_timeout(OUTPUT_GRACE).ok())
            .unwrap_or_default()
    });
    let status = status?;
    Ok(Finished {
        success: status.success(),
        code: status.code(),
        stdout,
        stderr,
    })
}

/// What `pipe` carries, bounded, once it closes.
fn reader(mut pipe: Box<dyn Read + Send>) -> std::sync::mpsc::Receiver<String> {
    let (sender, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = OUTPUT_KEPT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        let _ = sender.send(String::from_utf8_lossy(&kept).into_owned());
    });
    output
}

fn kill_group(pid: u32) {
    // SAFETY: kill(2) with a negative pid signals that process group; the child leads its
    // own group (process_group(0)) and is not yet reaped, so the group is still its.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_killed_on_stop_and_on_its_time_limit_within_a_bounded_time() {
        let stop = Stop::default();
        let started = Instant::now();
        let mut sleeper = Command::new("sh");
        sleeper.args(["-c", "sleep 30; echo never"]);
        let e = run(sleeper, Duration::from_millis(200), &stop)
            .err()
            .unwrap();
        assert!(e.contains("no answer within"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let stopper = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stopper.request();
        });
        let started = Instant::now();
        let mut sleeper = Command::new("sh");
        sleeper.args(["-c", "sleep 30"]);
        let e = run(sleeper, Duration::from_secs(60), &stop).err().unwrap();
        assert!(e.contains("stopped"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo out; echo err >&2; exit 3"]);
        let done = run(echo, Duration::from_secs(10), &Stop::default()).unwrap();
        assert_eq!((done.success, done.code), (false, Some(3)));
        assert_eq!(
            (done.stdout.as_str(), done.stderr.as_str()),
            ("out\n", "err\n")
        );
    }
}
