//! The last ten minutes of the series a shifter watches (the `Live` schema's `series`), one
//! sample a second at most, kept by run control across runs so a console opened late, or
//! reconnecting after a restart of the page, still draws them. Bounded: a ring of at most
//! [`CAPACITY`] samples, none older than [`SPAN`].

use serde_json::{Value, json};
use std::collections::VecDeque;

/// The series kept, as named in `Live.series`.
pub const SERIES: [&str; 6] = [
    "input_mb_s",
    "event_hz",
    "backlog",
    "throttled",
    "drops_per_s",
    "errors_per_s",
];

/// How far back the history goes, in seconds.
pub const SPAN: f64 = 600.0;
/// The least time between two samples, in seconds: a status interval below a second adds
/// no more samples, and one of a second (give or take the scheduler) adds every one.
const MIN_STEP: f64 = 0.9;
/// At most one sample per [`MIN_STEP`] over [`SPAN`].
pub const CAPACITY: usize = (SPAN / MIN_STEP) as usize + 1;

struct Sample {
    /// Unix time, in seconds.
    t: f64,
    run_number: u32,
    values: [Option<f64>; SERIES.len()],
}

#[derive(Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Adds the series of `live` (a `Live` as JSON) at unix time `t`, unless the last sample
    /// is less than a step before it; drops what has fallen out of the span.
    pub fn add(&mut self, t: f64, run_number: u32, live: &Value) {
        if self
            .samples
            .back()
            .is_some_and(|last| t - last.t < MIN_STEP)
        {
            return;
        }
        let values = SERIES.map(|name| live["series"][name].as_f64().filter(|v| v.is_finite()));
        while self.samples.len() >= CAPACITY || self.samples.front().is_some_and(|s| t - s.t > SPAN)
        {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            t,
            run_number,
            values,
        });
    }

    /// The samples after unix time `since` (all without), column by column as uPlot takes
    /// them: `{"span_s", "t": [...], "run_number": [...], "<series>": [...]}`.
    pub fn to_json(&self, since: Option<f64>) -> Value {
        let after = |s: &&Sample| since.is_none_or(|since| s.t > since);
        let column = |f: &dyn Fn(&Sample) -> Value| -> Value {
            self.samples.iter().filter(after).map(f).collect()
        };
        let mut out = json!({
            "span_s": SPAN,
            "t": column(&|s| json!(s.t)),
            "run_number": column(&|s| json!(s.run_number)),
        });
        for (i, name) in SERIES.iter().enumerate() {
            out[*name] = column(&|s| json!(s.values[i]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(mb: f64) -> Value {
        json!({ "series": { "input_mb_s": mb, "event_hz": null, "backlog": 0.5 } })
    }

    #[test]
    fn samples_come_at_most_a_step_apart_and_read_as_columns() {
        let mut h = History::default();
        h.add(100.0, 1, &live(1.0));
        h.add(100.5, 1, &live(2.0));
        h.add(101.0, 1, &live(3.0));
        let all = h.to_json(None);
        assert_eq!(all["t"], json!([100.0, 101.0]));
        assert_eq!(all["input_mb_s"], json!([1.0, 3.0]));
        assert_eq!(all["event_hz"], json!([null, null]));
        assert_eq!(all["errors_per_s"], json!([null, null]));
        assert_eq!(all["backlog"], json!([0.5, 0.5]));
        assert_eq!(h.to_json(Some(100.0))["t"], json!([101.0]));
        assert_eq!(h.to_json(Some(101.0))["t"], json!([]));
    }

    #[test]
    fn it_keeps_ten_minutes_and_never_grows_beyond_its_capacity() {
        let mut h = History::default();
        // An hour at 10 samples a second, then one sample a second for an hour.
        for i in 0..36_000 {
            h.add(f64::from(i) * 0.1, 1, &live(1.0));
        }
        for i in 0..3_600 {
            h.add(3_600.0 + f64::from(i), 2, &live(1.0));
            assert!(h.samples.len() <= CAPACITY);
        }
        let t = h.to_json(None)["t"].as_array().unwrap().clone();
        let (first, last) = (t[0].as_f64().unwrap(), t[t.len() - 1].as_f64().unwrap());
        assert!(last - first <= SPAN, "{first} .. {last}");
        assert!(h.samples.len() >= 600, "{}", h.samples.len());
    }
}
