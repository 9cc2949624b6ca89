//! `swdaq serve` as tests drive it through `swdaq ctl` or its HTTP API: on a free port, its
//! token kept under the test's own runtime directory, where `swdaq ctl` finds it.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use swdaq_app::control::client::Client;

pub struct Served {
    child: Child,
    /// Kept open until the server is gone: a server writing to a closed pipe dies.
    _stdout: BufReader<ChildStdout>,
    addr: String,
    /// The bearer token the server made, from the console's address it printed.
    token: String,
    runtime: PathBuf,
}

impl Served {
    /// `swdaq serve --config config`, its runtime directory beside the configuration.
    pub fn start(config: &Path) -> Self {
        let runtime = config.parent().unwrap().join("runtime");
        let mut child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["serve", "--addr", "127.0.0.1:0", "--config"])
            .arg(config)
            .env_remove("SWDAQ_TOKEN")
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let addr = first
            .trim()
            .strip_prefix("swdaq serve: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        let mut second = String::new();
        stdout.read_line(&mut second).unwrap();
        let token = second
            .trim()
            .split_once("#token=")
            .unwrap_or_else(|| panic!("unexpected second line {second:?}"))
            .1
            .to_owned();
        Self {
            child,
            _stdout: stdout,
            addr,
            token,
            runtime,
        }
    }

    /// A client of its HTTP API, with the token.
    pub fn client(&self) -> Client {
        Client::new(&self.addr, Some(&self.token))
    }

    /// Run control's own Prometheus text (`GET /metrics`, with the token).
    pub fn metrics(&self) -> String {
        ureq::get(format!("http://{}/metrics", self.addr))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    }

    /// `swdaq ctl ARGS`, however it ends.
    pub fn ctl_output(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["ctl", "--addr", &self.addr])
            .args(args)
            .env_remove("SWDAQ_TOKEN")
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .output()
            .unwrap()
    }

    /// `swdaq ctl ARGS` that must succeed; its JSON answer.
    pub fn ctl(&self, args: &[&str]) -> Value {
        let out = self.ctl_output(args);
        assert!(
            out.status.success(),
            "swdaq ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
