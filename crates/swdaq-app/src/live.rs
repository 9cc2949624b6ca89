//! `Live`: the one schema of a running system's figures, whatever the model — the terminal
//! view of `swdaq run`, `/status` of `swdaq serve` and the web console all read it. Each
//! model's `live.rs` fills it from a monitoring snapshot (in applications: the snapshot the
//! launcher merges from their series, `runtime::live_feed`); this module also holds the
//! snapshot readers they share and the terminal line.

use crate::runtime::live_feed::APP_LABEL;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use swdaq_monitor::{Snapshot, Value};

/// How often every model makes its live figures from a fresh snapshot (and every application
/// sends the launcher its own): a source that stops shows once it has been silent for
/// [`SILENT_AFTER_S`], on the console at its next poll, within a second. `swdaq run` prints
/// them less often (`Configured::status_interval`).
pub const LIVE_INTERVAL: Duration = Duration::from_millis(200);
/// A source is silent once none of its data has come for this long (two live intervals: a
/// late batch on a loaded host is not taken for a stop)...
const SILENT_AFTER_S: f64 = 0.4;
/// ...where its own average since the run began promised at least this many items in that
/// time: a slower source's gaps are normal (a Poisson source expecting 10 is empty once in
/// 22 000). One that has sent nothing at all is silent after [`NEVER_SENT_AFTER_S`].
const SILENT_EXPECTING: f64 = 10.0;
const NEVER_SENT_AFTER_S: f64 = 2.0;

#[derive(Debug, Clone, Serialize)]
pub struct Live {
    pub model: &'static str,
    pub elapsed_s: f64,
    /// The headline numbers, in display order (the terminal line, the console's tiles).
    pub figures: Vec<Figure>,
    /// The series a shifter watches, the same keys for every model.
    pub series: Series,
    /// Every source (links, FEDs, e-links), bad ones first.
    pub sources: Vec<SourceRow>,
    /// With a topology: each application; empty in one process.
    pub apps: Vec<AppRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub key: &'static str,
    pub label: &'static str,
    pub value: f64,
    pub unit: &'static str,
}

impl Figure {
    pub fn new(key: &'static str, label: &'static str, value: f64, unit: &'static str) -> Self {
        Self {
            key,
            label,
            value,
            unit,
        }
    }
}

/// `None` (null) where the model has no such figure or it is not known yet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Series {
    /// Input throughput, MB/s (chain: readout; evb: FEDs; swrod: e-links).
    pub input_mb_s: Option<f64>,
    /// Trigger decisions (chain), events built (evb), events the HLT built (swrod) per s.
    pub event_hz: Option<f64>,
    /// 0..1: the fullest buffer.
    pub backlog: Option<f64>,
    /// 0..1: share of the last interval the trigger was inhibited or throttled.
    pub throttled: Option<f64>,
    /// Data dropped per second, every drop counter of the model.
    pub drops_per_s: Option<f64>,
    /// Errors per second, every error counter of the model.
    pub errors_per_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceRow {
    pub name: String,
    /// The application that reads it, with a topology.
    pub app: Option<String>,
    pub rate_hz: f64,
    pub mb_s: Option<f64>,
    pub errors: u64,
    pub drops: u64,
    /// Errors or drops rising in the last interval, or silent while the run takes data.
    pub bad: bool,
    pub why: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppRow {
    pub name: String,
    pub kind: String,
    pub host: String,
    /// `running`, or how it ended.
    pub state: String,
    /// Seconds since its last live figures (`None`: none yet).
    pub heartbeat_age_s: Option<f64>,
}

/// A source's counts over the last interval, judged.
pub struct SourceCounts {
    pub name: String,
    /// Its data items (frames, fragments, chunks): in total, and per second in the interval.
    pub items: (u64, f64),
    /// Seconds since its items last rose.
    pub idle_s: f64,
    /// Seconds into the run.
    pub elapsed_s: f64,
    pub mb_s: Option<f64>,
    pub errors: (u64, f64),
    pub drops: (u64, f64),
}

impl SourceCounts {
    /// No data for [`SILENT_AFTER_S`] where its average says some was due, or none at all.
    fn silent(&self) -> bool {
        let (total, _) = self.items;
        if total == 0 {
            return self.elapsed_s >= NEVER_SENT_AFTER_S;
        }
        let mean_hz = total as f64 / self.elapsed_s.max(f64::MIN_POSITIVE);
        self.idle_s >= SILENT_AFTER_S && mean_hz * SILENT_AFTER_S >= SILENT_EXPECTING
    }

    /// The row of a source read by `app` (with a topology), bad when errors or drops rose in
    /// the last interval or the source was silent.
    pub fn row(self, app: Option<String>) -> SourceRow {
        let mut why = Vec::new();
        if self.errors.1 > 0.0 {
            why.push(format!("{:.0} errors/s", self.errors.1));
        }
        if self.drops.1 > 0.0 {
            why.push(format!("{:.0} drops/s", self.drops.1));
        }
        if self.silent() {
            why.push("silent".to_string());
        }
        SourceRow {
            name: self.name,
            app,
            rate_hz: self.items.1,
            mb_s: self.mb_s,
            errors: self.errors.0,
            drops: self.drops.0,
            bad: !why.is_empty(),
            why: (!why.is_empty()).then(|| why.join(", ")),
        }
    }
}

/// Where a model's per-source series are: the label that names a source and its counters.
pub struct SourceMetrics<'a> {
    pub label: &'a str,
    /// The counter whose rate is the source's rate.
    pub rate: &'a str,
    /// A counter of the source's data, and the bytes one count stands for.
    pub data: (&'a str, f64),
    pub errors: &'a [&'a str],
    pub drops: &'a [&'a str],
}

impl SourceMetrics<'_> {
    /// One row per source, named by `name` from its label's value: `keys` in their order, or
    /// every source the rate counter has (numbers in numeric order); bad ones first.
    pub fn rows(
        &self,
        s: &Snapshot,
        elapsed: Duration,
        keys: Option<Vec<String>>,
        name: impl Fn(&str) -> String,
    ) -> Vec<SourceRow> {
        let rate = by_label(s, self.rate, self.label);
        let idle = idle_by_label(s, self.rate, self.label);
        let apps = app_by_label(s, self.rate, self.label);
        let data = by_label(s, self.data.0, self.label);
        let sum_of = |names: &[&str]| -> Vec<BTreeMap<String, (u64, f64)>> {
            names.iter().map(|n| by_label(s, n, self.label)).collect()
        };
        let (errors, drops) = (sum_of(self.errors), sum_of(self.drops));
        let keys = keys.unwrap_or_else(|| {
            let mut keys: Vec<String> = rate.keys().cloned().collect();
            keys.sort_by_key(|k| (k.parse::<u64>().unwrap_or(u64::MAX), k.clone()));
            keys
        });
        let rows = keys
            .iter()
            .map(|key| {
                let get =
                    |m: &BTreeMap<String, (u64, f64)>| m.get(key).copied().unwrap_or_default();
                let total = |ms: &[BTreeMap<String, (u64, f64)>]| {
                    ms.iter()
                        .map(get)
                        .fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
                };
                SourceCounts {
                    name: name(key),
                    items: get(&rate),
                    // No series yet: idle since the start.
                    idle_s: idle.get(key).copied().unwrap_or(elapsed.as_secs_f64()),
                    elapsed_s: elapsed.as_secs_f64(),
                    mb_s: Some(get(&data).1 * self.data.1 / 1e6),
                    errors: total(&errors),
                    drops: total(&drops),
                }
                .row(apps.get(key).cloned())
            })
            .collect();
        bad_first(rows)
    }
}

/// Bad sources first, each group in its given order.
pub fn bad_first(mut rows: Vec<SourceRow>) -> Vec<SourceRow> {
    rows.sort_by_key(|r| !r.bad);
    rows
}

/// A counter's total and rate per second, summed over its series.
pub fn counter(s: &Snapshot, name: &str) -> (u64, f64) {
    let mut out = (0, 0.0);
    for v in values(s, name) {
        if let Value::Counter {
            total,
            rate_per_second,
            ..
        } = v
        {
            out.0 += total;
            out.1 += rate_per_second;
        }
    }
    out
}

/// A counter's rate per second, summed over its series.
pub fn rate(s: &Snapshot, name: &str) -> f64 {
    counter(s, name).1
}

/// Counters' totals and rates summed over several names.
pub fn counters(s: &Snapshot, names: &[&str]) -> (u64, f64) {
    names
        .iter()
        .map(|n| counter(s, n))
        .fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// The largest value of a gauge over its series (`None`: no series).
pub fn gauge_max(s: &Snapshot, name: &str) -> Option<f64> {
    values(s, name)
        .filter_map(|v| match v {
            Value::Gauge { value } => Some(*value),
            _ => None,
        })
        .reduce(f64::max)
}

/// Per value of `label`: a counter's (total, rate) or a gauge's (0, value), summed.
pub fn by_label(s: &Snapshot, name: &str, label: &str) -> BTreeMap<String, (u64, f64)> {
    let mut out: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for series in s.series(name) {
        let Some(key) = series.labels.get(label) else {
            continue;
        };
        let (total, v) = match series.value {
            Value::Counter {
                total,
                rate_per_second,
                ..
            } => (total, rate_per_second),
            Value::Gauge { value } => (0, value),
            Value::Histogram { .. } => continue,
        };
        let e = out.entry(key.clone()).or_default();
        e.0 += total;
        e.1 += v;
    }
    out
}

/// Per value of `label`: the seconds since counter `name` last rose (the least over the
/// label's series: a source is idle only when all of it is).
pub fn idle_by_label(s: &Snapshot, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for series in s.series(name) {
        if let (Some(key), Value::Counter { idle_seconds, .. }) =
            (series.labels.get(label), &series.value)
        {
            let e = out.entry(key.clone()).or_insert(f64::INFINITY);
            *e = e.min(*idle_seconds);
        }
    }
    out
}

/// Per value of `label`: the application that sent counter `name`'s series (with a topology,
/// the launcher labels each application's series with its name).
fn app_by_label(s: &Snapshot, name: &str, label: &str) -> BTreeMap<String, String> {
    s.series(name)
        .filter_map(|x| {
            Some((
                x.labels.get(label)?.clone(),
                x.labels.get(APP_LABEL)?.clone(),
            ))
        })
        .collect()
}

/// The values of every series of metric `name`.
pub fn values<'a>(s: &'a Snapshot, name: &'a str) -> impl Iterator<Item = &'a Value> {
    s.series(name).map(|series| &series.value)
}

/// The terminal line: the elapsed time, each figure, and the bad sources by name.
pub fn line(live: &Live) -> String {
    let mut out = format!("t={:.1}s", live.elapsed_s);
    for f in &live.figures {
        let value = if f.value.abs() >= 100.0 || f.value.fract() == 0.0 {
            format!("{:.0}", f.value)
        } else {
            format!("{:.2}", f.value)
        };
        out += &format!(" {}={value}{}", f.label, f.unit);
    }
    let bad: Vec<String> = live
        .sources
        .iter()
        .filter(|r| r.bad)
        .take(4)
        .map(|r| format!("{} ({})", r.name, r.why.as_deref().unwrap_or("bad")))
        .collect();
    if !bad.is_empty() {
        let more = live.sources.iter().filter(|r| r.bad).count() - bad.len();
        out += &format!("  bad: {}", bad.join(", "));
        if more > 0 {
            out += &format!(" and {more} more");
        }
    }
    let gone: Vec<&str> = live
        .apps
        .iter()
        .filter(|a| a.state != "running")
        .map(|a| a.name.as_str())
        .collect();
    if !gone.is_empty() {
        out += &format!("  apps ended: {}", gone.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(name: &str, rate_hz: f64, errors: f64) -> SourceCounts {
        SourceCounts {
            name: name.into(),
            items: (1000, rate_hz),
            idle_s: if rate_hz > 0.0 { 0.0 } else { 1.0 },
            elapsed_s: 10.0,
            mb_s: Some(1.0),
            errors: (errors as u64, errors),
            drops: (0, 0.0),
        }
    }

    /// Silent is judged against what the source promised: a fast source with no data for
    /// 0.4 s is silent, a slow one's gap is normal, one that never sent is silent
    /// once the run is a few seconds old.
    #[test]
    fn silence_is_0_4_s_without_data_that_the_source_s_average_promised() {
        let silent = |items, idle_s, elapsed_s| {
            SourceCounts {
                name: "x".into(),
                items,
                idle_s,
                elapsed_s,
                mb_s: None,
                errors: (0, 0.0),
                drops: (0, 0.0),
            }
            .row(None)
            .bad
        };
        assert!(silent((20_000, 0.0), 0.5, 10.0), "2 kHz, none for 0.4 s");
        assert!(!silent((20_000, 0.0), 0.2, 10.0), "2 kHz, one late batch");
        assert!(!silent((20_000, 900.0), 0.0, 10.0), "2 kHz, some");
        assert!(
            !silent((150, 0.0), 0.75, 10.0),
            "15 Hz: 7.5 expected, such gaps happen"
        );
        assert!(silent((250, 0.0), 0.4, 10.0), "25 Hz: 10 expected");
        assert!(!silent((0, 0.0), 1.0, 1.0), "nothing yet, one second in");
        assert!(silent((0, 0.0), 2.5, 2.5), "nothing at all, 2.5 s in");
    }

    #[test]
    fn silent_or_erring_sources_are_bad_and_listed_first() {
        let rows = bad_first(vec![
            counts("a", 10.0, 0.0).row(None),
            counts("b", 0.0, 0.0).row(None),
            counts("c", 10.0, 3.0).row(Some("readout-1".into())),
        ]);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["b", "c", "a"]);
        assert_eq!(rows[0].why.as_deref(), Some("silent"));
        assert_eq!(rows[1].why.as_deref(), Some("3 errors/s"));
        assert!(!rows[2].bad && rows[2].why.is_none());
        let live = Live {
            model: "chain",
            elapsed_s: 2.0,
            figures: vec![Figure {
                key: "frames_per_s",
                label: "frames",
                value: 1234.5,
                unit: "/s",
            }],
            series: Series::default(),
            sources: rows,
            apps: Vec::new(),
        };
        assert_eq!(
            line(&live),
            "t=2.0s frames=1234/s  bad: b (silent), c (3 errors/s)"
        );
        // Absent series are null for the console, never missing keys.
        let json = serde_json::to_value(&live).unwrap();
        assert!(json["series"]["input_mb_s"].is_null());
        assert!(
            json["series"]
                .as_object()
                .unwrap()
                .contains_key("errors_per_s")
        );
    }
}
