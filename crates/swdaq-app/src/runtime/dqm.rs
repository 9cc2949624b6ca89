//! `[dqm]`: online data-quality monitoring (#37), whatever the model. The model's data
//! threads sample what they hand on into a bounded channel (a full one is a counted drop);
//! one monitoring thread fills the run's histograms with the model's fill function (the one
//! `swdaq dqm` uses on files) and judges them against `reference_run`'s set while the run
//! lasts. At the stop the set is saved beside the run's data as `dqm_runNNNNNN.h5` (a new
//! file, never replacing one) and recorded with the run's files. While the run lasts, its
//! [`DqmView`] is what run control's console shows (`GET /dqm`).

use crate::run_section::RunSection;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, UNIX_EPOCH};
use swdaq_dqm::checks::MAX_NAMED;
use swdaq_dqm::online::{Judging, Latest, OnlineOutcome};
use swdaq_dqm::sample::{SampleCounts, SampleTap};
use swdaq_dqm::{Check, Checks, HistSet, NamedCheck, Quality, Test, Verdict};
use swdaq_format::file_checksum;
use swdaq_format::provenance::Provenance;
use swdaq_monitor::{MonitorError, Registry};

/// Longest sample queue `dqm.queue` may ask for: samples are whole events.
const MAX_QUEUE: usize = 65_536;

/// Histograms one `/dqm` answer holds at most, worst first (the rest are counted): more are
/// no longer readable as a grid of plots, and the answer stays small whatever the detector.
pub const MAX_HISTOGRAMS_SHOWN: usize = 256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DqmSection {
    /// Off unless asked for.
    pub enabled: bool,
    /// Every N-th item of each data thread is sampled (1: every one).
    pub sample_every: u32,
    /// Samples waiting for the monitoring thread at most; one more is dropped and counted.
    pub queue: usize,
    /// The run whose saved set (`dqm_runNNNNNN.h5` in the output directory) each histogram
    /// is judged against; absent: histograms are filled and saved, not judged.
    pub reference_run: Option<u32>,
    /// `chi2` or `kolmogorov` (histograms of rare counts are judged by Poisson).
    pub test: Test,
    /// Below this probability a histogram is Bad.
    pub min_probability: f64,
    /// Fewer entries than this (run or reference): Undetermined.
    pub min_entries: u64,
    /// Seconds between the qualities' updates while the run lasts.
    pub judge_interval_s: f64,
    /// The share of one core the monitoring thread may use (its own CPU time, averaged over
    /// a second): a sample that comes while it is over is skipped and counted. 1: no limit.
    pub max_core_share: f64,
    /// Checks of their own for the histograms whose names match (`[[dqm.histograms]]`, the
    /// first that matches wins); the rest are judged by the keys above.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub histograms: Vec<HistogramCheck>,
}

/// `[[dqm.histograms]]`: a test and thresholds for the histograms `names` matches (a name,
/// or a shell pattern: `noise_rms_*`; an analyzer's as `ANALYZER.NAME`); a key not given is
/// `[dqm]`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramCheck {
    pub names: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_probability: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_entries: Option<u64>,
}

impl Default for DqmSection {
    fn default() -> Self {
        let check = Check::default();
        Self {
            enabled: false,
            sample_every: 10,
            queue: 256,
            reference_run: None,
            test: check.test,
            min_probability: check.min_probability,
            min_entries: check.min_entries,
            judge_interval_s: 5.0,
            max_core_share: 0.1,
            histograms: Vec::new(),
        }
    }
}

/// The name of run `run`'s saved set in its output directory.
pub fn file_name(run: u32) -> String {
    format!("dqm_run{run:06}.h5")
}

impl DqmSection {
    /// Checks the keys before anything starts; an error names the key. `run` is the run's
    /// own number (0: not chosen yet). In a topology each model checks its applications'
    /// sample streams (`runtime::dqm_stream::StreamKeys::check`).
    pub fn validate(&self, run: u32) -> anyhow::Result<()> {
        let invalid = |what: String| Err(anyhow::anyhow!("invalid configuration: dqm.{what}"));
        if self.sample_every == 0 {
            return invalid("sample_every: 0: give N >= 1 (every N-th event)".into());
        }
        if !(1..=MAX_QUEUE).contains(&self.queue) {
            return invalid(format!(
                "queue: {}: must be in [1, {MAX_QUEUE}]",
                self.queue
            ));
        }
        if !(0.0..=1.0).contains(&self.min_probability) {
            return invalid(format!(
                "min_probability: {}: must be a probability, in [0, 1]",
                self.min_probability
            ));
        }
        self.checks()
            .map_err(|e| anyhow::anyhow!("invalid configuration: dqm.{e}"))?;
        if !(0.1..=3600.0).contains(&self.judge_interval_s) {
            return invalid(format!(
                "judge_interval_s: {}: must be in [0.1, 3600]",
                self.judge_interval_s
            ));
        }
        if !(self.max_core_share > 0.0 && self.max_core_share <= 1.0) {
            return invalid(format!(
                "max_core_share: {}: must be in (0, 1] (1: a whole core, no limit)",
                self.max_core_share
            ));
        }
        match self.reference_run {
            Some(_) if !self.enabled => invalid("reference_run: needs dqm.enabled = true".into()),
            Some(0) => invalid("reference_run: 0: give the number of a run with DQM".into()),
            Some(r) if r == run => invalid(format!(
                "reference_run: {r} is this run: give an earlier one"
            )),
            _ => Ok(()),
        }
    }

    /// Each histogram's check: `[[dqm.histograms]]`'s, else the section's; an error names
    /// the entry and its key.
    fn checks(&self) -> Result<Checks, String> {
        let default = Check {
            test: self.test,
            min_probability: self.min_probability,
            min_entries: self.min_entries,
        };
        if self.histograms.len() > MAX_NAMED {
            return Err(format!(
                "histograms: {} entries: at most {MAX_NAMED}",
                self.histograms.len()
            ));
        }
        let named = (self.histograms.iter().enumerate())
            .map(|(i, h)| {
                let check = Check {
                    test: h.test.unwrap_or(default.test),
                    min_probability: h.min_probability.unwrap_or(default.min_probability),
                    min_entries: h.min_entries.unwrap_or(default.min_entries),
                };
                if !(0.0..=1.0).contains(&check.min_probability) {
                    return Err(format!(
                        "histograms[{i}].min_probability: {}: must be a probability, in [0, 1]",
                        check.min_probability
                    ));
                }
                NamedCheck::new(&h.names, check).map_err(|e| format!("histograms[{i}].{e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Checks { default, named })
    }

    /// The monitoring thread, if enabled, its reference loaded from `output_dir` (an error
    /// names the file). `fill` is the model's fill function for one sample.
    pub fn start<T: Send + 'static, E: std::fmt::Display + 'static>(
        &self,
        output_dir: &Path,
        fill: fn(&mut HistSet, T) -> Result<(), E>,
        registry: &Registry,
    ) -> anyhow::Result<Option<OnlineDqm<T>>> {
        if !self.enabled {
            return Ok(None);
        }
        let reference = match self.reference_run {
            Some(run) => {
                let path = output_dir.join(file_name(run));
                let set = swdaq_dqm::hdf5_file::load(&path).map_err(|e| {
                    anyhow::anyhow!("dqm.reference_run = {run}: its histogram set: {e}")
                })?;
                Some(set)
            }
            None => None,
        };
        // The console draws each histogram over its reference: the view keeps a copy.
        let drawn_reference = reference.clone().map(Arc::new);
        let checks = self.checks().map_err(|e| anyhow::anyhow!("dqm.{e}"))?;
        let judging = Judging {
            reference,
            checks: checks.clone(),
            every: Duration::from_secs_f64(self.judge_interval_s),
        };
        let (sender, samples) = crossbeam_channel::bounded(self.queue);
        let registry = registry.clone();
        let latest = Latest::default();
        let published = latest.clone();
        let share = self.max_core_share;
        let thread = std::thread::Builder::new()
            .name("dqm".into())
            .spawn(move || {
                swdaq_dqm::online::run(samples, fill, &judging, share, &registry, &published)
            })?;
        Ok(Some(OnlineDqm {
            tap: SampleTap::new(sender, self.sample_every),
            thread,
            view: DqmView {
                latest,
                reference_run: self.reference_run,
                reference: drawn_reference,
                checks,
                judge_interval_s: self.judge_interval_s,
            },
        }))
    }
}

/// What the console shows of a run's online monitoring: the set the monitoring thread last
/// published and how it is judged. Cheap to clone; it outlives the run (its last publication
/// is the run's final set).
#[derive(Debug, Clone)]
pub struct DqmView {
    latest: Latest,
    reference_run: Option<u32>,
    /// The reference run's set, drawn under each histogram it has.
    reference: Option<Arc<HistSet>>,
    checks: Checks,
    judge_interval_s: f64,
}

impl DqmView {
    /// The histograms Bad in the last publication, (name, why) worst first (as judged).
    pub fn bad(&self) -> Vec<(String, String)> {
        let Some(published) = self.latest.get() else {
            return Vec::new();
        };
        (published.verdicts.iter().flatten())
            .filter(|(_, v)| v.quality == Quality::Bad)
            .map(|(name, v)| (name.clone(), v.why.clone()))
            .collect()
    }

    /// `GET /dqm`'s answer: each histogram (at most [`MAX_HISTOGRAMS_SHOWN`]) with its axis,
    /// in-range counts, under- and overflow, entries and its verdict (none without a
    /// reference), worst first (Bad, Undetermined, Good, then the unjudged; among equals a
    /// source's histograms before the aggregates, then by name); when it
    /// was published and what the samplers had counted. Made from an `Arc` of the last
    /// publication, without holding the monitoring thread. `extra` (users' analyzers'
    /// histograms) are listed among them in the same order.
    pub fn to_json(&self, extra: Vec<Listed>) -> Value {
        let mut answer = json!({
            "enabled": true,
            "reference_run": self.reference_run,
            "check": self.checks.default,
            "checks": self.checks.named,
            "judge_interval_s": self.judge_interval_s,
        });
        let Some(published) = self.latest.get() else {
            answer["why"] =
                json!("no histograms yet: the first are published one judge interval into the run");
            put_worst_first(&mut answer, Vec::new(), None, extra);
            return answer;
        };
        let verdicts: BTreeMap<&str, &Verdict> = (published.verdicts.iter().flatten())
            .map(|(name, verdict)| (name.as_str(), verdict))
            .collect();
        let own: Vec<_> = (published.set.histograms.iter())
            .map(|(name, h)| (verdicts.get(name.as_str()).copied(), h))
            .collect();
        let count = |quality: Quality| verdicts.values().filter(|v| v.quality == quality).count();
        answer["judged_at_unix"] = json!(
            published
                .at
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        );
        answer["last"] = json!(published.last);
        answer["events"] = json!(published.set.events);
        answer["samples"] = json!(published.samples);
        answer["unreadable"] = json!(published.unreadable);
        answer["skipped"] = json!(published.skipped);
        answer["qualities"] = json!({
            "bad": count(Quality::Bad),
            "undetermined": count(Quality::Undetermined),
            "good": count(Quality::Good),
        });
        put_worst_first(&mut answer, own, self.reference.as_deref(), extra);
        answer
    }

    /// How this run's histograms are judged.
    pub fn checks(&self) -> &Checks {
        &self.checks
    }
}

/// `reference`'s histogram of `h`'s name and binning, its in-range counts and the events its
/// set was filled from (a client scales it to `h`: by entries for a distribution, by events
/// for counts); `null` without one.
pub fn reference_json(reference: Option<&HistSet>, h: &swdaq_dqm::Hist1) -> Value {
    match reference.and_then(|set| set.histograms.get(&h.name).map(|r| (set, r))) {
        Some((set, r)) if h.same_binning(r).is_ok() => json!({
            "counts": r.bins(),
            "entries": r.entries(),
            "events": set.events,
        }),
        _ => Value::Null,
    }
}

/// The order `GET /dqm` shows histograms in: worst first (Bad, Undetermined, Good, then the
/// unjudged); among equals a source's histogram before the whole event's (the culprit, a FED
/// grown, leads, not the aggregate that grew with it), then by name.
fn worst_first(a: (Option<Quality>, &str), b: (Option<Quality>, &str)) -> std::cmp::Ordering {
    let rank = |q: Option<Quality>| (q.is_none(), q);
    let aggregate = |name: &str| !swdaq_dqm::is_per_source(name);
    (rank(a.0).cmp(&rank(b.0)))
        .then(aggregate(a.1).cmp(&aggregate(b.1)))
        .then(a.1.cmp(b.1))
}

/// A histogram `GET /dqm` lists that is not the run's own (a user's analyzer's): its quality
/// (`None`: not judged) and name, which place it, and how it is shown.
pub struct Listed {
    pub quality: Option<Quality>,
    pub name: String,
    pub json: Value,
}

/// The run's `own` histograms (with their verdicts; each drawn over `reference`'s of its
/// name) and `extra`, worst first ([`worst_first`]), into `answer`: `histograms_total`, and
/// `histograms` the first [`MAX_HISTOGRAMS_SHOWN`] (only those are made into JSON).
pub fn put_worst_first(
    answer: &mut Value,
    own: Vec<(Option<&Verdict>, &swdaq_dqm::Hist1)>,
    reference: Option<&HistSet>,
    extra: Vec<Listed>,
) {
    enum Entry<'a> {
        Own(Option<&'a Verdict>, &'a swdaq_dqm::Hist1),
        Extra(Listed),
    }
    fn key<'e>(e: &'e Entry) -> (Option<Quality>, &'e str) {
        match e {
            Entry::Own(v, h) => (v.map(|v| v.quality), &h.name),
            Entry::Extra(l) => (l.quality, &l.name),
        }
    }
    let mut all: Vec<Entry> = (own.into_iter().map(|(v, h)| Entry::Own(v, h)))
        .chain(extra.into_iter().map(Entry::Extra))
        .collect();
    all.sort_by(|a, b| worst_first(key(a), key(b)));
    answer["histograms_total"] = json!(all.len());
    answer["histograms"] = (all.into_iter().take(MAX_HISTOGRAMS_SHOWN))
        .map(|e| match e {
            Entry::Own(verdict, h) => histogram_json(h, verdict, reference_json(reference, h)),
            Entry::Extra(listed) => listed.json,
        })
        .collect();
}

/// One histogram as `GET /dqm` shows it: its axis, in-range counts, under- and overflow,
/// entries, `reference` (drawn under it, or `null`) and its verdict (`null`: not judged).
pub fn histogram_json(h: &swdaq_dqm::Hist1, verdict: Option<&Verdict>, reference: Value) -> Value {
    json!({
        "name": h.name,
        "title": h.title,
        "kind": h.kind,
        "axis": h.axis,
        "counts": h.bins(),
        "underflow": h.underflow(),
        "overflow": h.overflow(),
        "entries": h.entries(),
        "reference": reference,
        "verdict": verdict.map(|v| json!({
            "quality": v.quality,
            "probability": v.probability,
            "statistic": v.statistic,
            "test": v.test,
            "reason": v.why,
        })),
    })
}

/// A running monitoring thread and the tap its samplers are made from.
pub struct OnlineDqm<T> {
    tap: SampleTap<T>,
    thread: JoinHandle<Result<OnlineOutcome, MonitorError>>,
    view: DqmView,
}

impl<T> OnlineDqm<T> {
    pub fn tap(&self) -> &SampleTap<T> {
        &self.tap
    }

    /// What the console shows of it (`RunHooks::dqm`).
    pub fn view(&self) -> DqmView {
        self.view.clone()
    }

    /// Once every data thread's sampler has gone (their counts `samples`): the thread's
    /// outcome, the set saved as `run`'s in its output directory, naming the run and the
    /// software, and noted among its files.
    pub fn finish(self, run: &RunSection, samples: SampleCounts) -> DqmReport {
        // The tap's own sender: once it goes, the thread drains what is queued and ends.
        drop(self.tap);
        let mut report = DqmReport {
            samples,
            reference_run: self.view.reference_run,
            checks: self.view.checks.clone(),
            ..Default::default()
        };
        let outcome = match self.thread.join() {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                report.error = Some(format!("the monitoring thread: {e}"));
                return report;
            }
            Err(_) => {
                report.error = Some("the monitoring thread panicked".into());
                return report;
            }
        };
        let path = run.output_dir.join(file_name(run.number));
        match save(&outcome.set, &run.provenance(), &path) {
            Ok(()) => report.file = Some(path),
            Err(e) => report.error = Some(e),
        }
        report.events = outcome.set.events;
        report.histograms = outcome.set.histograms.len();
        report.unreadable = outcome.unreadable;
        report.skipped = outcome.skipped;
        report.first_problem = outcome.first_problem;
        report.verdicts = outcome.verdicts;
        report
    }
}

/// A new file at `path`, noted with its checksums for the run registry.
fn save(set: &HistSet, provenance: &Provenance, path: &Path) -> Result<(), String> {
    swdaq_dqm::hdf5_file::save(set, path, Some(provenance))?;
    // As the HDF5 data files: its checksums are read back when the run's record is made.
    file_checksum::note_closed(provenance.run_number, path, None);
    Ok(())
}

/// What online monitoring made of a run, for its summary.
#[derive(Debug, Clone, Default)]
pub struct DqmReport {
    pub samples: SampleCounts,
    /// Events the histograms hold (samples read).
    pub events: u64,
    pub histograms: usize,
    pub unreadable: u64,
    /// Samples the monitoring thread skipped: it had used its share of a core.
    pub skipped: u64,
    pub first_problem: Option<String>,
    /// Where the set was saved; none if it could not be (then `error` says why).
    pub file: Option<PathBuf>,
    pub error: Option<String>,
    pub reference_run: Option<u32>,
    pub checks: Checks,
    pub verdicts: Option<Vec<(String, Verdict)>>,
}

impl DqmReport {
    /// How many verdicts of `quality`.
    fn count(&self, quality: Quality) -> usize {
        self.verdicts
            .iter()
            .flatten()
            .filter(|(_, v)| v.quality == quality)
            .count()
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "DQM: {} events sampled, {} dropped (sample queue full), {} skipped (over its share of a core), {} unreadable; {} histograms",
            self.samples.sampled,
            self.samples.dropped,
            self.skipped,
            self.unreadable,
            self.histograms
        );
        match (&self.file, &self.error) {
            (Some(file), _) => out += &format!(" saved to {}\n", file.display()),
            (None, Some(e)) => out += &format!(" NOT saved: {e}\n"),
            (None, None) => out += "\n",
        }
        if let Some(problem) = &self.first_problem {
            out += &format!("  first unreadable sample: {problem}\n");
        }
        if let (Some(run), Some(verdicts)) = (self.reference_run, &self.verdicts) {
            out += &format!(
                "DQM against run {run} ({:?}, Bad below probability {}{}): {} Bad, {} Undetermined, {} Good\n",
                self.checks.default.test,
                self.checks.default.min_probability,
                match self.checks.named.len() {
                    0 => String::new(),
                    n => format!("; {n} checks of their own ([[dqm.histograms]])"),
                },
                self.count(Quality::Bad),
                self.count(Quality::Undetermined),
                self.count(Quality::Good)
            );
            for (name, v) in verdicts.iter().filter(|(_, v)| v.quality != Quality::Good) {
                out += &format!("  {:?} {name}: {}\n", v.quality, v.why);
            }
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "sampled": self.samples.sampled,
            "dropped": self.samples.dropped,
            "skipped": self.skipped,
            "events": self.events,
            "histograms": self.histograms,
            "unreadable": self.unreadable,
            "file": self.file,
            "error": self.error,
            "reference_run": self.reference_run,
            "check": self.checks.default,
            "checks": self.checks.named,
            "verdicts": self.verdicts.as_ref().map(|v| v.iter()
                .map(|(name, v)| serde_json::json!({"name": name, "verdict": v}))
                .collect::<Vec<_>>()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> anyhow::Result<DqmSection> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            dqm: DqmSection,
        }
        let file: File = crate::run_section::parse(text, None)?;
        file.dqm.validate(7)?;
        Ok(file.dqm)
    }

    /// Counts `x` events per sample.
    fn fill(set: &mut HistSet, x: u8) -> Result<(), String> {
        set.events += u64::from(x);
        Ok(())
    }

    #[test]
    fn a_section_reads_its_keys_and_wrong_ones_are_named() {
        let dqm = parse(
            "[dqm]\nenabled = true\nsample_every = 1\nreference_run = 3\ntest = \"kolmogorov\"\n",
        )
        .unwrap();
        assert_eq!(
            (dqm.sample_every, dqm.reference_run, dqm.test),
            (1, Some(3), Test::Kolmogorov)
        );
        for (text, words) in [
            (
                "[dqm]\nenabled = true\nsample_every = 0",
                "dqm.sample_every",
            ),
            ("[dqm]\nenabled = true\nqueue = 0", "dqm.queue"),
            ("[dqm]\nreference_run = 3", "needs dqm.enabled"),
            ("[dqm]\nenabled = true\nreference_run = 7", "is this run"),
            (
                "[dqm]\nenabled = true\nmin_probability = 2.0",
                "probability",
            ),
            ("[dqm]\nenabled = true\ntest = \"t\"", "chi2"),
            (
                "[dqm]\nenabled = true\nmax_core_share = 0.0",
                "dqm.max_core_share: 0: must be in (0, 1]",
            ),
            (
                "[dqm]\nenabled = true\nmax_core_share = 1.5",
                "dqm.max_core_share",
            ),
            (
                "[dqm]\nenabled = true\nsample = 1",
                "unknown field `sample`",
            ),
        ] {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(words), "{text}: {e}");
        }
    }

    #[test]
    fn a_histogram_s_own_check_is_the_first_entry_its_name_matches() {
        let dqm = parse(
            "[dqm]\nenabled = true\nmin_probability = 0.05\n\
             [[dqm.histograms]]\nnames = \"noise_rms_*\"\ntest = \"kolmogorov\"\nmin_entries = 500\n\
             [[dqm.histograms]]\nnames = \"sizes.event_size\"\nmin_probability = 0.0\n",
        )
        .unwrap();
        let checks = dqm.checks().unwrap();
        let noise = checks.of("noise_rms_link_0003");
        assert_eq!(
            (noise.test, noise.min_probability, noise.min_entries),
            (Test::Kolmogorov, 0.05, 500),
            "a key not given is [dqm]'s"
        );
        assert_eq!(checks.of("sizes.event_size").min_probability, 0.0);
        assert_eq!(checks.of("pedestal_link_0003"), &checks.default);
        // Kept through the configuration's text, as `--print-config` shows it.
        let text = toml::to_string(&dqm).unwrap();
        assert_eq!(toml::from_str::<DqmSection>(&text).unwrap(), dqm);
        for (entry, words) in [
            (
                "names = \"noise_[\"",
                "dqm.histograms[0].names: \"noise_[\"",
            ),
            ("names = \"\"", "dqm.histograms[0].names: empty"),
            (
                "names = \"a\"\nmin_probability = -1.0",
                "dqm.histograms[0].min_probability: -1",
            ),
            ("names = \"a\"\nthreshold = 1", "unknown field `threshold`"),
        ] {
            let text = format!("[dqm]\nenabled = true\n[[dqm.histograms]]\n{entry}\n");
            let e = format!("{:#}", parse(&text).unwrap_err());
            assert!(e.contains(words), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_reference_is_refused_before_the_run_starts_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let dqm = DqmSection {
            enabled: true,
            reference_run: Some(4),
            ..Default::default()
        };
        let e = dqm
            .start(dir.path(), fill, &Registry::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("dqm.reference_run = 4") && e.contains("dqm_run000004.h5"),
            "{e}"
        );
    }

    #[test]
    fn the_set_is_saved_once_and_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let dqm = DqmSection {
            enabled: true,
            sample_every: 1,
            ..Default::default()
        };
        let online = dqm
            .start(dir.path(), fill, &Registry::new())
            .unwrap()
            .unwrap();
        let mut sampler = online.tap().sampler(&Registry::new(), "t").unwrap();
        sampler.offer(|| 5);
        let counts = sampler.counts();
        drop(sampler);
        let run = RunSection {
            number: 9,
            ..RunSection::writing_to(dir.path())
        };
        let report = online.finish(&run, counts);
        assert_eq!((report.events, report.samples.sampled), (5, 1));
        let file = report.file.unwrap();
        assert_eq!(swdaq_dqm::hdf5_file::load(&file).unwrap().events, 5);
        let again = dqm
            .start(dir.path(), fill, &Registry::new())
            .unwrap()
            .unwrap();
        let report = again.finish(&run, SampleCounts::default());
        assert!(
            report.file.is_none() && report.error.is_some(),
            "{report:?}"
        );
        assert_eq!(
            swdaq_dqm::hdf5_file::load(&file).unwrap().events,
            5,
            "intact"
        );
    }

    #[test]
    fn the_console_s_answer_is_worst_first_with_axes_counts_and_verdicts() {
        let hist = |name: &str| {
            swdaq_dqm::Hist1::new(name, name, swdaq_dqm::Axis::new("size", "B", 10, 0.0, 10.0))
                .unwrap()
        };
        let mut reference = HistSet::new();
        for name in ["a", "b"] {
            let h = reference.entry(name, || hist(name));
            (0..1000).for_each(|i| h.fill(f64::from(i % 10)));
        }
        // The run: "b" like the reference, "a" all in its first bin, "c" not in the reference.
        let fill = |set: &mut HistSet, i: u32| -> Result<(), String> {
            set.entry("a", || hist("a")).fill(0.0);
            set.entry("b", || hist("b")).fill(f64::from(i % 10));
            set.entry("c", || hist("c")).fill(1.0);
            Ok(())
        };
        let (rx, mut view) = thousand_samples_and_a_view();
        let waiting = view.to_json(Vec::new());
        assert_eq!(
            (&waiting["enabled"], &waiting["histograms"]),
            (&json!(true), &json!([])),
            "{waiting}"
        );
        assert!(waiting["why"].is_string(), "{waiting}");
        let answer = judged_against(reference.clone(), rx, fill, &mut view);
        let shown: Vec<(&str, &str)> = (answer["histograms"].as_array().unwrap().iter())
            .map(|h| {
                let quality = h["verdict"]["quality"].as_str().unwrap();
                (h["name"].as_str().unwrap(), quality)
            })
            .collect();
        assert_eq!(
            shown,
            [("a", "Bad"), ("c", "Undetermined"), ("b", "Good")],
            "{answer}"
        );
        let a = &answer["histograms"][0];
        assert_eq!(a["counts"].as_array().unwrap().len(), 10, "{a}");
        assert_eq!(
            (&a["counts"][0], &a["entries"]),
            (&json!(1000), &json!(1000))
        );
        assert_eq!((&a["underflow"], &a["overflow"]), (&json!(0), &json!(0)));
        assert_eq!(a["axis"]["unit"], "B");
        // Drawn over the reference's counts: "a" is in the reference, "c" is not.
        assert_eq!(a["reference"]["counts"], json!(vec![100; 10]), "{a}");
        assert_eq!(a["reference"]["entries"], 1000, "{a}");
        assert_eq!(answer["histograms"][1]["reference"], Value::Null);
        assert!(
            a["verdict"]["reason"].as_str().unwrap().contains("below"),
            "{a}"
        );
        assert_eq!(
            answer["qualities"],
            json!({"bad": 1, "undetermined": 1, "good": 1})
        );
        assert_eq!(
            (&answer["last"], &answer["events"]),
            (&json!(true), &json!(0))
        );
        assert_eq!(answer["reference_run"], 3);
        // Checks of their own: "a" by a probability nothing is below, "b" and "c" asking for
        // more entries than they have; shown with the answer.
        let (rx, mut view) = thousand_samples_and_a_view();
        let lenient = Check {
            min_probability: 0.0,
            ..Check::default()
        };
        let demanding = Check {
            min_entries: 5000,
            ..Check::default()
        };
        view.checks.named = vec![
            NamedCheck::new("a", lenient).unwrap(),
            NamedCheck::new("[b-z]", demanding).unwrap(),
        ];
        let answer = judged_against(reference, rx, fill, &mut view);
        let quality = |name: &str| {
            let h = (answer["histograms"].as_array().unwrap().iter())
                .find(|h| h["name"] == name)
                .unwrap();
            h["verdict"]["quality"].as_str().unwrap().to_string()
        };
        assert_eq!(
            [quality("a"), quality("b"), quality("c")],
            ["Good", "Undetermined", "Undetermined"],
            "{answer}"
        );
        assert_eq!(answer["checks"][1]["names"], "[b-z]", "{answer}");
        assert_eq!(answer["checks"][1]["check"]["min_entries"], 5000);
    }

    #[test]
    fn among_equal_verdicts_a_source_s_histogram_comes_before_the_aggregate() {
        let hist = |name: &str| {
            swdaq_dqm::Hist1::new(name, name, swdaq_dqm::Axis::new("size", "B", 10, 0.0, 10.0))
                .unwrap()
        };
        let names = [
            "event_size",
            "fed_size_0001",
            "fed_size_0000",
            "feds_per_event",
        ];
        let mut reference = HistSet::new();
        for name in names {
            let h = reference.entry(name, || hist(name));
            (0..1000).for_each(|i| h.fill(f64::from(i % 10)));
        }
        // The run: the event size and FED 1's grown (Bad), FED 0 and the count as before.
        let fill = |set: &mut HistSet, i: u32| -> Result<(), String> {
            for name in ["event_size", "fed_size_0001"] {
                set.entry(name, || hist(name)).fill(9.0);
            }
            for name in ["fed_size_0000", "feds_per_event"] {
                set.entry(name, || hist(name)).fill(f64::from(i % 10));
            }
            Ok(())
        };
        let (rx, mut view) = thousand_samples_and_a_view();
        let answer = judged_against(reference, rx, fill, &mut view);
        let shown: Vec<&str> = (answer["histograms"].as_array().unwrap().iter())
            .map(|h| h["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            shown,
            [
                "fed_size_0001",
                "event_size",
                "fed_size_0000",
                "feds_per_event"
            ],
            "{answer}"
        );
    }

    proptest! {
        /// Any values of the keys parse or are refused with the key named, never a panic.
        #[test]
        fn any_section_parses_or_names_its_key(
            every in any::<i64>(), queue in any::<i64>(), probability in any::<f64>(),
            interval in any::<f64>(), reference in any::<i64>(),
        ) {
            let text = format!(
                "[dqm]\nenabled = true\nsample_every = {every}\nqueue = {queue}\n\
                 min_probability = {probability:?}\njudge_interval_s = {interval:?}\n\
                 reference_run = {reference}\n"
            );
            if let Err(e) = parse(&text) {
                let e = format!("{e:#}");
                prop_assert!(e.contains("dqm") || e.contains("invalid configuration"), "{}", e);
            }
        }
    }

    /// A queue of the samples 0..1000, closed, and a view judged against run 3.
    fn thousand_samples_and_a_view() -> (crossbeam_channel::Receiver<u32>, DqmView) {
        let (tx, rx) = crossbeam_channel::bounded(1000);
        (0..1000).for_each(|i| tx.send(i).unwrap());
        let view = DqmView {
            latest: Latest::default(),
            reference_run: Some(3),
            reference: None,
            checks: Checks::default(),
            judge_interval_s: 60.0,
        };
        (rx, view)
    }

    /// Every queued sample filled and judged against `reference` once; `GET /dqm`'s answer.
    fn judged_against(
        reference: HistSet,
        samples: crossbeam_channel::Receiver<u32>,
        fill: impl Fn(&mut HistSet, u32) -> Result<(), String>,
        view: &mut DqmView,
    ) -> Value {
        view.reference = Some(Arc::new(reference.clone()));
        let judging = Judging {
            reference: Some(reference),
            checks: view.checks.clone(),
            every: Duration::from_secs(60),
        };
        swdaq_dqm::online::run(samples, fill, &judging, 1.0, &Registry::new(), &view.latest)
            .unwrap();
        view.to_json(Vec::new())
    }
}
