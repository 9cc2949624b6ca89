//! `swdaq serve`'s HTTP JSON API over [`RunControl`] (requests are understood by
//! `swdaq_control::parse_request`, where the routes are):
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `GET /state` | | `{"state"}` |
//! | `GET /status` | | state, the configured model, the commands legal now, the trigger sources a change may name, the run going on with its `Live` figures, the last summary (JSON and text) or error, the journal, alerts, output disks and files, requests refused by status code |
//! | `POST /configure` | none or `{}` | reloads the configuration |
//! | `POST /start` | `{"run_number": N}` (optional) | once data taking has begun: `{"state", "run_number"}` |
//! | `POST /stop` | | once stopped: the run's summary (`swdaq run --json`'s, with `run_number`) |
//! | `POST /pause`, `POST /resume` | | triggers off / on; readout goes on |
//! | `POST /trigger` | `{"trigger", "prescale"?, "rate_hz"?}` | a source's prescale or rate |
//! | `POST /record` | `{"seconds"?}` | a raw burst of every link: `{"state", "recording"}` (409 when not taking data, recording off or a burst in progress) |
//! | `GET /`, `GET /console/*` | | the operator's console (no token needed: the page holds nothing about the system) |
//! | `GET /history` | `?since=T` (optional) | the live series of the last ten minutes, column by column (`control::history`) |
//! | `GET /latest-event` | | the newest stored event read back from the run's files: `file`, `event`, `bytes`, `fragments` (`source`, `bytes`), `left_out` (404 with why when there is none) |
//! | `GET /display.png` | | that event drawn, for the chain as `swdaq display` draws it (404 with why when there is none or the model draws none) |
//! | `GET /metrics` | | run control's own Prometheus metrics: state, output disks, refusals (`control::metrics`) |
//!
//! Errors are `{"error", "state"}`: 409 for a command the state does not allow, one the
//! configured model does not have (raw bursts of the event builder, say), or a run number
//! already used, 400 for a body that is not what the route takes, 404 for another
//! route, 503 when the running trigger cannot take a request now, 500 when the configuration
//! or the run failed. Refusals made before the request reaches run control are `{"error"}`
//! alone, saying nothing of the system: 401 without the token, and the server's own
//! (`http_server`, within [`LIMITS`]) — 431 for a request line and headers too large, 413 for
//! a body too large, 408 for a request too slow to arrive, 503 when every connection is in
//! use. Every refusal is counted in `/status` by its code.

use super::auth::Token;
use super::console::{self, LatestEvent};
use super::http_server::{Handler, HttpServer, Limits, Refusal, Request, Response};
use super::system::{ControlError, RunControl};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use swdaq_control::{Command, parse_request};

/// What one client may make the server hold before and after its token is checked.
const LIMITS: Limits = Limits {
    // A browser's request line and headers (cookies included) stay well under this.
    head_bytes: 16 * 1024,
    // Every command's body is a few bytes.
    body_bytes: 64 * 1024,
    // Clients send their request as soon as they connect; a console polling every second
    // keeps its connection within this.
    idle: Duration::from_secs(5),
    // A stop holds its connection until the run has ended, so `/status` must find another
    // one free; a browser opens up to six.
    connections: 16,
};

/// Carries out `command`: the status code and JSON answer.
pub fn execute(control: &RunControl, command: Command, who: &str) -> (u16, Value) {
    let what = format!(
        "{} {}",
        command.request().method.as_str(),
        command.request().path
    );
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
            control.note_refused(who, &what, &e.to_string());
            let code = match e {
                ControlError::Illegal(_)
                | ControlError::Conflict(_)
                | ControlError::NotApplicable(_) => 409,
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

/// `swdaq serve`'s server: the API over [`RunControl`] within [`LIMITS`].
pub struct ControlServer(HttpServer);

impl ControlServer {
    /// Listens on `addr` (checked against `token` by the caller) and serves `control`.
    pub fn start(
        addr: SocketAddr,
        token: Option<Token>,
        control: Arc<RunControl>,
    ) -> anyhow::Result<Self> {
        let api = Api {
            token,
            control,
            refused: Refused::default(),
            latest: LatestEvent::default(),
        };
        HttpServer::start(addr, LIMITS, Arc::new(api), "control-http")
            .map(Self)
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// Stops taking requests and waits for those being handled.
    pub fn stop(self) {
        self.0.stop();
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

    fn counts(&self) -> BTreeMap<u16, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn to_json(&self) -> Value {
        json!(self.counts())
    }
}

struct Api {
    token: Option<Token>,
    control: Arc<RunControl>,
    refused: Refused,
    latest: LatestEvent,
}

/// Logs a request refused before it reached run control.
fn log_refusal(peer: SocketAddr, what: &str, why: &str) {
    eprintln!(
        "{} swdaq serve: {peer}: refused {what}: {why}",
        humantime::format_rfc3339_millis(std::time::SystemTime::now()),
    );
}

impl Handler for Api {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        let peer = request.peer();
        let console = swdaq_console::route(request.method(), request.target());
        if let Some(swdaq_console::Route::Asset(asset)) = console {
            return console::asset_response(asset);
        }
        let (code, answer) = match &self.token {
            Some(t) if !t.admits(request.header("Authorization")) => {
                let what = format!("{} {}", request.method(), request.target());
                log_refusal(peer, &what, "missing or wrong token");
                // Nothing about the system to a client without the token.
                (401, json!({ "error": "missing or wrong bearer token" }))
            }
            _ if console.is_some() => {
                let refused = self.refused.counts();
                let response = console
                    .map(|r| console::data_response(&self.control, &self.latest, &refused, &r));
                let response = response.unwrap_or_else(|| json_response(404, &json!({})));
                if response.code >= 400 {
                    self.refused.count(response.code);
                }
                return response;
            }
            token => {
                let who = match token {
                    Some(_) => format!("{peer} (token)"),
                    None => format!("{peer} (loopback, no token)"),
                };
                self.answer(request, &who)
            }
        };
        if code >= 400 {
            self.refused.count(code);
        }
        json_response(code, &answer)
    }

    fn refused(&self, peer: SocketAddr, refusal: &Refusal) -> Response {
        log_refusal(peer, "a request", &refusal.reason);
        self.refused.count(refusal.code);
        json_response(refusal.code, &json!({ "error": refusal.reason }))
    }
}

impl Api {
    /// The answer to an admitted request.
    fn answer(&self, request: &mut Request<'_>, who: &str) -> (u16, Value) {
        let body = match request.body() {
            Ok(body) => body,
            Err(refusal) => return (refusal.code, json!({ "error": refusal.reason })),
        };
        match parse_request(request.method(), request.target(), &body) {
            Ok(command) => {
                let is_status = command == Command::Status;
                let (code, mut answer) = execute(&self.control, command, who);
                if is_status {
                    answer["refused_requests"] = self.refused.to_json();
                }
                (code, answer)
            }
            Err(e) => (
                e.status_code(),
                json!({ "error": e.to_string(), "state": self.control.state() }),
            ),
        }
    }
}

fn json_response(code: u16, answer: &Value) -> Response {
    Response {
        code,
        content_type: "application/json",
        body: serde_json::to_vec_pretty(answer).unwrap_or_default(),
        headers: if code == 401 {
            vec![("WWW-Authenticate", "Bearer".into())]
        } else {
            vec![("Cache-Control", "no-store".into())]
        },
    }
}
