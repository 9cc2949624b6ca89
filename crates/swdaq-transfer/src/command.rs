//! The XRootD client's programs (`xrdcp`, `xrdfs`) run with a time limit and the transfer's
//! stop by swdaq's one child runner (`swdaq_child`: its own process group killed whole,
//! output read on threads, waited for at most a second once it ends); here what the transfer
//! keeps of them — a success or a one-line reason, stdout and stderr apart, 4 KiB of each.

use crate::stop::Stop;
use std::process::Command;
use std::time::Duration;
use swdaq_child::{Bounds, End, Output};

/// The most of a child's output kept for a message.
const OUTPUT_KEPT: usize = 4096;

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
pub fn run(command: Command, limit: Duration, stop: &Stop) -> Result<Finished, String> {
    let name = command.get_program().to_string_lossy().into_owned();
    let bounds = Bounds {
        time: limit,
        kept: OUTPUT_KEPT,
        output: Output::Apart,
    };
    let ran = swdaq_child::run(command, &bounds, || stop.requested());
    match ran.end {
        End::Exited(status) => Ok(Finished {
            success: status.success(),
            code: status.code(),
            stdout: ran.stdout.text(),
            stderr: ran.stderr.text(),
        }),
        End::TimedOut => Err(format!(
            "{name}: no answer within {:.0} s: killed",
            limit.as_secs_f64()
        )),
        End::Stopped => Err(format!("{name}: stopped: killed")),
        End::NotStarted(why) => Err(format!("cannot run {why}")),
        End::Lost(why) => Err(format!("{name}: cannot wait for it: {why}: killed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
