//! `Live`: the one schema of a running system's figures, whatever the model — the terminal
//! view of `swdaq run`, `/status` of `swdaq serve` and the web console all read it. Each
//! model's `live.rs` fills it from a monitoring snapshot (in applications: the snapshot the
//! launcher merges from their series, `runtime::live_feed`); this module also holds the
//! snapshot readers they share and the terminal line.

use serde::Serialize;
use std::collections::BTreeMap;
use swdaq_monitor::{Snapshot, Value};

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
    pub rate_hz: f64,
    pub mb_s: Option<f64>,
    pub errors: (u64, f64),
    pub drops: (u64, f64),
}

impl SourceCounts {
    /// The row, bad when errors or drops rose in the last interval or the source was silent.
    pub fn row(self) -> SourceRow {
        let mut why = Vec::new();
        if self.errors.1 > 0.0 {
            why.push(format!("{:.0} errors/s", self.errors.1));
        }
        if self.drops.1 > 0.0 {
            why.push(format!("{:.0} drops/s", self.drops.1));
        }
        if self.rate_hz == 0.0 {
            why.push("silent".to_string());
        }
        SourceRow {
            name: self.name,
            app: None,
            rate_hz: self.rate_hz,
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
        keys: Option<Vec<String>>,
        name: impl Fn(&str) -> String,
    ) -> Vec<SourceRow> {
        let rate = by_label(s, self.rate, self.label);
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
                    rate_hz: get(&rate).1,
                    mb_s: Some(get(&data).1 * self.data.1 / 1e6),
                    errors: total(&errors),
                    drops: total(&drops),
                }
                .row()
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
    for series in s
        .families
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| &f.series)
    {
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

/// The values of every series of metric `name`.
pub fn values<'a>(s: &'a Snapshot, name: &'a str) -> impl Iterator<Item = &'a Value> {
    s.families
        .iter()
        .filter(move |f| f.name == name)
        .flat_map(|f| &f.series)
        .map(|series| &series.value)
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
            rate_hz,
            mb_s: Some(1.0),
            errors: (errors as u64, errors),
            drops: (0, 0.0),
        }
    }

    #[test]
    fn silent_or_erring_sources_are_bad_and_listed_first() {
        let rows = bad_first(vec![
            counts("a", 10.0, 0.0).row(),
            counts("b", 0.0, 0.0).row(),
            counts("c", 10.0, 3.0).row(),
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
