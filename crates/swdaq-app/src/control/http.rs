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
//! | `GET /dqm` | | the online data-quality histograms of the run going on, else of the last run as it ended: each with its axis, counts, under- and overflow, entries and verdict (quality, probability, reason), worst first; when judged, samples and drops (`runtime::dqm::DqmView`); `"enabled": false` with why when that run has no `[dqm]` |
//! | `GET /runs` | | the newest runs in the configuration's run registry with their files' count and bytes and logbook entries (409 before a configuration is loaded) |
//! | `GET /metrics` | | run control's own Prometheus metrics: state, output disks, refusals (`control::metrics`) |
//!
//! Every request must first pass the guard (`control::guard`: the `Host` one of the server's
//! names, an `Origin` only its own, bodies JSON), then show the bearer token (`control::auth`)
//! — all but the console's page and assets, which hold nothing about the system. Every answer
//! forbids framing ([`guard::ANSWER_HEADERS`]) and none carries a CORS header.
//!
//! Errors are `{"error", "state"}`: 409 for a command the state does not allow, one the
//! configured model does not have (raw bursts of the event builder, say), a run number
//! already used or far beyond the last without `confirm_jump`, 400 for a body that is not what
//! the route takes, 404 for another route, 503 when the running trigger cannot take a request
//! now, 500 when the configuration or the run failed. Refusals made before the request
//! reaches run control are `{"error"}` alone, saying nothing of the system: 400 without a
//! `Host`, 421 for a `Host` not the server's, 403 for a page of another origin, 415 for a
//! body not sent as JSON, 401 without the token, and the server's own (`http_server`, within
//! [`LIMITS`]) — 431 for a request line and headers too large, 413 for a body too large, 408
//! for a request too slow to arrive, 503 when too many connections are waiting for their
//! request (from one address, or in all) or every worker is busy. Every refusal is counted in
//! `/status` and `/metrics` by its code; the log gets at most
//! [`LOGGED_PER_WINDOW`] of them every [`LOG_WINDOW`], and says how many it left out.

use super::auth::{self, Token};
use super::console::{self, LatestEvent};
use super::guard::{self, Guard};
use super::http_server::{Handler, HttpServer, Limits, Refusal, Request, Response};
use super::system::RunControl;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
    // A stop holds its worker until the run has ended, so `/status` must find another one
    // free; a browser sends up to six requests at once.
    workers: 16,
    // Far more than any operator's clients (a browser keeps up to six connections to a host)
    // and well within a process's 1024 descriptors.
    waiting: 512,
    // One address cannot take every place; on loopback every client is one address, and 20
    // clients sending a byte a second still leave the operator room.
    waiting_per_peer: 64,
};

// The longest token, with `Authorization: Bearer `, leaves most of the head to the rest of
// a browser's headers: a token accepted at start always fits.
const _: () = assert!(auth::MAX_TOKEN_CHARS * 4 <= LIMITS.head_bytes);

/// Refusals written to the log in each [`LOG_WINDOW`] at most: a client sending bad requests
/// in a loop cannot fill the log (each one is still counted by its code).
const LOGGED_PER_WINDOW: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(10);

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
        Command::Start {
            run_number,
            confirm_jump,
        } => control.start(run_number, confirm_jump, who),
        Command::Stop => control.stop(who),
        Command::Pause => control.pause(who),
        Command::Resume => control.resume(who),
        Command::ChangeTrigger(change) => control.change_trigger(change, who),
        Command::Record { seconds } => control.record(seconds, who),
        Command::Log(entry) => control.log(entry, who),
        Command::PublishDqm(publication) => control.publish_dqm(publication, who),
    };
    match result {
        Ok(answer) => (200, answer),
        Err(e) => {
            control.note_refused(who, &what, &e.to_string());
            (
                e.status_code(),
                json!({ "error": e.to_string(), "state": control.state() }),
            )
        }
    }
}

/// `swdaq serve`'s server: the API over [`RunControl`] within [`LIMITS`].
pub struct ControlServer(HttpServer);

impl ControlServer {
    /// Serves `control` on `listener` to clients that pass `guard` and show `token`.
    pub fn start(
        listener: TcpListener,
        token: Token,
        guard: Guard,
        control: Arc<RunControl>,
    ) -> anyhow::Result<Self> {
        let api = Api {
            token,
            guard,
            control,
            refused: Refused::default(),
            log: RefusalLog::default(),
            latest: LatestEvent::default(),
        };
        HttpServer::start(listener, LIMITS, Arc::new(api), "control-http")
            .map(Self)
            .map_err(|e| anyhow::anyhow!("cannot serve run control: {e}"))
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
    token: Token,
    guard: Guard,
    control: Arc<RunControl>,
    refused: Refused,
    log: RefusalLog,
    latest: LatestEvent,
}

/// The refusals logged in the current window, and those left out since the last line.
#[derive(Default)]
struct RefusalLog(Mutex<LogWindow>);

#[derive(Default)]
struct LogWindow {
    began: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl RefusalLog {
    /// Logs a request refused before it reached run control, unless this window's lines are
    /// used up.
    fn note(&self, peer: SocketAddr, what: &str, why: &str) {
        let mut window = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if window
            .began
            .is_none_or(|began| now.duration_since(began) >= LOG_WINDOW)
        {
            window.began = Some(now);
            window.logged = 0;
        }
        if window.logged == LOGGED_PER_WINDOW {
            window.left_out += 1;
            return;
        }
        window.logged += 1;
        let left_out = match std::mem::take(&mut window.left_out) {
            0 => String::new(),
            n => format!(
                " ({n} refusals before this one not logged; all are counted by code in /status and /metrics)"
            ),
        };
        eprintln!(
            "{} swdaq serve: {peer}: refused {what}: {why}{left_out}",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
        );
    }
}

impl Handler for Api {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        with_answer_headers(self.checked_answer(request))
    }

    fn refused(&self, peer: SocketAddr, refusal: &Refusal) -> Response {
        with_answer_headers(self.refuse(peer, "a request", refusal))
    }
}

impl Api {
    /// The answer to a request that has passed nothing yet: the guard, then the console's
    /// page and assets, then the token, then the data routes and the commands.
    fn checked_answer(&self, request: &mut Request<'_>) -> Response {
        let peer = request.peer();
        let what = || format!("{} {}", request.method(), request.target());
        if let Err(refusal) = self.guard.check(request) {
            return self.refuse(peer, &what(), &refusal);
        }
        let console = swdaq_console::route(request.method(), request.target());
        if let Some(swdaq_console::Route::Asset(asset)) = console {
            return console::asset_response(asset);
        }
        if !self.token.admits(request.header("Authorization")) {
            // Nothing about the system to a client without the token.
            let refusal = Refusal::new(401, "missing or wrong bearer token");
            return self.refuse(peer, &what(), &refusal);
        }
        let response = match console {
            Some(route) => {
                let refused = self.refused.counts();
                console::data_response(&self.control, &self.latest, &refused, &route)
            }
            None => {
                let (code, answer) = self.answer(request, &format!("{peer} (token)"));
                json_response(code, &answer)
            }
        };
        if response.code >= 400 {
            self.refused.count(response.code);
        }
        response
    }

    /// Logs (within the log's rate) and counts a refusal made before run control.
    fn refuse(&self, peer: SocketAddr, what: &str, refusal: &Refusal) -> Response {
        self.log.note(peer, what, &refusal.reason);
        self.refused.count(refusal.code);
        json_response(refusal.code, &json!({ "error": refusal.reason }))
    }

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

/// `response` with the headers every answer has ([`guard::ANSWER_HEADERS`]).
fn with_answer_headers(mut response: Response) -> Response {
    response.headers.extend(
        guard::ANSWER_HEADERS
            .iter()
            .map(|&(name, value)| (name, value.to_string())),
    );
    response
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
