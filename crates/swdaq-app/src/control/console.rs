//! The operator's console over HTTP: the page and its assets (`swdaq_console`, no token: the
//! shell holds nothing about the system), and the data routes only the page uses, behind the
//! token like every other (parsed by `swdaq_console::route`): `GET /history` (the live
//! series of the last ten minutes, or those after `?since=T`, unix seconds),
//! `GET /latest-event` (the newest stored event's fragments per source) and
//! `GET /display.png` (that event drawn, where the model has an event display),
//! `GET /dqm` (the online data-quality histograms and their verdicts),
//! `GET /runs` (the newest runs in the run registry, with their files and logbooks); and, for
//! Prometheus, `GET /metrics` (run control's own, `control::metrics`).
//! The page's figures, commands, journal and alerts come from `/status` and the command
//! routes, as for `swdaq ctl`.

use super::http_server::Response;
use super::system::RunControl;
use crate::runtime::model::Configured;
use crate::stored::StoredEvent;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use swdaq_console::{Asset, Route};

/// The least time between two readings of the stored data.
pub const READ_AGAIN_AFTER: Duration = Duration::from_secs(5);

/// The newest stored event, read back by the model (`Configured::stored_event`: the chain
/// reads HDF5 and draws, the others walk their files) at most every [`READ_AGAIN_AFTER`]
/// however many consoles ask, one reading at a time; in between they all get the last one.
#[derive(Default)]
pub struct LatestEvent {
    last: Mutex<Option<(Instant, u32, Arc<StoredEvent>)>>,
}

impl LatestEvent {
    /// Run `run`'s newest stored event, read anew when the last reading is older than
    /// [`READ_AGAIN_AFTER`] or of another run. `Err` says why there is none.
    pub fn of(&self, config: &dyn Configured, run: u32) -> Result<Arc<StoredEvent>, String> {
        // Held while reading: the other consoles wait and then take this reading.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, of_run, event)) = last.as_ref()
            && *of_run == run
            && at.elapsed() < READ_AGAIN_AFTER
        {
            return Ok(Arc::clone(event));
        }
        // Aged from when reading began: a console asking READ_AGAIN_AFTER after its last ask
        // gets a new reading however long the last one took.
        let began = Instant::now();
        let event = Arc::new(config.stored_event(run)?);
        *last = Some((began, run, Arc::clone(&event)));
        Ok(event)
    }
}

/// The page's assets: cached only after asking whether they changed (a new binary serves
/// a new page).
pub fn asset_response(asset: Asset) -> Response {
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
    latest: &LatestEvent,
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
        Route::Dqm => json(200, &control.dqm()),
        Route::Runs => match control.runs() {
            Ok(runs) => json(200, &runs),
            Err(e) => json(e.status_code(), &json!({ "error": e.to_string() })),
        },
        Route::LatestEvent | Route::Display => {
            let event = control
                .latest_run()
                .ok_or_else(|| "no run yet: nothing stored to show".to_string())
                .and_then(|(config, run)| latest.of(config.as_ref(), run));
            match (event, route) {
                (Err(why), _) => json(404, &json!({ "error": why })),
                (Ok(event), Route::LatestEvent) => {
                    let mut answer = json!(*event);
                    // The page asks for /display.png only where there is a picture.
                    answer["drawn"] = json!(event.picture.is_some());
                    json(200, &answer)
                }
                (Ok(event), _) => match &event.picture {
                    Some(png) => Response {
                        code: 200,
                        content_type: "image/png",
                        body: png.clone(),
                        headers: vec![
                            ("Cache-Control", "no-store".into()),
                            ("X-Swdaq-File", event.file.display().to_string()),
                            ("X-Swdaq-Event", event.event.to_string()),
                        ],
                    },
                    None => json(
                        404,
                        &json!({ "error": "this model's events are not drawn" }),
                    ),
                },
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
