//! Run control's HTTP JSON API as data: every [`Command`] `swdaq serve` takes, understood from
//! a request's method, URL and body ([`parse_request`], the server's side), and the request
//! that asks for it ([`Command::request`], `swdaq ctl`'s side), so both sides share one route
//! table.
//!
//! | method and path | body | command |
//! |---|---|---|
//! | `GET /state` | | [`Command::State`] |
//! | `GET /status` | | [`Command::Status`] |
//! | `POST /configure` | none or `{}` | [`Command::Configure`] |
//! | `POST /start` | none, `{}` or `{"run_number": N, "confirm_jump"?: true}` | [`Command::Start`] |
//! | `POST /stop` | none or `{}` | [`Command::Stop`] |
//! | `POST /pause`, `POST /resume` | none or `{}` | [`Command::Pause`], [`Command::Resume`] |
//! | `POST /trigger` | `{"trigger", "prescale"?, "rate_hz"?}` | [`Command::ChangeTrigger`] |
//! | `POST /record` | none, `{}` or `{"seconds": S}` | [`Command::Record`] |
//! | `POST /log` | `{"text", "run_number"?, "author"?}` | [`Command::Log`] |
//! | `POST /dqm/published` | `{"analyzer", "set", "reference"?}` | [`Command::PublishDqm`] |
//!
//! Its own crate, above `swdaq-trigger` (which owns [`TriggerChange`]) and below `swdaq-app`
//! (the server, the state machine, the client): the parser of what arrives from the network is
//! fuzzed (`fuzz/fuzz_targets/control_request.rs`), and the fuzz crate must not build HDF5
//! and ZeroMQ, which `swdaq-app` pulls in. No lower crate fits: `swdaq-trigger` is about
//! triggering and `swdaq-monitor` about metrics, and neither should know the run-control
//! routes.

use serde::Deserialize;
use serde_json::{Value, json};
pub use swdaq_trigger::TriggerChange;

/// What a request asks for, once its route and body are understood.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    State,
    Status,
    Configure,
    Start {
        run_number: Option<u32>,
        /// The operator confirms a run number far beyond the last run (run control refuses
        /// one without it: a single request would otherwise use the numbers up).
        confirm_jump: bool,
    },
    Stop,
    Pause,
    Resume,
    ChangeTrigger(TriggerChange),
    /// A raw burst of every link's buffer plus `seconds` of data after (the configured
    /// `recording.seconds_after` when `None`).
    Record {
        seconds: Option<f64>,
    },
    /// A logbook entry in the run registry, for run `run_number` (the current or last run
    /// when `None`), by `author` (the client when `None`).
    Log(LogEntry),
    /// A user's analyzer's histograms (the `swdaq.dqm` Python API), shown and judged beside
    /// the built-in ones.
    PublishDqm(Publication),
}

/// The body of `POST /dqm/published`. `set` and `reference` are histogram sets in
/// swdaq-dqm's JSON form; run control, which knows that form, checks them.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Publication {
    pub analyzer: String,
    pub set: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Value>,
}

/// The body of `POST /log`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogEntry {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_number: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// Why a request was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("no route {method} {path}")]
    NotFound { method: String, path: String },
    #[error("bad request body: {0}")]
    BadBody(String),
}

impl RequestError {
    /// The HTTP status code the server answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::BadBody(_) => 400,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

/// The HTTP request that asks for a command.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: Method,
    pub path: &'static str,
    /// JSON; `None`: no body.
    pub body: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    #[serde(default)]
    run_number: Option<u32>,
    #[serde(default)]
    confirm_jump: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordBody {
    #[serde(default)]
    seconds: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyBody {}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// A body for a command that takes none may be absent or `{}`.
fn no_body(body: &[u8]) -> Result<(), RequestError> {
    if is_blank(body) {
        return Ok(());
    }
    json_body::<EmptyBody>(body).map(|_| ())
}

fn json_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, RequestError> {
    serde_json::from_slice(body).map_err(|e| RequestError::BadBody(e.to_string()))
}

/// Understands a request: its method, path (a query string is ignored) and body.
pub fn parse_request(method: &str, url: &str, body: &[u8]) -> Result<Command, RequestError> {
    let path = url.split('?').next().unwrap_or_default();
    let command = match (method, path) {
        ("GET", "/state") => Command::State,
        ("GET", "/status") => Command::Status,
        ("POST", "/configure") => no_body(body).map(|()| Command::Configure)?,
        ("POST", "/start") if is_blank(body) => Command::Start {
            run_number: None,
            confirm_jump: false,
        },
        ("POST", "/start") => {
            let StartBody {
                run_number,
                confirm_jump,
            } = json_body(body)?;
            Command::Start {
                run_number,
                confirm_jump,
            }
        }
        ("POST", "/stop") => no_body(body).map(|()| Command::Stop)?,
        ("POST", "/pause") => no_body(body).map(|()| Command::Pause)?,
        ("POST", "/resume") => no_body(body).map(|()| Command::Resume)?,
        ("POST", "/trigger") => Command::ChangeTrigger(json_body(body)?),
        ("POST", "/record") if is_blank(body) => Command::Record { seconds: None },
        ("POST", "/record") => Command::Record {
            seconds: json_body::<RecordBody>(body)?.seconds,
        },
        ("POST", "/log") => Command::Log(json_body(body)?),
        ("POST", "/dqm/published") => Command::PublishDqm(json_body(body)?),
        _ => {
            return Err(RequestError::NotFound {
                method: method.into(),
                path: path.into(),
            });
        }
    };
    Ok(command)
}

impl Command {
    /// The request [`parse_request`] understands as this command.
    pub fn request(&self) -> Request {
        let (method, path, body) = match self {
            Self::State => (Method::Get, "/state", None),
            Self::Status => (Method::Get, "/status", None),
            Self::Configure => (Method::Post, "/configure", None),
            Self::Start {
                run_number,
                confirm_jump,
            } => {
                let mut body = json!({});
                if let Some(n) = run_number {
                    body["run_number"] = json!(n);
                }
                if *confirm_jump {
                    body["confirm_jump"] = json!(true);
                }
                (Method::Post, "/start", Some(body))
            }
            Self::Stop => (Method::Post, "/stop", None),
            Self::Pause => (Method::Post, "/pause", None),
            Self::Resume => (Method::Post, "/resume", None),
            Self::ChangeTrigger(change) => (Method::Post, "/trigger", Some(json!(change))),
            Self::Record { seconds } => (
                Method::Post,
                "/record",
                Some(match seconds {
                    Some(s) => json!({ "seconds": s }),
                    None => json!({}),
                }),
            ),
            Self::Log(entry) => (Method::Post, "/log", Some(json!(entry))),
            Self::PublishDqm(publication) => {
                (Method::Post, "/dqm/published", Some(json!(publication)))
            }
        };
        Request { method, path, body }
    }
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn routes_and_bodies_are_understood() {
        assert_eq!(parse_request("GET", "/state", b""), Ok(Command::State));
        assert_eq!(
            parse_request("GET", "/status?x=1", b""),
            Ok(Command::Status)
        );
        assert_eq!(
            parse_request("POST", "/start", br#"{"run_number": 12}"#),
            Ok(Command::Start {
                run_number: Some(12),
                confirm_jump: false,
            })
        );
        assert_eq!(
            parse_request("POST", "/start", b""),
            Ok(Command::Start {
                run_number: None,
                confirm_jump: false,
            })
        );
        assert_eq!(
            parse_request(
                "POST",
                "/start",
                br#"{"run_number": 4294967295, "confirm_jump": true}"#
            ),
            Ok(Command::Start {
                run_number: Some(u32::MAX),
                confirm_jump: true,
            })
        );
        assert_eq!(parse_request("POST", "/stop", b" {} "), Ok(Command::Stop));
        assert_eq!(
            parse_request("POST", "/record", br#"{"seconds": 2.5}"#),
            Ok(Command::Record { seconds: Some(2.5) })
        );
        assert_eq!(
            parse_request("POST", "/record", b""),
            Ok(Command::Record { seconds: None })
        );
        assert_eq!(
            parse_request("POST", "/trigger", br#"{"trigger":"random","rate_hz":5}"#),
            Ok(Command::ChangeTrigger(TriggerChange {
                trigger: "random".into(),
                prescale: None,
                rate_hz: Some(5.0)
            }))
        );
    }

    #[test]
    fn a_wrong_route_or_body_is_named() {
        for (method, path) in [("GET", "/start"), ("POST", "/nothing"), ("PUT", "/stop")] {
            let refused = parse_request(method, path, b"");
            assert!(
                matches!(refused, Err(RequestError::NotFound { .. })),
                "{method} {path}"
            );
            assert_eq!(refused.unwrap_err().status_code(), 404);
        }
        for (path, body) in [
            ("/start", &br#"{"run_number": -1}"#[..]),
            ("/start", b"{run_number: 1}"),
            ("/start", br#"{"run": 1}"#),
            ("/stop", b"now"),
            ("/trigger", b""),
            ("/trigger", br#"{"trigger":"random","prescale":"2"}"#),
            ("/trigger", br#"{"trigger":"random","rate_hz":1e400}"#),
            ("/record", br#"{"second": 2}"#),
            ("/record", br#"{"seconds": "2"}"#),
        ] {
            let refused = parse_request("POST", path, body);
            assert!(
                matches!(refused, Err(RequestError::BadBody(_))),
                "{path} {body:?}"
            );
            assert_eq!(refused.unwrap_err().status_code(), 400);
        }
    }

    fn any_command() -> impl Strategy<Value = Command> {
        prop_oneof![
            Just(Command::State),
            Just(Command::Status),
            Just(Command::Configure),
            (any::<Option<u32>>(), any::<bool>()).prop_map(|(run_number, confirm_jump)| {
                Command::Start {
                    run_number,
                    confirm_jump,
                }
            }),
            Just(Command::Stop),
            Just(Command::Pause),
            Just(Command::Resume),
            (
                ".{0,12}",
                any::<Option<u32>>(),
                proptest::option::of(proptest::num::f64::NORMAL | proptest::num::f64::ZERO)
            )
                .prop_map(|(trigger, prescale, rate_hz)| {
                    Command::ChangeTrigger(TriggerChange {
                        trigger,
                        prescale,
                        rate_hz,
                    })
                }),
            proptest::option::of(proptest::num::f64::NORMAL | proptest::num::f64::ZERO)
                .prop_map(|seconds| Command::Record { seconds }),
            (
                ".{0,40}",
                any::<Option<u32>>(),
                proptest::option::of(".{0,12}")
            )
                .prop_map(|(text, run_number, author)| Command::Log(LogEntry {
                    text,
                    run_number,
                    author,
                })),
            (".{0,12}", any::<u32>(), any::<bool>()).prop_map(|(analyzer, events, reference)| {
                let set = json!({ "version": 1, "events": events, "histograms": {} });
                Command::PublishDqm(Publication {
                    analyzer,
                    reference: reference.then(|| set.clone()),
                    set,
                })
            }),
        ]
    }

    proptest! {
        /// Any request is understood or refused with a reason, never a panic; a refused
        /// known route is always a bad body.
        #[test]
        fn any_request_is_understood_or_refused(
            method in prop_oneof![
                Just("GET".to_string()), Just("POST".to_string()), ".{0,8}"
            ],
            path in prop_oneof![
                Just("/start".to_string()),
                Just("/stop".to_string()),
                Just("/trigger".to_string()),
                Just("/record".to_string()),
                Just("/log".to_string()),
                Just("/dqm/published".to_string()),
                Just("/status".to_string()),
                ".{0,20}",
            ],
            body in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            match parse_request(&method, &path, &body) {
                Ok(_) => {}
                Err(RequestError::NotFound { .. }) => {}
                Err(RequestError::BadBody(reason)) => {
                    prop_assert_eq!(method, "POST");
                    prop_assert!(!reason.is_empty());
                }
            }
        }

        /// What `swdaq ctl` sends is what `swdaq serve` understands, for every command.
        #[test]
        fn every_command_is_understood_from_its_request(command in any_command()) {
            let request = command.request();
            let body = request.body.as_ref().map(|b| b.to_string()).unwrap_or_default();
            prop_assert_eq!(
                parse_request(request.method.as_str(), request.path, body.as_bytes()),
                Ok(command)
            );
        }
    }
}
