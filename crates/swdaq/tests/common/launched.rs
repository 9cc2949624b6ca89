//! `swdaq run` on a topology as the multi-process tests drive it: started with `--json`, the
//! applications' pids read from its log, signals sent to them, the summary awaited (bounded).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `swdaq run` on a topology, its stderr read on a thread (application pids are taken from it).
pub struct Run {
    pub child: Child,
    pids: std::sync::mpsc::Receiver<(String, u32)>,
    stderr: std::sync::Arc<Mutex<String>>,
}

impl Run {
    pub fn start(config: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["run", "--json", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, pids) = std::sync::mpsc::channel();
        let stderr = std::sync::Arc::new(Mutex::new(String::new()));
        let text = std::sync::Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                // "swdaq run: builder-1 (builder) started as pid 1234[ on HOST]"
                if let Some((name, pid)) = line
                    .strip_prefix("swdaq run: ")
                    .and_then(|l| l.split_once(" started as pid "))
                {
                    let name = name.split(' ').next().unwrap().to_string();
                    let pid = pid.split(' ').next().unwrap().parse().unwrap();
                    let _ = tx.send((name, pid));
                }
                text.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Self {
            child,
            pids,
            stderr,
        }
    }

    pub fn pid_of(&self, app: &str) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Ok((name, pid)) = self
                .pids
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                panic!(
                    "{app} was never started; swdaq run said:\n{}",
                    self.stderr.lock().unwrap()
                );
            };
            if name == app {
                return pid;
            }
        }
    }

    /// Waits (bounded) until every application has been told to start (the launcher says so).
    pub fn wait_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .stderr
            .lock()
            .unwrap()
            .contains(" applications started")
        {
            assert!(
                Instant::now() < deadline,
                "never started: {}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the end: its exit status, standard output and standard error.
    pub fn wait(mut self) -> (std::process::ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("swdaq run did not end: {}", self.stderr.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(&mut self.child.stdout.take().unwrap(), &mut out).unwrap();
        let stderr = self.stderr.lock().unwrap().clone();
        (status, out, stderr)
    }

    /// Waits (bounded) for a successful end and returns the JSON summary.
    pub fn summary(self) -> Value {
        let (status, out, stderr) = self.wait();
        assert!(status.success(), "swdaq run failed ({status}): {stderr}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }
}

pub fn signal(pid: u32, signal: i32) {
    // SAFETY: sends a signal to a process this test started (through `swdaq run`).
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}
