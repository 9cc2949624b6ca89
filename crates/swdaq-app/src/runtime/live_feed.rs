//! Live figures across applications: each application sends the launcher its latest counters
//! and gauges (`live HEX` on stdout, each status interval); the launcher puts them back
//! together into one snapshot, from which the model makes its `Live` as in one process.

use super::stdio as control;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_monitor::{Family, MetricKind, Series, Snapshot, SnapshotCell, Value};

/// swdaq's own metric families (the process's health is each application's own).
const PREFIX: &str = "swdaq_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LiveValue {
    /// A counter's total, its rate per second over the last interval, and the seconds since
    /// it last rose.
    Counter {
        total: u64,
        rate: f64,
        idle: f64,
    },
    Gauge(f64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveSeries {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: LiveValue,
}

/// The counters and gauges of `s`.
pub fn series_of(s: &Snapshot) -> Vec<LiveSeries> {
    let mut out = Vec::new();
    for f in s.families.iter().filter(|f| f.name.starts_with(PREFIX)) {
        for x in &f.series {
            let value = match x.value {
                Value::Counter {
                    total,
                    rate_per_second,
                    idle_seconds,
                    ..
                } => LiveValue::Counter {
                    total,
                    rate: rate_per_second,
                    idle: idle_seconds,
                },
                Value::Gauge { value } => LiveValue::Gauge(value),
                _ => continue,
            };
            out.push(LiveSeries {
                name: f.name.clone(),
                labels: x.labels.clone(),
                value,
            });
        }
    }
    out
}

/// The series of an application that has stopped sending them (it died, or hangs) `since`
/// ago: its counters as they last were with no rate and idle since (its sources show silent),
/// its gauges gone (what it holds now is not known).
pub fn halted(series: &[LiveSeries], since: Duration) -> Vec<LiveSeries> {
    series
        .iter()
        .filter_map(|x| match x.value {
            LiveValue::Counter { total, idle, .. } => Some(LiveSeries {
                value: LiveValue::Counter {
                    total,
                    rate: 0.0,
                    idle: idle + since.as_secs_f64(),
                },
                ..x.clone()
            }),
            LiveValue::Gauge(_) => None,
        })
        .collect()
}

/// The label the launcher gives each application's series: its name.
pub const APP_LABEL: &str = "app";

/// One snapshot from every application's series, each labelled with the application's name
/// ([`APP_LABEL`]): what the model's `live` reads.
pub fn snapshot_of<'a>(parts: impl IntoIterator<Item = (&'a str, Vec<LiveSeries>)>) -> Snapshot {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let labelled = parts.into_iter().flat_map(|(app, series)| {
        series.into_iter().map(move |mut x| {
            x.labels.insert(APP_LABEL.into(), app.into());
            x
        })
    });
    for series in labelled {
        let (kind, value) = match series.value {
            LiveValue::Counter { total, rate, idle } => (
                MetricKind::Counter,
                Value::Counter {
                    total,
                    delta: 0,
                    rate_per_second: rate,
                    idle_seconds: idle,
                },
            ),
            LiveValue::Gauge(value) => (MetricKind::Gauge, Value::Gauge { value }),
        };
        families
            .entry(series.name.clone())
            .or_insert_with(|| Family {
                name: series.name,
                help: String::new(),
                kind,
                series: Vec::new(),
            })
            .series
            .push(Series {
                labels: series.labels,
                value,
            });
    }
    Snapshot {
        uptime_seconds: 0.0,
        interval_seconds: 1.0,
        families: families.into_values().collect(),
        process: Default::default(),
    }
}

/// Sends the launcher this application's series every `interval` while it lives.
pub struct LiveReporter {
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LiveReporter {
    pub fn start(cell: SnapshotCell, interval: Duration) -> std::io::Result<Self> {
        let running = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&running);
        let thread = std::thread::Builder::new()
            .name("live".into())
            .spawn(move || {
                let mut next = Instant::now();
                while flag.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        next += interval;
                        // A launcher that has gone is noticed on stdin, not here.
                        let _ = control::send_live(&series_of(&cell.get()));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })?;
        Ok(Self {
            running,
            thread: Some(thread),
        })
    }
}

impl Drop for LiveReporter {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_sees_the_sum_of_every_application_and_each_queue() {
        let part = |bu: &str, built: f64, open: f64| {
            let labels = BTreeMap::from([("bu".to_string(), bu.to_string())]);
            vec![
                LiveSeries {
                    name: "swdaq_evb_events_built_total".into(),
                    labels: labels.clone(),
                    value: LiveValue::Counter {
                        total: built as u64,
                        rate: built,
                        idle: 0.0,
                    },
                },
                LiveSeries {
                    name: "swdaq_evb_bu_open_events".into(),
                    labels,
                    value: LiveValue::Gauge(open),
                },
            ]
        };
        let s = snapshot_of([
            ("bu-0", part("0", 1000.0, 3.0)),
            ("bu-1", part("1", 500.0, 7.0)),
        ]);
        assert_eq!(s.counter_rate("swdaq_evb_events_built_total"), 1500.0);
        let live = crate::models::evb::live::live(&s, Duration::from_secs(1), &Default::default());
        assert_eq!(live.series.event_hz, Some(1500.0));
        let line = crate::live::line(&live);
        assert!(line.contains("built=1500/s"), "{line}");
        // What goes over stdout comes back whole.
        let round: Vec<LiveSeries> =
            postcard::from_bytes(&postcard::to_stdvec(&series_of(&s)).unwrap()).unwrap();
        assert_eq!(
            snapshot_of([("bu", round)]).counter_rate("swdaq_evb_events_built_total"),
            1500.0
        );
        // An application that stopped sending: its totals stay, its rates and gauges go.
        let s = snapshot_of([
            ("bu-0", part("0", 1000.0, 3.0)),
            (
                "bu-1",
                halted(&part("1", 500.0, 7.0), Duration::from_secs(2)),
            ),
        ]);
        assert_eq!(s.counter_rate("swdaq_evb_events_built_total"), 1000.0);
        let live = crate::models::evb::live::live(&s, Duration::from_secs(1), &Default::default());
        assert_eq!(live.series.event_hz, Some(1000.0));
        let built = crate::live::counter(&s, "swdaq_evb_events_built_total");
        assert_eq!(built, (1500, 1000.0));
        assert_eq!(
            crate::live::gauge_max(&s, "swdaq_evb_bu_open_events"),
            Some(3.0)
        );
        // Each series names the application that sent it.
        let built = s
            .families
            .iter()
            .find(|f| f.name == "swdaq_evb_events_built_total");
        let apps: Vec<&str> = built
            .unwrap()
            .series
            .iter()
            .map(|x| x.labels[APP_LABEL].as_str())
            .collect();
        assert_eq!(apps, ["bu-0", "bu-1"]);
    }
}
