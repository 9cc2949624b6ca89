//! `swdaq serve` driven over HTTP by a real client (ureq), as an operator would: the full run
//! cycle with new run numbers and files, illegal transitions, bad requests, tokens, concurrent
//! commands and a stop during start; `swdaq ctl` against it; what a web page, a rebound host
//! name or a slow client cannot make it do. Each test starts its own server on 127.0.0.1
//! (port chosen by the system) with its own runtime directory (where a server keeps the token
//! it makes); they run one at a time (the machine has two cores and each run takes data in
//! real time).

mod common;
use common::loopback_apps;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use swdaq_app::control::client::{Answer, Client};
use swdaq_store::RecordFileReader;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn config(dir: &Path) -> PathBuf {
    config_with(dir, "")
}

/// The chain as applications on loopback: a readout per link, trigger, dfo, one builder.
fn topology() -> String {
    "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\n".to_string() + &loopback_apps(1)
}

fn config_with(dir: &Path, extra: &str) -> PathBuf {
    let text = format!(
        "[run]\nduration_s = 0\nmetrics_addr = \"\"\nstatus_interval_s = 0.2\noutput_dir = {:?}\n\
         [emulator]\nlinks = 2\ntemplate_s = 0.05\n[readout]\nbuffer_s = 1.0\n\
         [trigger.periodic]\nenabled = true\nrate_hz = 20.0\n{extra}",
        dir.join("data")
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A `swdaq serve` child; killed when dropped.
struct Server {
    child: Child,
    addr: String,
    /// The console's address as the server printed it.
    console_url: String,
    /// `XDG_RUNTIME_DIR` of the server and of its `swdaq ctl`s.
    runtime: PathBuf,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        Self::with_config(&config(dir), extra)
    }

    fn with_config(config: &Path, extra: &[&str]) -> Self {
        let runtime = config.parent().unwrap().join("runtime");
        // On a port the system chooses, unless the test names one.
        let addr: &[&str] = if extra.contains(&"--addr") {
            &[]
        } else {
            &["--addr", "127.0.0.1:0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .arg("serve")
            .args(addr)
            .arg("--config")
            .arg(config)
            .args(extra)
            .env_remove("SWDAQ_TOKEN")
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let text = Arc::clone(&log);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut t = text.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("swdaq serve: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let console_url = line
            .trim()
            .strip_prefix("swdaq serve: console ")
            .unwrap_or_else(|| panic!("unexpected second line {line:?}"))
            .to_string();
        Self {
            child,
            addr,
            console_url,
            runtime,
            log,
        }
    }

    /// The token the server made (none when it was given one).
    fn token(&self) -> Option<&str> {
        self.console_url.split_once("#token=").map(|(_, t)| t)
    }

    fn client(&self) -> Client {
        Client::new(&self.addr, self.token())
    }

    /// A GET answered with any content: (status, content type, body), with a token if given.
    fn get_bytes(&self, path: &str, token: Option<&str>) -> (u16, String, Vec<u8>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent.get(format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            request = request.header("Authorization", format!("Bearer {t}"));
        }
        let mut response = request.call().unwrap();
        let kind = response
            .headers()
            .get("Content-Type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 24)
            .read_to_vec()
            .unwrap();
        (response.status().as_u16(), kind, body)
    }

    /// A raw request: any method, path and body bytes, with a bearer token if given.
    fn raw(&self, method: &str, path: &str, body: &[u8], token: Option<&str>) -> (u16, Value) {
        let authorization = token.map(|t| format!("Bearer {t}"));
        self.raw_authorized(method, path, body, authorization.as_deref())
    }

    /// A raw request with the `Authorization` header as given (and a body sent as JSON).
    fn raw_authorized(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        authorization: Option<&str>,
    ) -> (u16, Value) {
        let mut headers = vec![("Host", self.addr.as_str())];
        if let Some(a) = authorization {
            headers.push(("Authorization", a));
        }
        if !body.is_empty() {
            headers.push(("Content-Type", "application/json"));
        }
        let (status, _, body) = self.raw_with(method, path, body, &headers);
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// A request with exactly `headers` (and `Content-Length`), as a browser or a forger
    /// might send it: status, the answer's head (lowercase), body.
    fn raw_with(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, String, Vec<u8>) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        for (name, value) in headers {
            request += &format!("{name}: {value}\r\n");
        }
        request += &format!("Content-Length: {}\r\n\r\n", body.len());
        stream.write_all(request.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer with a head");
        let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head, answer[split + 4..].to_vec())
    }

    /// Whether the log says `text` within a few seconds (stderr is read on a thread).
    fn logged(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.log.lock().unwrap().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ok(answer: anyhow::Result<Answer>) -> Value {
    let a = answer.unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    a.body
}

fn state(server: &Server) -> String {
    ok(server.client().get("/state"))["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The closed HDF5 files of run `number`, each read through: (files, records).
fn files_of_run(dir: &Path, number: u32) -> (usize, usize) {
    files_named(dir, "swdaq", number)
}

/// The closed HDF5 files `<writer>_runNNNNNN_*.hdf5`, each read through: (files, records).
fn files_named(dir: &Path, writer: &str, number: u32) -> (usize, usize) {
    let prefix = format!("{writer}_run{number:06}_");
    let mut files = 0;
    let mut records = 0;
    for entry in std::fs::read_dir(dir.join("data")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with(&prefix) {
            continue;
        }
        assert!(name.ends_with(".hdf5"), "closed and renamed: {name}");
        files += 1;
        let reader = RecordFileReader::open(&path).unwrap();
        for r in reader.records().unwrap() {
            let r = r.unwrap();
            assert_eq!(r.header.run_number, number, "{name}");
            records += 1;
        }
    }
    (files, records)
}

#[test]
fn a_full_cycle_gives_each_run_its_number_files_and_summary() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let c = server.client();
    assert_eq!(state(&server), "initial");
    assert_eq!(ok(c.post("/configure", None))["state"], "configured");

    let started = ok(c.post("/start", Some(&json!({ "run_number": 5 }))));
    assert_eq!(started, json!({ "state": "running", "run_number": 5 }));
    std::thread::sleep(Duration::from_millis(800));
    let status = ok(c.get("/status"));
    assert_eq!(status["state"], "running");
    assert_eq!(status["run"]["run_number"], 5);
    let live = &status["run"]["live"];
    let frames = live["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["key"] == "frames")
        .unwrap();
    assert!(frames["value"].as_f64().unwrap() > 0.0, "{status}");
    assert!(
        live["series"]["input_mb_s"].as_f64().unwrap() > 0.0,
        "{status}"
    );
    assert_eq!(live["sources"].as_array().unwrap().len(), 2, "{status}");
    assert_eq!(status["model"], "chain");
    assert_eq!(
        status["commands"],
        json!(["stop", "pause", "trigger"]),
        "recording is off: no record"
    );

    assert_eq!(ok(c.post("/pause", None))["state"], "paused");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ok(c.post("/resume", None))["state"], "running");
    let change = json!({ "trigger": "periodic", "rate_hz": 50.0, "prescale": 2 });
    assert_eq!(ok(c.post("/trigger", Some(&change)))["state"], "running");
    std::thread::sleep(Duration::from_millis(500));
    let summary = ok(c.post("/stop", None));
    assert_eq!(summary["run_number"], 5);
    assert_eq!(summary["stop_reason"], "Interrupted");
    let decisions = summary["trigger"]["decisions"].as_u64().unwrap();
    assert!(decisions > 0, "{summary}");
    assert!(
        summary["trigger"]["paused_away"].as_u64().unwrap() > 0,
        "20 Hz periodic candidates passed over during 0.5 s of pause: {summary}"
    );
    assert_eq!(state(&server), "configured");
    let (files, records) = files_of_run(dir.path(), 5);
    assert!(files >= 1);
    console_shows_run_5(&server);
    assert_eq!(
        records as u64,
        summary["storage"]["records_written"].as_u64().unwrap()
    );

    // Again, without a number: the next one, new files; run 5's are left as they were.
    let again = ok(c.post("/start", None));
    assert_eq!(again["run_number"], 6);
    std::thread::sleep(Duration::from_millis(500));
    let summary6 = ok(c.post("/stop", None));
    assert_eq!(summary6["run_number"], 6);
    assert!(files_of_run(dir.path(), 6).0 >= 1);
    assert_eq!(files_of_run(dir.path(), 5), (files, records));
    assert_eq!(ok(c.get("/status"))["last_summary"]["run_number"], 6);

    for change in [
        "(token): Configure: initial -> configured",
        "(token): Start: configured -> starting (run 5)",
        "run 5: Started: starting -> running",
        "(token): Pause: running -> paused",
        "(token): Resume: paused -> running",
        "(token): ChangeTrigger: running -> running (periodic",
        "(token): Stop: running -> stopping (run 5)",
        "run 5: Ended: stopping -> configured",
    ] {
        assert!(
            server.logged(change),
            "{change:?} not logged:\n{}",
            server.log()
        );
    }
}

/// What the console reads after run 5 ended: the journal of its transitions (with the
/// refusal just asked for), its files, the history of its series, its last record drawn.
fn console_shows_run_5(server: &Server) {
    let c = server.client();
    let refused = c.post("/pause", None).unwrap();
    assert_eq!(refused.status, 409);
    let status = ok(c.get("/status"));
    assert_eq!(status["commands"], json!(["configure", "start", "trigger"]));
    let journal: Vec<&str> = status["journal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    for said in [
        "Configure: initial -> configured",
        "Start: configured -> starting (run 5)",
        "run 5: Started: starting -> running",
        "Pause: running -> paused",
        "run 5: Ended: stopping -> configured (Interrupted)",
        "POST /pause refused: cannot Pause in state configured",
    ] {
        assert!(
            journal.iter().any(|e| e.contains(said)),
            "{said}: {journal:#?}"
        );
    }
    let files = &status["files"][0];
    assert_eq!(files["run_number"], 5, "{status}");
    assert!(!files["files"].as_array().unwrap().is_empty(), "{status}");
    let history = ok(c.get("/history"));
    let t = history["t"].as_array().unwrap();
    assert!(t.len() >= 2, "{history}");
    assert!(
        history["input_mb_s"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_f64() > Some(0.0))
    );
    let last = t[t.len() - 1].as_f64().unwrap();
    let after = ok(c.get(&format!("/history?since={last}")));
    assert_eq!(after["t"], json!([]), "nothing after the last sample");
    let (code, kind, png) = server.get_bytes("/display.png", server.token());
    assert_eq!((code, kind.as_str()), (200, "image/png"));
    assert!(png.starts_with(b"\x89PNG"));
}

#[test]
fn a_restarted_server_goes_on_from_the_runs_on_disk_and_never_overwrites_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let take_a_run = |server: &Server, number: Option<u32>| {
        let c = server.client();
        let body = number.map(|n| json!({ "run_number": n }));
        let started = ok(c.post("/start", body.as_ref()));
        std::thread::sleep(Duration::from_millis(300));
        ok(c.post("/stop", None));
        started["run_number"].as_u64().unwrap() as u32
    };
    let server = Server::start(dir.path(), &[]);
    ok(server.client().post("/configure", None));
    assert_eq!(take_a_run(&server, None), 1);
    assert_eq!(take_a_run(&server, None), 2);
    drop(server);
    let run_1 = files_of_run(dir.path(), 1);
    assert!(run_1.0 >= 1);

    let server = Server::start(dir.path(), &[]);
    let c = server.client();
    ok(c.post("/configure", None));
    // A number that has files is refused with the file named; nothing of it changes.
    let refused = c.post("/start", Some(&json!({ "run_number": 1 }))).unwrap();
    assert_eq!(refused.status, 409, "{}", refused.body);
    let why = refused.body["error"].as_str().unwrap();
    assert!(
        why.contains("run 1 already has files") && why.contains("swdaq_run000001_"),
        "{why}"
    );
    assert_eq!(state(&server), "configured");
    assert_eq!(take_a_run(&server, None), 3);
    assert_eq!(files_of_run(dir.path(), 1), run_1);
}

#[test]
fn illegal_transitions_get_409_with_the_state() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let c = server.client();
    let refused = |path: &str, body: Option<Value>, state: &str| {
        let a = c.post(path, body.as_ref()).unwrap();
        assert_eq!(a.status, 409, "{path}: {}", a.body);
        assert_eq!(a.body["state"], state, "{path}: {}", a.body);
        assert!(
            a.body["error"].as_str().unwrap().contains(state),
            "{}",
            a.body
        );
    };
    refused("/start", None, "initial");
    refused("/stop", None, "initial");
    refused("/pause", None, "initial");
    ok(c.post("/configure", None));
    refused("/stop", None, "configured");
    refused("/resume", None, "configured");
    ok(c.post("/start", Some(&json!({ "run_number": 3 }))));
    refused("/resume", None, "running");
    refused("/configure", None, "running");
    refused("/start", None, "running");
    ok(c.post("/stop", None));
    let a = c.post("/start", Some(&json!({ "run_number": 3 }))).unwrap();
    assert_eq!(a.status, 409, "a run number used before: {}", a.body);
    assert!(a.body["error"].as_str().unwrap().contains("must increase"));
    assert_eq!(state(&server), "configured");
}

#[test]
fn bad_json_is_400_an_unknown_route_404() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    ok(server.client().post("/configure", None));
    for (path, body) in [
        ("/start", &b"{"[..]),
        ("/start", br#"{"run_number": "seven"}"#),
        ("/stop", b"please"),
        ("/trigger", br#"{"trigger": "periodic", "prescale": -1}"#),
        ("/trigger", br#"{"trigger": "cosmic", "prescale": 2}"#),
        ("/trigger", br#"{"trigger": "periodic", "prescale": 0}"#),
    ] {
        let (status, answer) = server.raw("POST", path, body, server.token());
        assert_eq!(status, 400, "{path} {body:?}: {answer}");
        assert!(!answer["error"].as_str().unwrap().is_empty());
    }
    for (method, path) in [("GET", "/nothing"), ("DELETE", "/state"), ("GET", "/start")] {
        let (status, answer) = server.raw(method, path, b"", server.token());
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }
    assert_eq!(state(&server), "configured", "nothing changed");
    assert_eq!(
        ok(server.client().get("/status"))["refused_requests"],
        json!({ "400": 6, "404": 3 }),
        "every refusal counted"
    );
}

/// A token as `openssl rand -hex 8` makes one: the shortest length accepted.
const TOKEN: &str = "3f9c0a7e5b1d2468";

#[test]
fn with_a_token_every_request_must_show_it_and_ctl_passes_it_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let server = Server::start(dir.path(), &["--token-file", token_file.to_str().unwrap()]);
    let (shorter, longer) = (&TOKEN[..TOKEN.len() - 1], format!("{TOKEN}0"));
    for token in [None, Some(shorter), Some(longer.as_str()), Some("")] {
        let (status, answer) = server.raw("POST", "/configure", b"", token);
        assert_eq!(status, 401, "{token:?}: {answer}");
        // A client without the token learns nothing of the system.
        assert_eq!(answer, json!({ "error": "missing or wrong bearer token" }));
        let (status, _) = server.raw("GET", "/state", b"", token);
        assert_eq!(status, 401);
    }
    assert_eq!(
        server.raw("POST", "/configure", b"", Some(TOKEN)),
        (200, json!({ "state": "configured" }))
    );
    // The scheme is case-insensitive.
    let lower = format!("bearer {TOKEN}");
    assert_eq!(
        server.raw_authorized("GET", "/state", b"", Some(&lower)),
        (200, json!({ "state": "configured" }))
    );
    assert!(server.logged("refused POST /configure: missing or wrong bearer token"));
    assert!(server.logged("(token): Configure: initial -> configured"));

    // The console's shell holds nothing about the system: served without the token; its
    // data routes are not.
    let (code, kind, page) = server.get_bytes("/", None);
    assert_eq!((code, kind.as_str()), (200, "text/html; charset=utf-8"));
    assert!(String::from_utf8_lossy(&page).contains("/console/console.js"));
    assert_eq!(server.get_bytes("/console/console.js", None).0, 200);
    for data in ["/history", "/display.png", "/status"] {
        assert_eq!(server.get_bytes(data, None).0, 401, "{data}");
        assert_eq!(server.get_bytes(data, Some(shorter)).0, 401, "{data}");
    }
    assert_eq!(server.get_bytes("/history", Some(TOKEN)).0, 200);
    let refused =
        ok(Client::new(&server.addr, Some(TOKEN)).get("/status"))["refused_requests"]["401"]
            .as_u64()
            .unwrap();
    assert!(refused >= 14, "every wrong token counted: {refused}");

    let ctl = |token: &Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["ctl", "--addr", &server.addr, "--token-file"])
            .arg(token)
            .args(args)
            .env_remove("SWDAQ_TOKEN")
            .output()
            .unwrap()
    };
    let out = ctl(&token_file, &["state"]);
    assert!(out.status.success());
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["state"], "configured");
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "nope").unwrap();
    let out = ctl(&wrong, &["start", "--run", "9"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing or wrong bearer token (HTTP 401"),
        "{err}"
    );
    let out = ctl(&token_file, &["pause"]);
    assert!(!out.status.success(), "pause while configured");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 409; state configured"), "{err}");
}

/// `swdaq serve` given `token` in a file: its error, having never listened.
fn refused_token(token: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["serve", "--addr", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .env_remove("SWDAQ_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first stdout line would say where it listens; it must end without one.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.is_empty() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(line, "", "never listened");
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_token_shorter_than_16_characters_is_refused_before_binding() {
    let err = refused_token("x");
    assert!(err.contains("fewer than 16"), "{err}");
}

/// A token no request head could carry was taken, then every request refused 431.
#[test]
fn a_token_too_long_for_a_request_head_is_refused_before_binding() {
    let err = refused_token(&"a".repeat(20_000));
    assert!(
        err.contains("20000 characters, more than 1024: clients could not send it"),
        "{err}"
    );
}

/// The server process's threads and resident memory in kB (`/proc`).
fn threads_and_rss_kb(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (field("Threads:"), field("VmRSS:"))
}

/// Reads the status code of the answer on `stream` (waiting at most `wait`).
fn status_code(stream: &mut TcpStream, wait: Duration) -> Option<u16> {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

#[test]
fn a_huge_head_is_refused_unread_and_idle_connections_are_bounded_and_reaped() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let server = Server::start(dir.path(), &["--token-file", token_file.to_str().unwrap()]);
    let pid = server.child.id();
    let (threads, rss_kb) = threads_and_rss_kb(pid);

    // 100 MB of header without a token: answered 431 after 16 KiB, the rest never read.
    let mut huge = TcpStream::connect(&server.addr).unwrap();
    huge.write_all(b"POST /configure HTTP/1.1\r\nX-Pad: ")
        .unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..100 {
        if huge.write_all(&chunk).is_err() {
            break;
        }
    }
    assert_eq!(status_code(&mut huge, Duration::from_secs(5)), Some(431));
    let (_, rss_after_kb) = threads_and_rss_kb(pid);
    assert!(
        rss_after_kb < rss_kb + 10_000,
        "resident memory grew from {rss_kb} to {rss_after_kb} kB"
    );

    // 100 idle connections: the first ones take the connection threads, the rest are
    // answered 503 at once; no thread is started for any of them.
    let mut idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    assert_eq!(
        status_code(idle.last_mut().unwrap(), Duration::from_secs(5)),
        Some(503)
    );
    let (threads_after, _) = threads_and_rss_kb(pid);
    assert!(
        threads_after <= threads,
        "{threads} threads before, {threads_after} with 100 idle connections"
    );
    // The idle ones are closed within the idle time-out (5 s).
    let started = Instant::now();
    let mut first = idle.swap_remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        matches!(first.read(&mut [0u8; 1]), Ok(0)),
        "closed by the server"
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    drop(idle);

    let (status, answer) = server.raw("GET", "/status", b"", Some(TOKEN));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["refused_requests"]["431"], 1, "{answer}");
    assert!(
        answer["refused_requests"]["503"].as_u64() >= Some(1),
        "{answer}"
    );
    assert!(server.logged("refused a request: request line and headers larger than 16384 bytes"));
}

#[test]
fn a_failed_configure_leaves_the_system_unconfigured_and_says_why() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let server = Server::with_config(&path, &[]);
    let c = server.client();
    ok(c.post("/configure", None));
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "[emulator]\nlinks = \"many\"\n").unwrap();
    let failed = c.post("/configure", None).unwrap();
    assert_eq!(failed.status, 500, "{}", failed.body);
    assert_eq!(failed.body["state"], "initial", "{}", failed.body);
    let status = ok(c.get("/status"));
    assert_eq!(status["state"], "initial");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("configure failed: "), "{status}");
    assert!(error.contains("serve.toml"), "{status}");
    // The old configuration is gone: no run starts from it.
    assert_eq!(c.post("/start", None).unwrap().status, 409);
    std::fs::write(&path, good).unwrap();
    ok(c.post("/configure", None));
    assert!(ok(c.get("/status"))["error"].is_null());
}

#[test]
fn listening_beyond_loopback_without_a_token_is_refused_before_binding() {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["serve", "--addr", "0.0.0.0:0"])
        .env_remove("SWDAQ_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without a token"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "never listened");
}

#[test]
fn concurrent_starts_and_stops_keep_one_consistent_state() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    ok(server.client().post("/configure", None));
    let started = Mutex::new(Vec::new());
    let stopped = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..6 {
            let (server, started, stopped) = (&server, &started, &stopped);
            s.spawn(move || {
                let c = server.client();
                for i in 0..4 {
                    let a = if (t + i) % 2 == 0 {
                        c.post("/start", None).unwrap()
                    } else {
                        c.post("/stop", None).unwrap()
                    };
                    match (a.status, a.body.get("run_number")) {
                        (200, Some(n)) if a.body.get("trigger").is_none() => {
                            started.lock().unwrap().push(n.as_u64().unwrap())
                        }
                        (200, Some(n)) => stopped.lock().unwrap().push(stored(n, &a.body)),
                        (409, _) => assert!(a.body["state"].is_string(), "{}", a.body),
                        other => panic!("unexpected answer {other:?}: {}", a.body),
                    }
                }
            });
        }
    });
    if state(&server) != "configured" {
        let summary = ok(server.client().post("/stop", None));
        stopped
            .lock()
            .unwrap()
            .push(stored(&summary["run_number"], &summary));
    }
    let mut started = started.into_inner().unwrap();
    let mut stopped = stopped.into_inner().unwrap();
    started.sort();
    stopped.sort();
    assert!(!started.is_empty());
    let stopped_numbers: Vec<u64> = stopped.iter().map(|s| s.0).collect();
    assert_eq!(
        started, stopped_numbers,
        "every run started was stopped once"
    );
    let mut distinct = started.clone();
    distinct.dedup();
    assert_eq!(distinct, started, "run numbers are never reused");
    assert_eq!(state(&server), "configured");
    for (n, records) in stopped {
        assert_eq!(
            files_of_run(dir.path(), n as u32).1,
            records,
            "run {n}'s files"
        );
    }
}

/// A stop's answer: the run's number and the records it stored.
fn stored(number: &Value, summary: &Value) -> (u64, usize) {
    let records = summary["storage"]["records_written"].as_u64().unwrap();
    (number.as_u64().unwrap(), records as usize)
}

#[test]
fn a_stop_during_start_stops_the_run_as_soon_as_it_is_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    ok(server.client().post("/configure", None));
    std::thread::scope(|s| {
        let start = s.spawn(|| ok(server.client().post("/start", None)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while state(&server) != "starting" {
            assert!(Instant::now() < deadline, "never seen starting");
            std::thread::sleep(Duration::from_millis(1));
        }
        let summary = ok(server.client().post("/stop", None));
        assert_eq!(summary["stop_reason"], "Interrupted");
        let started = start.join().unwrap();
        assert_ne!(started["state"], "running", "{started}");
        assert_eq!(started["run_number"], summary["run_number"]);
    });
    assert_eq!(state(&server), "configured");
    assert!(server.logged("Stop: starting -> stopping"));
}

#[test]
fn the_applications_of_a_topology_run_under_the_same_control() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::with_config(&config_with(dir.path(), &topology()), &[]);
    let c = server.client();
    ok(c.post("/configure", None));
    for number in [1, 2] {
        let started = ok(c.post("/start", Some(&json!({ "run_number": number }))));
        assert_eq!(started["state"], "running", "{started}");
        std::thread::sleep(Duration::from_millis(500));
        if number == 1 {
            ok(c.post("/pause", None));
            std::thread::sleep(Duration::from_millis(500));
            ok(c.post("/resume", None));
            let change = json!({ "trigger": "periodic", "prescale": 2 });
            ok(c.post("/trigger", Some(&change)));
            std::thread::sleep(Duration::from_millis(300));
        }
        let summary = ok(c.post("/stop", None));
        assert_eq!(summary["run_number"], number);
        assert_eq!(summary["apps"].as_array().unwrap().len(), 5, "{summary}");
        assert!(
            summary["apps"]
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["reported"] == true)
        );
        if number == 1 {
            assert!(
                summary["trigger"]["paused_away"].as_u64().unwrap() > 0,
                "the trigger application was paused: {summary}"
            );
        }
        let records = summary["storage"]["records_written"].as_u64().unwrap();
        assert_eq!(
            files_named(dir.path(), "swdaq_builder-0", number).1 as u64,
            records
        );
    }
    assert!(server.logged("run 2: Ended: stopping -> configured"));
}

const RECORDING: &str = "[recording]\nenabled = true\nseconds_after = 0.5\n";

/// Each link's burst in `summary`: (link, frames written, frames lost), and the files exist.
/// Frames the recorder lost (a loaded machine can starve it) are in its gaps, named up to 16.
fn recorded_links(summary: &Value) -> Vec<(u64, u64, u64)> {
    let bursts = summary["recording"]["bursts"].as_array().unwrap();
    assert_eq!(bursts.len(), 1, "{summary}");
    let mut links: Vec<_> = bursts[0]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let b = &l["burst"];
            let path = Path::new(b["path"].as_str().unwrap());
            assert!(path.exists(), "{}", path.display());
            let c = &b["counts"];
            let named: u64 = c["gaps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["frames"].as_u64().unwrap())
                .sum();
            let lost = c["frames_lost"].as_u64().unwrap();
            match c["gaps_unnamed"].as_u64().unwrap() {
                0 => assert_eq!(named, lost, "{c}"),
                _ => assert!(named < lost, "{c}"),
            }
            (
                l["link"].as_u64().unwrap(),
                c["frames_written"].as_u64().unwrap(),
                c["frames_lost"].as_u64().unwrap(),
            )
        })
        .collect();
    links.sort_unstable();
    links
}

#[test]
fn record_takes_a_burst_while_running_and_is_409_otherwise() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::with_config(&config_with(dir.path(), RECORDING), &[]);
    let c = server.client();
    ok(c.post("/configure", None));
    let refused = c.post("/record", None).unwrap();
    assert_eq!(refused.status, 409, "not running: {}", refused.body);
    ok(c.post("/start", None));
    std::thread::sleep(Duration::from_millis(1200));
    let answer = ok(c.post("/record", Some(&json!({ "seconds": 0.5 }))));
    assert_eq!(answer["recording"]["burst"], 1, "{answer}");
    let busy = c.post("/record", None).unwrap();
    assert_eq!(busy.status, 409, "a burst in progress: {}", busy.body);
    let bad = c.post("/record", Some(&json!({ "seconds": -1 }))).unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    std::thread::sleep(Duration::from_millis(1500));
    let summary = ok(c.post("/stop", None));
    assert_eq!(summary["recording"]["refused"], 1, "{summary}");
    let links = recorded_links(&summary);
    // What the 1 s buffer held and 0.5 s after (15 k frames), written or in named gaps.
    assert_eq!(links.iter().map(|l| l.0).collect::<Vec<_>>(), [0, 1]);
    for (link, frames, lost) in links {
        assert!(
            frames + lost > 20_000,
            "link {link}: {frames} frames, {lost} lost"
        );
    }
    assert_eq!(
        c.post("/record", None).unwrap().status,
        409,
        "after the run"
    );
}

#[test]
fn record_reaches_the_readout_applications_of_a_topology() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{RECORDING}{}", topology());
    let server = Server::with_config(&config_with(dir.path(), &extra), &[]);
    let c = server.client();
    ok(c.post("/configure", None));
    ok(c.post("/start", None));
    std::thread::sleep(Duration::from_millis(1200));
    ok(c.post("/record", None));
    std::thread::sleep(Duration::from_millis(2000));
    let summary = ok(c.post("/stop", None));
    let links = recorded_links(&summary);
    assert_eq!(
        links.iter().map(|l| l.0).collect::<Vec<_>>(),
        [0, 1],
        "{summary}"
    );
    assert!(links.iter().all(|l| l.1 > 0), "{links:?}");
}

/// `swdaq ctl` against `server`: its JSON answer, or its error message.
fn ctl(server: &Server, args: &[&str]) -> Result<Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["ctl", "--addr", &server.addr])
        .args(args)
        .env_remove("SWDAQ_TOKEN")
        .env("XDG_RUNTIME_DIR", &server.runtime)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The data files below `dir` of run `number` (HDF5, FRD, SW ROD raw), each found good by
/// `swdaq inspect`.
fn inspected_files_of_run(dir: &Path, number: u32) -> usize {
    let mut found = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            let file_name = path.file_name().unwrap().to_string_lossy();
            let of_run = swdaq_format::run_files::run_of_name(&file_name) == Some(number);
            let data = [".hdf5", ".raw", ".data"].iter().any(|e| name.ends_with(e));
            if path.is_dir() {
                pending.push(path);
            } else if of_run && data {
                let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
                    .args(["inspect", "--json"])
                    .arg(&path)
                    .output()
                    .unwrap();
                assert!(
                    inspect.status.success(),
                    "{name}: {}",
                    String::from_utf8_lossy(&inspect.stderr)
                );
                found += 1;
            }
        }
    }
    found
}

/// Every model, in one process and as applications, under the same run control: two runs
/// each driven by `swdaq ctl` (configure, start, pause and resume where the model has them,
/// stop), `/status` naming the model with its live figures, a command the model lacks
/// refused naming it, distinct run numbers and files `swdaq inspect` finds good.
/// The event builder paused by run control: no event incomplete, lost or expired however
/// long the pause, the time paused in the summary, and no events triggered while paused
/// (about 10 kHz over the run's time less the pause; a burst catching up would exceed it).
fn assert_an_event_builder_pause_cost_nothing(s: &serde_json::Value, model: impl std::fmt::Debug) {
    let paused = s["paused_s"].as_f64().unwrap();
    // The test waits 1.5 s between its pause and resume; the event manager counts from the
    // moment it fixed the point, a few milliseconds either way.
    assert!(
        (1.3..5.0).contains(&paused),
        "{model:?}: paused {paused} s: {s}"
    );
    for key in ["incomplete", "lost", "unaccounted", "ru_expired"] {
        assert_eq!(s[key], 0, "{model:?}: {key}: {s}");
    }
    let triggered = s["triggered"].as_f64().unwrap();
    let running = s["seconds"].as_f64().unwrap() - paused;
    assert!(
        triggered <= 10_000.0 * running * 1.2 + 2000.0,
        "{model:?}: {triggered} events in {running} s running: {s}"
    );
}

#[test]
fn every_model_runs_twice_under_swdaq_ctl() {
    use common::models::{EVERY_MODEL, Load, Model, config};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let server =
            Server::with_config(&config(dir.path(), model, &out, 0, Load::UntilStopped), &[]);
        let name = match model {
            Model::Chain | Model::ChainApps => "chain",
            Model::Evb | Model::EvbApps => "evb",
            Model::Swrod | Model::SwrodApps => "swrod",
        };
        assert_eq!(ctl(&server, &["configure"]).unwrap()["state"], "configured");
        for number in [1, 2] {
            let started = ctl(&server, &["start"]).unwrap();
            assert_eq!(started["run_number"], number, "{model:?}: {started}");
            let deadline = Instant::now() + Duration::from_secs(20);
            let status = loop {
                let status = ctl(&server, &["status"]).unwrap();
                if !status["run"]["live"].is_null() {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "{model:?}: no live figures: {status}"
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            assert_eq!(status["model"], name, "{status}");
            let live = &status["run"]["live"];
            assert_eq!(live["model"], name, "{status}");
            assert!(
                live["series"]["event_hz"].is_number(),
                "{model:?}: {status}"
            );
            assert!(!live["figures"].as_array().unwrap().is_empty(), "{status}");
            let commands = status["commands"].to_string();
            assert!(commands.contains("pause"), "{status}");
            assert_eq!(ctl(&server, &["pause"]).unwrap()["state"], "paused");
            if name == "evb" {
                // Longer than the builder units' and readout units' time-outs (1 s each).
                std::thread::sleep(Duration::from_millis(1500));
                let e = ctl(&server, &["record"]).unwrap_err();
                assert!(e.contains("no raw bursts"), "{e}");
            } else {
                std::thread::sleep(Duration::from_millis(300));
            }
            assert_eq!(ctl(&server, &["resume"]).unwrap()["state"], "running");
            if name == "swrod" {
                let e = ctl(&server, &["trigger", "random", "--prescale", "2"]).unwrap_err();
                assert!(e.contains("SW ROD has no trigger sources"), "{e}");
            }
            std::thread::sleep(Duration::from_millis(500));
            let summary = ctl(&server, &["stop"]).unwrap();
            assert_eq!(summary["run_number"], number, "{model:?}: {summary}");
            assert_eq!(summary["model"], name, "{summary}");
            assert_eq!(
                summary["stop_reason"], "Interrupted",
                "{model:?}: {summary}"
            );
            assert!(
                inspected_files_of_run(&out, number) > 0,
                "{model:?}: no files of run {number}"
            );
            if name == "evb" {
                assert_an_event_builder_pause_cost_nothing(&summary, model);
            }
        }
        assert_eq!(ctl(&server, &["state"]).unwrap()["state"], "configured");
    }
}

#[test]
fn a_server_given_no_token_makes_one_only_the_user_reads_and_ctl_and_the_console_get_it() {
    use std::os::unix::fs::PermissionsExt;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let token = server
        .token()
        .expect("the console URL carries the token")
        .to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert_eq!(
        server.console_url,
        format!("http://{}/#token={token}", server.addr)
    );
    let port = server.addr.rsplit_once(':').unwrap().1;
    let kept = server.runtime.join(format!("swdaq/serve-{port}.token"));
    assert_eq!(std::fs::read_to_string(&kept).unwrap().trim(), token);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kept), 0o600, "only the user reads the token");
    assert_eq!(mode(kept.parent().unwrap()), 0o700);
    assert!(server.logged(&format!("bearer token kept in {}", kept.display())));
    // Loopback is no proof any more: without the token, nothing.
    assert_eq!(server.raw("GET", "/state", b"", None).0, 401);
    assert_eq!(server.raw("POST", "/configure", b"", None).0, 401);
    // `swdaq ctl` needs no flag: it reads the token kept for the port.
    assert_eq!(ctl(&server, &["configure"]).unwrap()["state"], "configured");
    assert_eq!(ctl(&server, &["state"]).unwrap()["state"], "configured");
    // A server started again on the port keeps the token: a console left open goes on.
    let addr = server.addr.clone();
    drop(server);
    let again = Server::start(dir.path(), &["--addr", &addr]);
    assert_eq!(again.addr, addr);
    assert_eq!(again.token(), Some(token.as_str()));
    assert_eq!(ctl(&again, &["state"]).unwrap()["state"], "initial");
}

/// What a page of another origin, or of a host name rebound to 127.0.0.1, can send without
/// asking the server first — the token included, as if it had stolen it: none of it passes.
#[test]
fn requests_from_another_origin_or_host_name_or_not_json_are_refused_and_counted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--allow-host", "daq-01.example"]);
    let bearer = format!("Bearer {}", server.token().unwrap());
    let host = server.addr.as_str();
    let port = host.rsplit_once(':').unwrap().1;
    let rebound = format!("evil.example:{port}");
    let other_port = format!("http://127.0.0.1:{}", port.parse::<u16>().unwrap() ^ 1);
    let start = br#"{"run_number": 4242}"#;
    let json = ("Content-Type", "application/json");
    for (what, method, path, body, headers, code) in [
        (
            "a fetch(no-cors) from another site",
            "POST",
            "/configure",
            &b""[..],
            vec![
                ("Host", host),
                ("Origin", "http://evil.example"),
                ("Authorization", &bearer),
            ],
            403,
        ),
        (
            "a text/plain form from another port of this host",
            "POST",
            "/start",
            start,
            vec![
                ("Host", host),
                ("Origin", &other_port),
                ("Content-Type", "text/plain"),
                ("Authorization", &bearer),
            ],
            403,
        ),
        (
            "a sandboxed frame (Origin null)",
            "GET",
            "/status",
            b"",
            vec![
                ("Host", host),
                ("Origin", "null"),
                ("Authorization", &bearer),
            ],
            403,
        ),
        (
            "DNS rebinding: the page's own host name",
            "GET",
            "/status",
            b"",
            vec![("Host", &rebound), ("Authorization", &bearer)],
            421,
        ),
        (
            "DNS rebinding, same origin as far as the browser knows",
            "POST",
            "/configure",
            b"",
            vec![
                ("Host", &rebound),
                ("Origin", &format!("http://{rebound}")),
                ("Authorization", &bearer),
            ],
            421,
        ),
        (
            "no Host",
            "GET",
            "/state",
            b"",
            vec![("Authorization", &bearer)],
            400,
        ),
        (
            "a text/plain body",
            "POST",
            "/start",
            start,
            vec![
                ("Host", host),
                ("Content-Type", "text/plain"),
                ("Authorization", &bearer),
            ],
            415,
        ),
        (
            "a form",
            "POST",
            "/start",
            b"run_number=4242",
            vec![
                ("Host", host),
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Authorization", &bearer),
            ],
            415,
        ),
        (
            "a body without a type",
            "POST",
            "/start",
            start,
            vec![("Host", host), ("Authorization", &bearer)],
            415,
        ),
        (
            "a preflight",
            "OPTIONS",
            "/start",
            b"",
            vec![
                ("Host", host),
                ("Origin", "http://evil.example"),
                ("Access-Control-Request-Method", "POST"),
            ],
            403,
        ),
        (
            "the console's page asked from another origin",
            "GET",
            "/",
            b"",
            vec![("Host", host), ("Origin", "http://evil.example")],
            403,
        ),
        (
            "the console's own page, same origin",
            "POST",
            "/configure",
            b"{}",
            vec![
                ("Host", host),
                ("Origin", &format!("http://{host}")),
                json,
                ("Authorization", &bearer),
            ],
            200,
        ),
        (
            "the console through a TLS proxy in front",
            "GET",
            "/state",
            b"",
            vec![
                ("Host", "daq-01.example"),
                ("Origin", "https://daq-01.example"),
                ("Authorization", &bearer),
            ],
            200,
        ),
        (
            "ctl or curl: no Origin",
            "GET",
            "/state",
            b"",
            vec![("Host", "localhost"), ("Authorization", &bearer)],
            200,
        ),
        (
            "a host name the operator allowed",
            "GET",
            "/state",
            b"",
            vec![("Host", "DAQ-01.example:80"), ("Authorization", &bearer)],
            200,
        ),
        (
            "the console's page",
            "GET",
            "/",
            b"",
            vec![("Host", host)],
            200,
        ),
    ] {
        let (status, head, answer) = server.raw_with(method, path, body, &headers);
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, code, "{what}: {answer}");
        // No answer may be framed, and none is readable by another origin.
        assert!(
            head.contains("content-security-policy: frame-ancestors 'none'"),
            "{what}: {head}"
        );
        assert!(head.contains("x-frame-options: deny"), "{what}: {head}");
        assert!(!head.contains("access-control-allow"), "{what}: {head}");
        if code >= 400 {
            // Nothing about the system in a refusal.
            assert!(!answer.contains("state"), "{what}: {answer}");
        }
    }
    assert_eq!(
        state(&server),
        "configured",
        "only the console's own configure passed"
    );
    let status = ok(server.client().get("/status"));
    assert_eq!(status["refused_requests"]["403"], 5, "{status}");
    assert_eq!(status["refused_requests"]["421"], 2, "{status}");
    assert_eq!(status["refused_requests"]["415"], 3, "{status}");
    assert_eq!(status["refused_requests"]["400"], 1, "{status}");
    // None of them reached run control: the journal has the one configure, by the token.
    let journal = status["journal"].to_string();
    assert!(!journal.contains("4242"), "{journal}");
    assert!(journal.contains("(token)"), "{journal}");
    let (code, _, metrics) = server.get_bytes("/metrics", server.token());
    assert_eq!(code, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("swdaq_control_refused_requests_total{code=\"421\"} 2"),
        "{metrics}"
    );
    assert!(server.logged("refused GET /status: this server does not answer to \"evil.example\""));
}

#[test]
fn a_run_number_far_beyond_the_last_is_taken_only_when_confirmed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    ok(server.client().post("/configure", None));
    // The forged request of issue 33: it would use every number up.
    let (status, answer) = server.raw(
        "POST",
        "/start",
        br#"{"run_number": 4294967295}"#,
        server.token(),
    );
    assert_eq!(status, 409, "{answer}");
    let why = answer["error"].as_str().unwrap();
    assert!(why.contains("\"confirm_jump\": true"), "{why}");
    assert_eq!(answer["state"], "configured");
    let err = ctl(&server, &["start", "--run", "5000"]).unwrap_err();
    assert!(err.contains("more than 1000"), "{err}");
    assert!(
        !dir.path().join("data").join(".swdaq-last-run").exists(),
        "nothing claimed"
    );
    // Confirmed, it is taken; the next free number follows it.
    let started = ctl(&server, &["start", "--run", "5000", "--confirm-jump"]).unwrap();
    assert_eq!(started["run_number"], 5000);
    ctl(&server, &["stop"]).unwrap();
    let next = ctl(&server, &["start"]).unwrap();
    assert_eq!(next["run_number"], 5001);
    ctl(&server, &["stop"]).unwrap();
}

#[test]
fn refusals_are_counted_each_but_logged_at_a_bounded_rate() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for _ in 0..300 {
        assert_eq!(
            server
                .raw("GET", "/state", b"", Some("0123456789abcdef0"))
                .0,
            401
        );
    }
    let status = ok(server.client().get("/status"));
    assert_eq!(status["refused_requests"]["401"], 300, "{status}");
    std::thread::sleep(Duration::from_millis(300));
    let lines = server
        .log()
        .lines()
        .filter(|l| l.contains(": refused "))
        .count();
    assert!(
        (1..=20).contains(&lines),
        "{lines} lines for 300 refusals:\n{}",
        server.log()
    );
}

/// The slow loris of issue 33: 20 clients sending a request one byte a second, again as soon
/// as they are cut off. The operator's requests are all answered the while.
#[test]
fn slow_clients_do_not_starve_the_operator() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lorises: Vec<_> = (0..20)
        .map(|_| {
            let (done, addr) = (Arc::clone(&done), server.addr.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        continue;
                    };
                    for byte in b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1" {
                        if done.load(std::sync::atomic::Ordering::Relaxed)
                            || s.write_all(&[*byte]).is_err()
                        {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    // A new connection each time, as `swdaq ctl` makes (a kept-alive one would not show it).
    let until = Instant::now() + Duration::from_secs(8);
    let mut codes = Vec::new();
    while Instant::now() < until {
        codes.push(server.raw("GET", "/state", b"", server.token()).0);
        std::thread::sleep(Duration::from_millis(100));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered = codes.iter().filter(|c| **c == 200).count();
    assert_eq!(
        answered,
        codes.len(),
        "{answered} of {} answered: {codes:?}",
        codes.len()
    );
    for l in lorises {
        l.join().unwrap();
    }
}

/// The event builder's section: FED 0's fragments of 1024 bytes, FED 1's of `fed1_bytes`, and
/// `rest` (how many events, paced or not) beside them.
fn evb_two_feds(fed1_bytes: u32, rest: &str) -> String {
    format!(
        "[evb]\nbuilder_units = 1\nmin_free_bytes = 0\n{rest}\nrus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, \
         {{ id = 1, mean_bytes = {fed1_bytes}, spread_bytes = 128 }}]]\n\
         [dqm]\nenabled = true\nsample_every = 1\nqueue = 8192\nmax_core_share = 1.0\n"
    )
}

/// `GET /dqm` until `done` holds of its answer, at most `within`; the last answer.
fn dqm_until(server: &Server, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let answer = ok(server.client().get("/dqm"));
        if done(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {answer}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Under `swdaq serve`, an event-builder run with `[dqm]` is monitored online as under
/// `swdaq run`, and `GET /dqm` shows it: refused without the token; before any run an empty
/// answer saying why; while a run whose FED 1 has grown lasts, every histogram with its axis
/// and counts and its verdict against the reference run, worst first, FED 1's size histogram
/// Bad, FED 0's not; after the stop, the run's final set.
#[test]
fn get_dqm_shows_a_served_runs_histograms_worst_first() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let run_keys = format!("[run]\nmetrics_addr = \"\"\noutput_dir = {out:?}\n");
    let reference_config = dir.path().join("reference.toml");
    std::fs::write(
        &reference_config,
        run_keys.clone()
            + "duration_s = 30\n"
            + &evb_two_feds(1024, "max_events = 5000\npaced = false\nseed = 1"),
    )
    .unwrap();
    let reference = common::swdaq_run_json(&reference_config);
    let reference_run = reference["run_number"].as_u64().unwrap();
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        run_keys
            + "duration_s = 0\n"
            + &evb_two_feds(2048, "trigger_rate_hz = 2000\nseed = 2")
            + &format!("reference_run = {reference_run}\njudge_interval_s = 0.5\n"),
    )
    .unwrap();
    let server = Server::with_config(&config, &[]);

    let (code, refused) = server.raw("GET", "/dqm", b"", None);
    assert_eq!(code, 401, "{refused}");
    assert!(refused.get("histograms").is_none(), "{refused}");
    let none = ok(server.client().get("/dqm"));
    assert_eq!(none["enabled"], false, "{none}");
    assert_eq!(none["histograms"], json!([]), "{none}");
    assert_eq!(none["why"], "no run yet", "{none}");

    ok(server.client().post("/configure", None));
    let started = ok(server.client().post("/start", None));
    let run = started["run_number"].as_u64().unwrap();
    assert!(run > reference_run, "{started}");
    // The grown FED's size histogram is Bad, and so is the events' size (it grew with it):
    // both come before every other, the first by name among equals.
    let fed1_bad = |answer: &Value| {
        let histograms = answer["histograms"].as_array().unwrap();
        let fed1 = histograms.iter().position(|h| h["name"] == "fed_size_0001");
        fed1.is_some_and(|i| {
            histograms[..=i]
                .iter()
                .all(|h| h["verdict"]["quality"] == "Bad")
        })
    };
    let live = dqm_until(&server, Duration::from_secs(20), fed1_bad);
    assert_eq!(
        (&live["enabled"], &live["running"], &live["last"]),
        (&json!(true), &json!(true), &json!(false)),
        "{live}"
    );
    assert_eq!(live["run_number"], run, "{live}");
    assert_eq!(live["reference_run"], reference_run, "{live}");
    let reference_set =
        swdaq_dqm::hdf5_file::load(&out.join(format!("dqm_run{reference_run:06}.h5"))).unwrap();
    assert!(live["judged_at_unix"].as_f64().unwrap() > 0.0, "{live}");
    assert!(live["samples"]["sampled"].as_u64().unwrap() > 0, "{live}");
    assert!(live["samples"]["dropped"].is_u64(), "{live}");
    let histograms = live["histograms"].as_array().unwrap();
    assert_eq!(histograms.len(), live["histograms_total"], "{live}");
    assert!(live["qualities"]["bad"].as_u64().unwrap() >= 1, "{live}");
    let rank = |h: &Value| match h["verdict"]["quality"].as_str() {
        Some("Bad") => 0,
        Some("Undetermined") => 1,
        Some("Good") => 2,
        other => panic!("{other:?}: {h}"),
    };
    let ranks: Vec<u8> = histograms.iter().map(rank).collect();
    assert!(ranks.is_sorted(), "not worst first: {ranks:?}");
    for h in histograms {
        let axis = &h["axis"];
        let bins = axis["bins"].as_u64().unwrap();
        assert!(
            axis["lo"].as_f64().unwrap() < axis["hi"].as_f64().unwrap(),
            "{h}"
        );
        assert!(axis["label"].is_string() && axis["unit"].is_string(), "{h}");
        assert!(h["title"].as_str().is_some_and(|t| !t.is_empty()), "{h}");
        let counts: Vec<u64> = (h["counts"].as_array().unwrap().iter())
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(counts.len() as u64, bins, "{h}");
        let sum = counts.iter().sum::<u64>()
            + h["underflow"].as_u64().unwrap()
            + h["overflow"].as_u64().unwrap();
        assert_eq!(sum, h["entries"].as_u64().unwrap(), "{h}");
        assert!(h["verdict"]["reason"].is_string(), "{h}");
        // The reference run's histogram to draw beside it, as that run saved it.
        let saved = &reference_set.histograms[h["name"].as_str().unwrap()];
        assert_eq!(h["reference"]["counts"], json!(saved.bins()), "{h}");
        assert_eq!(h["reference"]["events"], reference_set.events, "{h}");
    }
    let fed0 = histograms
        .iter()
        .find(|h| h["name"] == "fed_size_0000")
        .unwrap();
    assert_ne!(fed0["verdict"]["quality"], "Bad", "{fed0}");

    ok(server.client().post("/stop", None));
    let ended = ok(server.client().get("/dqm"));
    assert_eq!(
        (&ended["running"], &ended["last"], &ended["run_number"]),
        (&json!(false), &json!(true), &json!(run)),
        "{ended}"
    );
    assert!(fed1_bad(&ended), "{ended}");
}

/// `POST /dqm/published` (a user's analyzer, `swdaq.dqm`): refused without the token and
/// before any run; a set that is not one refused with its reason and nothing kept (too large
/// a body is refused before any route, as `http_server`'s tests show); a good one kept for the run going on, judged against the reference it came
/// with and shown in `GET /dqm` among the histograms (here the run's built-in monitoring is
/// off) under the analyzer's name; a new run starts without it.
#[test]
fn post_dqm_published_is_checked_judged_and_shown_for_the_run_going_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    let evb = evb_two_feds(1024, "trigger_rate_hz = 200\nseed = 2");
    let without_dqm = evb.split("[dqm]").next().unwrap();
    std::fs::write(
        &config,
        format!(
            "[run]\nmetrics_addr = \"\"\noutput_dir = {:?}\nduration_s = 0\n{without_dqm}",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let server = Server::with_config(&config, &[]);
    let set = |centre: f64| {
        let mut set = swdaq_dqm::HistSet::new();
        set.events = 1000;
        let axis = swdaq_dqm::Axis::new("size", "bytes", 20, 0.0, 20.0);
        let h = set.entry("x", || swdaq_dqm::Hist1::new("x", "a size", axis).unwrap());
        for i in 0..1000 {
            h.fill(centre + (i % 5) as f64 - 2.0);
        }
        serde_json::to_value(&set).unwrap()
    };
    let publication = json!({ "analyzer": "sizes", "set": set(14.0), "reference": set(5.0) });
    let body = serde_json::to_vec(&publication).unwrap();

    let (code, refused) = server.raw("POST", "/dqm/published", &body, None);
    assert_eq!(code, 401, "{refused}");
    let token = server.token().map(str::to_owned);
    let post = |body: &[u8]| server.raw("POST", "/dqm/published", body, token.as_deref());
    let (code, refused) = post(&body);
    assert_eq!(
        (code, refused["error"].as_str()),
        (400, Some("no run yet: nothing to publish for"))
    );

    ok(server.client().post("/configure", None));
    let run = ok(server.client().post("/start", None))["run_number"].clone();
    let mut broken = publication.clone();
    broken["set"]["histograms"]["x"]["counts"] = json!([1, 2]);
    let (code, refused) = post(&serde_json::to_vec(&broken).unwrap());
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("2 counts for 20 bins"),
        "{refused}"
    );
    assert_eq!(ok(server.client().get("/dqm"))["histograms"], json!([]));

    let (code, kept) = post(&body);
    assert_eq!(code, 200, "{kept}");
    assert_eq!(
        (&kept["run_number"], &kept["judged"]),
        (&run, &json!(true)),
        "{kept}"
    );
    let shown = ok(server.client().get("/dqm"));
    assert_eq!(
        shown["enabled"], false,
        "the run's own monitoring is off: {shown}"
    );
    assert_eq!(shown["analyzers"][0]["name"], "sizes", "{shown}");
    let h = &shown["histograms"][0];
    assert_eq!(
        (&h["name"], &h["source"]),
        (&json!("sizes.x"), &json!("analyzer sizes")),
        "{h}"
    );
    assert_eq!(h["verdict"]["quality"], "Bad", "{h}");
    assert_eq!(h["reference"]["label"], "sizes's reference", "{h}");
    assert_eq!(h["entries"], 1000, "{h}");

    ok(server.client().post("/stop", None));
    assert_eq!(
        ok(server.client().get("/dqm"))["histograms"][0]["name"],
        "sizes.x"
    );
    ok(server.client().post("/start", None));
    let next = ok(server.client().get("/dqm"));
    assert_eq!(next["histograms"], json!([]), "{next}");
    ok(server.client().post("/stop", None));
}

/// `GET /runs`: behind the token, refused before a configuration names the registry, then
/// the registry's runs newest first, each with its files and the logbook entries given to it.
#[test]
fn get_runs_lists_the_registry_s_runs_newest_first_with_files_and_logbook() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let c = server.client();
    let (code, refused) = server.raw("GET", "/runs", b"", None);
    assert_eq!(code, 401, "{refused}");
    assert!(refused.get("runs").is_none(), "{refused}");
    let (code, unconfigured) = server.raw("GET", "/runs", b"", server.token());
    assert_eq!(code, 409, "{unconfigured}");
    assert!(
        unconfigured["error"]
            .as_str()
            .unwrap()
            .contains("configure first"),
        "{unconfigured}"
    );

    ok(c.post("/configure", None));
    // The guard stands before these routes as before every other: another site's page and a
    // rebound host name get nothing, even with the token.
    let bearer = format!("Bearer {}", server.token().unwrap());
    let host = server.addr.as_str();
    let rebound = format!("evil.example:{}", host.rsplit_once(':').unwrap().1);
    let entry = br#"{"text": "from another site"}"#;
    for (method, path, body, headers, code) in [
        (
            "GET",
            "/runs",
            &b""[..],
            vec![
                ("Host", host),
                ("Origin", "http://evil.example"),
                ("Authorization", &bearer),
            ],
            403,
        ),
        (
            "GET",
            "/runs",
            b"",
            vec![("Host", &rebound), ("Authorization", &bearer)],
            421,
        ),
        (
            "POST",
            "/log",
            entry,
            vec![
                ("Host", host),
                ("Origin", "http://evil.example"),
                ("Content-Type", "text/plain"),
                ("Authorization", &bearer),
            ],
            403,
        ),
    ] {
        let (status, _, answer) = server.raw_with(method, path, body, &headers);
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, code, "{method} {path}: {answer}");
        assert!(!answer.contains("registry"), "{answer}");
    }
    for number in [3, 4] {
        ok(c.post("/start", Some(&json!({ "run_number": number }))));
        std::thread::sleep(Duration::from_millis(500));
        ok(c.post("/stop", None));
    }
    ok(c.post(
        "/log",
        Some(&json!({ "text": "HV trip", "run_number": 3, "author": "shifter" })),
    ));
    let answer = ok(c.get("/runs"));
    let runs = answer["runs"].as_array().unwrap();
    let numbers: Vec<u64> = runs.iter().map(|r| r["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [4, 3], "{answer}");
    assert!(
        answer["registry"]
            .as_str()
            .unwrap()
            .ends_with("swdaq-runs.sqlite"),
        "{answer}"
    );
    for run in runs {
        assert!(run["stopped_at"].is_string(), "{run}");
        assert!(run["files"].as_u64().unwrap() > 0, "{run}");
        assert!(run["bytes"].as_u64().unwrap() > 0, "{run}");
    }
    assert_eq!(runs[0]["logbook"], json!([]));
    let entries = runs[1]["logbook"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{answer}");
    assert_eq!(
        (&entries[0]["author"], &entries[0]["text"]),
        (&json!("shifter"), &json!("HV trip"))
    );
}
