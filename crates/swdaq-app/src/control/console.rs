//! The operator's console over HTTP: the page and its assets (`swdaq_console`, no token: the
//! shell holds nothing about the system), and the data routes only the page uses, behind the
//! token like every other: `GET /history` (the live series of the last ten minutes, or those
//! after `?since=T`, unix seconds) and `GET /display.png` (the latest stored record drawn);
//! and, for Prometheus, `GET /metrics` (run control's own, `control::metrics`).
//! The page's figures, commands, journal and alerts come from `/status` and the command
//! routes, as for `swdaq ctl`.

use super::display::Display;
use super::http_server::Response;
use super::system::RunControl;
use serde_json::json;
use std::collections::BTreeMap;

/// A console route.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// The page or one of its assets.
    Asset(swdaq_console::Asset),
    History {
        since: Option<f64>,
    },
    Display,
    Metrics,
}

/// The console route `method` and `target` ask for, if any.
pub fn route(method: &str, target: &str) -> Option<Route> {
    if method != "GET" {
        return None;
    }
    if let Some(asset) = swdaq_console::asset(target) {
        return Some(Route::Asset(asset));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/history" => Some(Route::History {
            since: query
                .split('&')
                .find_map(|p| p.strip_prefix("since="))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite()),
        }),
        "/display.png" => Some(Route::Display),
        "/metrics" => Some(Route::Metrics),
        _ => None,
    }
}

/// The page's assets: cached only after asking whether they changed (a new binary serves
/// a new page).
pub fn asset_response(asset: swdaq_console::Asset) -> Response {
    Response {
        code: 200,
        content_type: asset.content_type,
        body: asset.bytes.to_vec(),
        headers: vec![("Cache-Control", "no-cache".into())],
    }
}

/// The answer to a data route, for a client that showed the token; `refused` counts the
/// requests refused so far by status code.
pub fn data_response(
    control: &RunControl,
    display: &Display,
    refused: &BTreeMap<u16, u64>,
    route: &Route,
) -> Response {
    match route {
        Route::Asset(asset) => asset_response(*asset),
        Route::Metrics => Response {
            code: 200,
            content_type: swdaq_monitor::CONTENT_TYPE,
            body: control.metrics(refused).into_bytes(),
            headers: Vec::new(),
        },
        Route::History { since } => json(200, &control.history(*since)),
        Route::Display => {
            let picture = control
                .latest_run()
                .ok_or_else(|| "no run yet: nothing stored to draw".to_string())
                .and_then(|(dir, run)| display.latest(&dir, run));
            match picture {
                Ok(p) => Response {
                    code: 200,
                    content_type: "image/png",
                    body: p.png.to_vec(),
                    headers: vec![
                        ("Cache-Control", "no-store".into()),
                        ("X-Swdaq-File", p.file.display().to_string()),
                        ("X-Swdaq-Trigger-Number", p.trigger_number.to_string()),
                        ("X-Swdaq-Left-Out", p.left_out.join("; ")),
                    ],
                },
                Err(why) => json(404, &json!({ "error": why })),
            }
        }
    }
}

fn json(code: u16, answer: &serde_json::Value) -> Response {
    Response {
        code,
        content_type: "application/json",
        body: serde_json::to_vec(answer).unwrap_or_default(),
        headers: vec![("Cache-Control", "no-store".into())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_page_its_assets_and_its_data_routes_are_known() {
        assert!(matches!(route("GET", "/"), Some(Route::Asset(_))));
        assert!(matches!(
            route("GET", "/console/console.js"),
            Some(Route::Asset(_))
        ));
        assert_eq!(
            route("GET", "/history?since=1700000000.5"),
            Some(Route::History {
                since: Some(1_700_000_000.5)
            })
        );
        assert_eq!(
            route("GET", "/history"),
            Some(Route::History { since: None })
        );
        assert_eq!(
            route("GET", "/history?since=NaN&x"),
            Some(Route::History { since: None })
        );
        assert_eq!(route("GET", "/display.png"), Some(Route::Display));
        assert_eq!(route("GET", "/metrics"), Some(Route::Metrics));
        for (method, target) in [("POST", "/"), ("GET", "/status"), ("GET", "/console/x")] {
            assert_eq!(route(method, target), None, "{method} {target}");
        }
    }

    proptest! {
        #[test]
        fn any_target_is_a_route_or_none_never_a_panic(method in ".{0,6}", target in ".{0,60}") {
            if let Some(Route::History { since: Some(t) }) = route(&method, &target) {
                prop_assert!(t.is_finite());
            }
        }
    }
}
