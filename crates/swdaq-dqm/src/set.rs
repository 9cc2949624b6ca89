//! A run's histograms by name: merged across files, saved as JSON to serve as a later run's
//! reference, and judged histogram by histogram against a reference set, worst first.

use crate::checks::Checks;
use crate::compare::{Check, Quality, Verdict, compare, compare_counts};
use crate::hist::{Hist1, HistError, HistKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The layout's version in a saved set: a reader refuses one it does not know.
const SET_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a swdaq histogram set: {reason}")]
    Format { path: String, reason: String },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistSet {
    pub version: u32,
    /// Events the histograms were filled from (the rates of [`HistKind::Counts`] ones).
    #[serde(default)]
    pub events: u64,
    pub histograms: BTreeMap<String, Hist1>,
}

impl HistSet {
    pub fn new() -> HistSet {
        HistSet {
            version: SET_VERSION,
            events: 0,
            histograms: BTreeMap::new(),
        }
    }

    /// The histogram named `name`, made with `make` the first time.
    pub fn entry(&mut self, name: &str, make: impl FnOnce() -> Hist1) -> &mut Hist1 {
        self.histograms.entry(name.to_owned()).or_insert_with(make)
    }

    /// Adds `other`'s histograms (another file of the same run).
    pub fn merge(&mut self, other: HistSet) -> Result<(), HistError> {
        self.events += other.events;
        for (name, h) in other.histograms {
            match self.histograms.get_mut(&name) {
                Some(mine) => mine.merge(&h)?,
                None => {
                    self.histograms.insert(name, h);
                }
            }
        }
        Ok(())
    }

    pub fn save(&self, path: &Path) -> Result<(), SetError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| SetError::Format {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        // Never replacing a file: a reference is data too.
        let io = |source| SetError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = std::fs::File::create_new(path).map_err(io)?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io)
    }

    pub fn load(path: &Path) -> Result<HistSet, SetError> {
        let text = std::fs::read_to_string(path).map_err(|source| SetError::Io {
            path: path.display().to_string(),
            source,
        })?;
        HistSet::from_json(&text).map_err(|reason| SetError::Format {
            path: path.display().to_string(),
            reason,
        })
    }

    /// A saved set's text, checked ([`HistSet::checked`]).
    pub fn from_json(text: &str) -> Result<HistSet, String> {
        serde_json::from_str::<HistSet>(text)
            .map_err(|e| e.to_string())?
            .checked()
    }

    /// The set, if it is one: its version this swdaq's, and every histogram's axis and counts
    /// whole (a set read from a file or a peer is never trusted).
    pub fn checked(self) -> Result<HistSet, String> {
        if self.version != SET_VERSION {
            return Err(format!(
                "version {}, this swdaq reads {SET_VERSION}",
                self.version
            ));
        }
        for (name, h) in &self.histograms {
            let checked = Hist1::new(name, &h.title, h.axis.clone()).map_err(|e| e.to_string())?;
            // Entries are summed as u64 everywhere: a total beyond it is no real histogram.
            if h.counts
                .iter()
                .try_fold(0u64, |sum, &c| sum.checked_add(c))
                .is_none()
            {
                return Err(format!("{name}: more entries than a 64-bit count holds"));
            }
            if checked.counts.len() != h.counts.len() {
                return Err(format!(
                    "{name}: {} counts for {} bins",
                    h.counts.len(),
                    h.axis.bins
                ));
            }
        }
        Ok(self)
    }

    /// Each histogram against the reference's of the same name by its check, worst first;
    /// one the reference lacks is Undetermined.
    pub fn judge(&self, reference: &HistSet, checks: &Checks) -> Vec<(String, Verdict)> {
        self.judge_with(reference, |name| *checks.of(name))
    }

    /// As [`HistSet::judge`], each histogram by the check `check_of` gives its name.
    pub fn judge_with(
        &self,
        reference: &HistSet,
        check_of: impl Fn(&str) -> Check,
    ) -> Vec<(String, Verdict)> {
        let mut verdicts: Vec<(String, Verdict)> = self
            .histograms
            .iter()
            .map(|(name, h)| {
                let check = &check_of(name);
                let verdict = match reference.histograms.get(name) {
                    Some(r) => match h.kind {
                        HistKind::Distribution => compare(h, r, check),
                        HistKind::Counts => {
                            compare_counts(h, self.events, r, reference.events, check)
                        }
                    }
                    .unwrap_or_else(|e| undetermined(check, e.to_string())),
                    None => undetermined(check, "not in the reference".into()),
                };
                (name.clone(), verdict)
            })
            .collect();
        verdicts.sort_by(|a, b| a.1.quality.cmp(&b.1.quality).then(a.0.cmp(&b.0)));
        verdicts
    }
}

/// Whether `name` is one source's histogram (a FED's, a ROB's, a link's) rather than one of
/// the whole event's. Every fill function names a source's histogram `QUANTITY_ID`, its id in
/// fixed-width digits (`fed_size_0001`, `rob_data_size_0012a000`, `noisy_channels_link_0003`),
/// so a viewer can put the culprit before the aggregate that only follows it (the event size
/// grows with one FED's).
pub fn is_per_source(name: &str) -> bool {
    name.rsplit_once('_').is_some_and(|(_, id)| {
        id.len() >= 4
            && id.bytes().all(|b| b.is_ascii_hexdigit())
            && id.bytes().any(|b| b.is_ascii_digit())
    })
}

fn undetermined(check: &Check, why: String) -> Verdict {
    Verdict {
        quality: Quality::Undetermined,
        test: check.test.into(),
        statistic: None,
        probability: None,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Axis;

    fn set(values: &[f64]) -> HistSet {
        let mut s = HistSet::new();
        let h = s.entry("x", || {
            Hist1::new("x", "x", Axis::new("x", "", 10, 0.0, 10.0)).unwrap()
        });
        for &v in values {
            h.fill(v);
        }
        s
    }

    #[test]
    fn a_saved_set_loads_back_and_is_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("swdaq-dqm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ref.json");
        let _ = std::fs::remove_file(&path);
        let s = set(&[1.0, 2.0, 2.5]);
        s.save(&path).unwrap();
        assert_eq!(HistSet::load(&path).unwrap(), s);
        assert!(
            s.save(&path).is_err(),
            "an existing reference is never replaced"
        );
        std::fs::write(&path, "{\"version\": 7, \"histograms\": {}}").unwrap();
        let error = HistSet::load(&path).unwrap_err().to_string();
        assert!(error.contains("version 7"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn per_source_names_are_told_from_aggregates() {
        for name in [
            "fed_size_0001",
            "rob_data_size_0012a000",
            "missing_elinks_0012a000",
            "dead_channels_link_0003",
        ] {
            assert!(is_per_source(name), "{name}");
        }
        for name in ["event_size", "feds_per_event", "dead_face", "size_12", "x"] {
            assert!(!is_per_source(name), "{name}");
        }
    }

    #[test]
    fn a_damaged_set_is_refused_with_its_reason() {
        let dir = std::env::temp_dir().join(format!("swdaq-dqm-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.json");
        let mut s = set(&[1.0]);
        s.histograms.get_mut("x").unwrap().counts.pop();
        std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
        let error = HistSet::load(&path).unwrap_err().to_string();
        assert!(error.contains("counts for 10 bins"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verdicts_come_worst_first_and_a_missing_reference_is_undetermined() {
        let good: Vec<f64> = (0..500).map(|i| (i % 10) as f64).collect();
        let bad: Vec<f64> = (0..500).map(|i| (i % 3) as f64).collect();
        let mut run = set(&bad);
        run.entry("y", || {
            Hist1::new("y", "y", Axis::new("y", "", 2, 0.0, 1.0)).unwrap()
        });
        let verdicts = run.judge(&set(&good), &Checks::default());
        let flags: Vec<(&str, Quality)> = verdicts
            .iter()
            .map(|(n, v)| (n.as_str(), v.quality))
            .collect();
        assert_eq!(flags, [("x", Quality::Bad), ("y", Quality::Undetermined)]);
    }
}
