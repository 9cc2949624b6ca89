//! A child process watched to its end: killed (and the test failed) past a time limit, its
//! peak resident set read from `/proc` while it runs.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// The largest resident set `pid` has had (`VmHWM`), in kB; `None` once it has ended.
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What a watched child did.
pub struct Watched {
    pub output: Output,
    pub peak_rss_kb: u64,
}

impl Watched {
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Waits for `child` (spawned with piped stdout and stderr) at most `limit`: one still
/// running then is killed and the test fails with its standard error.
pub fn watch(mut child: Child, limit: Duration) -> Watched {
    let started = Instant::now();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        peak = peak.max(peak_rss_kb(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(10));
    }
    Watched {
        output: child.wait_with_output().unwrap(),
        peak_rss_kb: peak,
    }
}
