//! `swdaq serve`'s HTTP JSON API over [`RunControl`] (requests are understood by
//! `swdaq_control::parse_request`, where the routes are):
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `GET /state` | | `{"state"}` |
//! | `GET /status` | | state, the run going on with the live view's figures, the last summary or error, requests refused by status code |
//! | `POST /configure` | none or `{}` | reloads the configuration |
//! | `POST /start` | `{"run_number": N}` (optional) | once data taking has begun: `{"state", "run_number"}` |
//! | `POST /stop` | | once stopped: the run's summary (`swdaq run --json`'s, with `run_number`) |
//! | `POST /pause`, `POST /resume` | | triggers off / on; readout goes on |
//! | `POST /trigger` | `{"trigger", "prescale"?, "rate_hz"?}` | a source's prescale or rate |
//! | `POST /record` | `{"seconds"?}` | a raw burst of every link: `{"state", "recording"}` (409 when not taking data, recording off or a burst in progress) |
//!
//! Errors are `{"error", "state"}`: 409 for a command the state does not allow (or a run
//! number already used), 400 for a body that is not what the route takes, 401 without the
//! token, 404 for another route, 503 when the running trigger cannot take a request now, 500
//! when the configuration or the run failed.

use super::auth::Token;
use super::system::{ControlError, RunControl};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use swdaq_control::{Command, parse_request};
use tiny_http::{Header, Request, Response, Server};

/// Bodies larger than this are refused (every command's body is a few bytes).
const MAX_BODY: u64 = 64 * 1024;
/// Requests handled at once: a stop waiting for its run must not hold up `/status`.
const WORKERS: usize = 4;

/// Carries out `command`: the status code and JSON answer.
pub fn execute(control: &RunControl, command: Command, who: &str) -> (u16, Value) {
    let result = match command {
        Command::State => Ok(json!({ "state": control.state() })),
        Command::Status => Ok(control.status()),
        Command::Configure => control.configure(who),
        Command::Start { run_number } => control.start(run_number, who),
        Command::Stop => control.stop(who),
        Command::Pause => control.pause(who),
        Command::Resume => control.resume(who),
        Command::ChangeTrigger(change) => control.change_trigger(change, who),
        Command::Record { seconds } => control.record(seconds, who),
    };
    match result {
        Ok(answer) => (200, answer),
        Err(e) => {
            let code = match e {
                ControlError::Illegal(_) | ControlError::Conflict(_) => 409,
                ControlError::BadRequest(_) => 400,
                ControlError::Busy(_) => 503,
                ControlError::Failed(_) => 500,
            };
            (
                code,
                json!({ "error": e.to_string(), "state": control.state() }),
            )
        }
    }
}

/// The HTTP server: worker threads over one listening socket.
pub struct ControlServer {
    server: Arc<Server>,
    closing: Arc<AtomicBool>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Listens on `addr` (checked against `token` by the caller) and serves `control`.
    pub fn start(
        addr: SocketAddr,
        token: Option<Token>,
        control: Arc<RunControl>,
    ) -> anyhow::Result<Self> {
        let server = Arc::new(
            Server::http(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?,
        );
        let closing = Arc::new(AtomicBool::new(false));
        let token = Arc::new(token);
        let refused = Arc::new(Refused::default());
        let workers = (0..WORKERS)
            .map(|i| {
                let (server, closing) = (Arc::clone(&server), Arc::clone(&closing));
                let (token, control) = (Arc::clone(&token), Arc::clone(&control));
                let refused = Arc::clone(&refused);
                std::thread::Builder::new()
                    .name(format!("control-http-{i}"))
                    .spawn(move || {
                        while !closing.load(Ordering::Relaxed) {
                            if let Ok(Some(request)) =
                                server.recv_timeout(Duration::from_millis(100))
                            {
                                handle(request, token.as_ref().as_ref(), &control, &refused);
                            }
                        }
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            server,
            closing,
            workers,
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> anyhow::Result<SocketAddr> {
        self.server
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow::anyhow!("the control server is not on an IP socket"))
    }

    /// Stops taking requests and waits for those being handled.
    pub fn stop(self) {
        self.closing.store(true, Ordering::Relaxed);
        self.server.unblock();
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// Requests answered with an error since the server started, by status code (in `/status`).
#[derive(Default)]
struct Refused(Mutex<BTreeMap<u16, u64>>);

impl Refused {
    fn count(&self, code: u16) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(code)
            .or_default() += 1;
    }

    fn to_json(&self) -> Value {
        json!(*self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn handle(mut request: Request, token: Option<&Token>, control: &RunControl, refused: &Refused) {
    let peer = request
        .remote_addr()
        .map_or("unknown peer".into(), |a| a.to_string());
    let authorization = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_owned());
    let who = match token {
        Some(_) => format!("{peer} (token)"),
        None => format!("{peer} (loopback, no token)"),
    };
    let (code, answer) = if token.is_some_and(|t| !t.admits(authorization.as_deref())) {
        eprintln!(
            "{} swdaq serve: {peer}: refused {} {}: missing or wrong token",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
            request.method(),
            request.url()
        );
        (
            401,
            json!({ "error": "missing or wrong bearer token", "state": control.state() }),
        )
    } else {
        let mut body = Vec::new();
        let read = request
            .as_reader()
            .take(MAX_BODY + 1)
            .read_to_end(&mut body);
        let method = request.method().as_str().to_owned();
        match read {
            Err(e) => (
                400,
                json!({ "error": format!("cannot read the body: {e}") }),
            ),
            Ok(_) if body.len() as u64 > MAX_BODY => (
                400,
                json!({ "error": format!("body larger than {MAX_BODY} bytes") }),
            ),
            Ok(_) => match parse_request(&method, request.url(), &body) {
                Ok(command) => {
                    let is_status = command == Command::Status;
                    let (code, mut answer) = execute(control, command, &who);
                    if is_status {
                        answer["refused_requests"] = refused.to_json();
                    }
                    (code, answer)
                }
                Err(e) => (
                    e.status_code(),
                    json!({ "error": e.to_string(), "state": control.state() }),
                ),
            },
        }
    };
    if code >= 400 {
        refused.count(code);
    }
    respond(request, code, &answer);
}

fn respond(request: Request, code: u16, answer: &Value) {
    let body = serde_json::to_vec_pretty(answer).unwrap_or_default();
    let mut response = Response::from_data(body).with_status_code(code);
    if let Ok(h) = Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]) {
        response.add_header(h);
    }
    if code == 401
        && let Ok(h) = Header::from_bytes(&b"WWW-Authenticate"[..], &b"Bearer"[..])
    {
        response.add_header(h);
    }
    let _ = request.respond(response);
}
