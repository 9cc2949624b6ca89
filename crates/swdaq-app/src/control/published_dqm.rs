//! Histograms that users' analyzers publish (`POST /dqm/published`, the `swdaq.dqm` Python
//! API): each analyzer's newest set, for the run going on (or the last one), judged against
//! the reference set it sends by the run's own check (`[dqm]`'s test and thresholds, or the
//! defaults) and shown in `GET /dqm` among the built-in histograms, flagged and alerted on
//! the same way. Nothing an analyzer sends is trusted: the set is checked as a saved one is
//! (`HistSet::from_json`), and names, histograms and bins are bounded, so a publisher in a
//! loop cannot grow the server.

use super::journal::unix_seconds;
use crate::runtime::dqm::{Listed, histogram_json, reference_json};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;
use swdaq_control::Publication;
use swdaq_dqm::{Checks, HistSet, Quality, Verdict};

/// Analyzers kept at once; another one is refused until the next run.
pub const MAX_ANALYZERS: usize = 8;
/// Histograms one analyzer may publish.
pub const MAX_HISTOGRAMS: usize = 64;
/// Bins one histogram may have (the request's body is bounded too: 64 KiB).
pub const MAX_BINS: usize = 4096;
/// The longest analyzer or histogram name.
const MAX_NAME: usize = 48;

/// One analyzer's newest publication, judged.
#[derive(Debug, Clone)]
struct Published {
    set: HistSet,
    reference: Option<HistSet>,
    verdicts: BTreeMap<String, Verdict>,
    at: SystemTime,
}

/// Every analyzer's newest set for run `run`. Cheap to clone (each set is shared): `GET /dqm`
/// takes a copy under run control's lock and makes its answer without it.
#[derive(Debug, Clone, Default)]
pub struct PublishedDqm {
    run: Option<u32>,
    analyzers: BTreeMap<String, Arc<Published>>,
}

/// Letters, digits, `_`, `-` and `.`: safe in a page, a file name and an alert's key.
fn checked_name(what: &str, name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) {
        return Err(format!(
            "{what} {name:?}: give 1 to {MAX_NAME} letters, digits, '_', '-' or '.'"
        ));
    }
    Ok(())
}

/// `value` as a histogram set, checked as a saved one is and within this module's bounds.
fn checked_set(what: &str, value: Value) -> Result<HistSet, String> {
    let set = serde_json::from_value::<HistSet>(value)
        .map_err(|e| e.to_string())
        .and_then(HistSet::checked)
        .map_err(|e| format!("{what}: not a histogram set: {e}"))?;
    if set.histograms.len() > MAX_HISTOGRAMS {
        return Err(format!(
            "{what}: {} histograms, at most {MAX_HISTOGRAMS}",
            set.histograms.len()
        ));
    }
    for (name, h) in &set.histograms {
        checked_name(&format!("{what}: histogram"), name)?;
        if h.name != *name {
            return Err(format!(
                "{what}: histogram {name:?} calls itself {:?}",
                h.name
            ));
        }
        if h.axis.bins > MAX_BINS {
            return Err(format!(
                "{what}: histogram {name}: {} bins, at most {MAX_BINS}",
                h.axis.bins
            ));
        }
    }
    Ok(set)
}

impl PublishedDqm {
    /// Keeps `publication` as its analyzer's newest set for run `run` (a set for an earlier
    /// run is forgotten), each histogram judged by the check of its name as shown,
    /// `ANALYZER.NAME`; the answer says what was kept. `Err` says why nothing was.
    pub fn publish(
        &mut self,
        publication: Publication,
        run: u32,
        checks: &Checks,
    ) -> Result<Value, String> {
        let Publication {
            analyzer,
            set,
            reference,
        } = publication;
        checked_name("analyzer", &analyzer)?;
        let set = checked_set("set", set)?;
        let reference = reference.map(|r| checked_set("reference", r)).transpose()?;
        if self.run != Some(run) {
            self.run = Some(run);
            self.analyzers.clear();
        }
        if !self.analyzers.contains_key(&analyzer) && self.analyzers.len() >= MAX_ANALYZERS {
            return Err(format!(
                "run {run} has {MAX_ANALYZERS} analyzers already ({}): no more until the next run",
                self.analyzers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let verdicts = match &reference {
            Some(r) => (set.judge_with(r, |name| *checks.of(&format!("{analyzer}.{name}"))))
                .into_iter()
                .collect(),
            None => BTreeMap::new(),
        };
        let answer = json!({
            "analyzer": analyzer,
            "run_number": run,
            "histograms": set.histograms.len(),
            "judged": reference.is_some(),
        });
        let published = Published {
            set,
            reference,
            verdicts,
            at: SystemTime::now(),
        };
        self.analyzers.insert(analyzer, Arc::new(published));
        Ok(answer)
    }

    /// Whether `analyzer` has published for run `run`.
    pub fn has(&self, run: u32, analyzer: &str) -> bool {
        self.run == Some(run) && self.analyzers.contains_key(analyzer)
    }

    /// Forgets every analyzer's set (a new run starts).
    pub fn clear(&mut self) {
        self.run = None;
        self.analyzers.clear();
    }

    /// The run the sets are of, if any.
    pub fn run(&self) -> Option<u32> {
        self.run.filter(|_| !self.analyzers.is_empty())
    }

    /// Each histogram as `GET /dqm` lists it, named `ANALYZER.NAME`, with `source`,
    /// `events` (its set's) and `published_at_unix`; the reference drawn is the analyzer's
    /// own.
    pub fn listed(&self) -> Vec<Listed> {
        let mut listed = Vec::new();
        for (analyzer, p) in &self.analyzers {
            for (name, h) in &p.set.histograms {
                let verdict = p.verdicts.get(name);
                let mut json = histogram_json(h, verdict, reference_json(p.reference.as_ref(), h));
                let shown_name = format!("{analyzer}.{name}");
                json["name"] = json!(shown_name);
                if json["reference"].is_object() {
                    json["reference"]["label"] = json!(format!("{analyzer}'s reference"));
                }
                json["source"] = json!(format!("analyzer {analyzer}"));
                json["events"] = json!(p.set.events);
                json["published_at_unix"] = json!(unix_seconds(p.at));
                listed.push(Listed {
                    quality: verdict.map(|v| v.quality),
                    name: shown_name,
                    json,
                });
            }
        }
        listed
    }

    /// The histograms Bad in the newest sets, (`ANALYZER.NAME`, why).
    pub fn bad(&self) -> Vec<(String, String)> {
        let mut bad = Vec::new();
        for (analyzer, p) in &self.analyzers {
            for (name, v) in &p.verdicts {
                if v.quality == Quality::Bad {
                    bad.push((format!("{analyzer}.{name}"), v.why.clone()));
                }
            }
        }
        bad
    }

    /// Each analyzer: its name, its set's events and histograms, when it last published.
    pub fn analyzers_json(&self) -> Value {
        (self.analyzers.iter())
            .map(|(name, p)| {
                json!({
                    "name": name,
                    "events": p.set.events,
                    "histograms": p.set.histograms.len(),
                    "judged": p.reference.is_some(),
                    "published_at_unix": unix_seconds(p.at),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_dqm::{Axis, Hist1};

    fn set(events: u64, fill: &[f64]) -> Value {
        let mut set = HistSet::new();
        set.events = events;
        let h = set.entry("size", || {
            Hist1::new("size", "event size", Axis::new("size", "B", 20, 0.0, 20.0)).unwrap()
        });
        for &x in fill {
            h.fill(x);
        }
        serde_json::to_value(&set).unwrap()
    }

    fn publication(analyzer: &str, set: Value, reference: Option<Value>) -> Publication {
        Publication {
            analyzer: analyzer.into(),
            set,
            reference,
        }
    }

    fn spread(centre: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| centre + (i % 5) as f64 - 2.0).collect()
    }

    #[test]
    fn a_set_is_kept_judged_against_its_reference_and_shown_by_analyzer() {
        let mut p = PublishedDqm::default();
        let check = Checks::default();
        let reference = set(1000, &spread(5.0, 1000));
        let answer = p
            .publish(
                publication("sizes", set(1000, &spread(14.0, 1000)), Some(reference)),
                7,
                &check,
            )
            .unwrap();
        assert_eq!(answer["histograms"], 1);
        assert_eq!(p.run(), Some(7));
        assert!(p.has(7, "sizes") && !p.has(8, "sizes") && !p.has(7, "other"));
        let shown = p.listed();
        assert_eq!(shown.len(), 1);
        let (quality, h) = (shown[0].quality, &shown[0].json);
        assert_eq!(quality, Some(Quality::Bad));
        assert_eq!(h["name"], "sizes.size");
        assert_eq!(h["source"], "analyzer sizes");
        assert_eq!(h["reference"]["label"], "sizes's reference");
        assert_eq!(p.bad()[0].0, "sizes.size");
        // A check of its own for the name as shown, `ANALYZER.NAME`: nothing is below 0.
        let lenient = swdaq_dqm::Check {
            min_probability: 0.0,
            ..Default::default()
        };
        let own = Checks {
            named: vec![swdaq_dqm::NamedCheck::new("sizes.*", lenient).unwrap()],
            ..Checks::default()
        };
        let moved = || set(1000, &spread(14.0, 1000));
        let reference = || Some(set(1000, &spread(5.0, 1000)));
        p.publish(publication("sizes", moved(), reference()), 7, &own)
            .unwrap();
        assert_eq!(p.listed()[0].quality, Some(Quality::Good));
        p.publish(publication("other", moved(), reference()), 7, &own)
            .unwrap();
        let other = p
            .listed()
            .into_iter()
            .find(|l| l.json["name"] == "other.size");
        assert_eq!(
            other.unwrap().quality,
            Some(Quality::Bad),
            "not its pattern"
        );
        p.publish(publication("sizes", moved(), reference()), 7, &check)
            .unwrap();
        // The same shape as the reference: Good; no reference: not judged.
        p.publish(
            publication(
                "sizes",
                set(1000, &spread(5.0, 1000)),
                Some(set(1000, &spread(5.0, 1000))),
            ),
            7,
            &check,
        )
        .unwrap();
        let sizes = p.listed().into_iter().find(|l| l.name == "sizes.size");
        assert_eq!(sizes.unwrap().quality, Some(Quality::Good));
        p.publish(publication("other", set(3, &[1.0]), None), 7, &check)
            .unwrap();
        let shown = p.listed();
        assert_eq!(shown.len(), 2);
        let other = shown.iter().find(|l| l.json["source"] == "analyzer other");
        assert!(
            other.unwrap().quality.is_none(),
            "judged without a reference"
        );
        // A set for another run forgets the last run's.
        p.publish(publication("other", set(3, &[1.0]), None), 8, &check)
            .unwrap();
        assert_eq!(p.listed().len(), 1);
    }

    #[test]
    fn what_an_analyzer_sends_is_checked_and_bounded() {
        let mut p = PublishedDqm::default();
        let check = Checks::default();
        let refused =
            |p: &mut PublishedDqm, publication| p.publish(publication, 1, &check).unwrap_err();
        for name in ["", "a/b", "<script>", &"x".repeat(49)] {
            let why = refused(&mut p, publication(name, set(1, &[]), None));
            assert!(why.starts_with("analyzer"), "{why}");
        }
        let mut bad_counts = set(1, &[]);
        bad_counts["histograms"]["size"]["counts"] = json!([1, 2]);
        assert!(
            refused(&mut p, publication("a", bad_counts, None)).contains("not a histogram set")
        );
        let mut bad_axis = set(1, &[]);
        bad_axis["histograms"]["size"]["axis"]["hi"] = json!(-1.0);
        assert!(refused(&mut p, publication("a", bad_axis, None)).contains("no axis"));
        let mut renamed = set(1, &[]);
        renamed["histograms"]["size"]["name"] = json!("other");
        assert!(refused(&mut p, publication("a", renamed, None)).contains("calls itself"));
        let mut huge = set(1, &[]);
        huge["histograms"]["size"]["axis"]["bins"] = json!(MAX_BINS + 1);
        huge["histograms"]["size"]["counts"] = json!(vec![0; MAX_BINS + 3]);
        assert!(refused(&mut p, publication("a", huge, None)).contains("at most"));
        assert!(
            refused(&mut p, publication("a", json!("x"), None)).contains("not a histogram set")
        );
        let bad_reference = Some(json!({ "version": 1 }));
        assert!(
            refused(&mut p, publication("a", set(1, &[]), bad_reference)).starts_with("reference")
        );
        assert!(p.listed().is_empty(), "a refused set is not kept");
        for i in 0..MAX_ANALYZERS {
            p.publish(publication(&format!("a{i}"), set(1, &[]), None), 1, &check)
                .unwrap();
        }
        assert!(refused(&mut p, publication("one-more", set(1, &[]), None)).contains("no more"));
        // One already kept may publish again.
        p.publish(publication("a0", set(2, &[]), None), 1, &check)
            .unwrap();
    }
}
