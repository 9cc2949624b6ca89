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
    /// A counter's total and its rate per second over the last interval.
    Counter {
        total: u64,
        rate: f64,
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
                    ..
                } => LiveValue::Counter {
                    total,
                    rate: rate_per_second,
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

/// One snapshot from every application's series: what the model's `live` reads.
pub fn snapshot_of(parts: impl IntoIterator<Item = Vec<LiveSeries>>) -> Snapshot {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for series in parts.into_iter().flatten() {
        let (kind, value) = match series.value {
            LiveValue::Counter { total, rate } => (
                MetricKind::Counter,
                Value::Counter {
                    total,
                    delta: 0,
                    rate_per_second: rate,
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
                    },
                },
                LiveSeries {
                    name: "swdaq_evb_bu_open_events".into(),
                    labels,
                    value: LiveValue::Gauge(open),
                },
            ]
        };
        let s = snapshot_of([part("0", 1000.0, 3.0), part("1", 500.0, 7.0)]);
        assert_eq!(s.counter_rate("swdaq_evb_events_built_total"), 1500.0);
        let live = crate::models::evb::live::live(&s, Duration::from_secs(1), &Default::default());
        assert_eq!(live.series.event_hz, Some(1500.0));
        let line = crate::live::line(&live);
        assert!(line.contains("built=1500/s"), "{line}");
        // What goes over stdout comes back whole.
        let round: Vec<LiveSeries> =
            postcard::from_bytes(&postcard::to_stdvec(&series_of(&s)).unwrap()).unwrap();
        assert_eq!(
            snapshot_of([round]).counter_rate("swdaq_evb_events_built_total"),
            1500.0
        );
    }
}
