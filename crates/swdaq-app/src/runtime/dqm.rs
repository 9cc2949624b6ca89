//! `[dqm]`: online data-quality monitoring (#37), whatever the model. The model's data
//! threads sample what they hand on into a bounded channel (a full one is a counted drop);
//! one monitoring thread fills the run's histograms with the model's fill function (the one
//! `swdaq dqm` uses on files) and judges them against `reference_run`'s set while the run
//! lasts. At the stop the set is saved beside the run's data as `dqm_runNNNNNN.h5` (a new
//! file, never replacing one) and recorded with the run's files.

use crate::run_section::RunSection;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;
use swdaq_dqm::online::{Judging, OnlineOutcome};
use swdaq_dqm::sample::{SampleCounts, SampleTap};
use swdaq_dqm::{Check, HistSet, Quality, Test, Verdict};
use swdaq_format::file_checksum;
use swdaq_format::provenance::Provenance;
use swdaq_monitor::{MonitorError, Registry};

/// Longest sample queue `dqm.queue` may ask for: samples are whole events.
const MAX_QUEUE: usize = 65_536;

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
        }
    }
}

/// The name of run `run`'s saved set in its output directory.
pub fn file_name(run: u32) -> String {
    format!("dqm_run{run:06}.h5")
}

impl DqmSection {
    /// Checks the keys before anything starts; an error names the key. `run` is the run's
    /// own number (0: not chosen yet); `distributed`: the run has a `[topology]`.
    pub fn validate(&self, run: u32, distributed: bool) -> anyhow::Result<()> {
        let invalid = |what: String| Err(anyhow::anyhow!("invalid configuration: dqm.{what}"));
        if self.enabled && distributed {
            return invalid(
                "enabled: online monitoring runs in one process only: drop [topology] or [dqm]"
                    .into(),
            );
        }
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
        if !(0.1..=3600.0).contains(&self.judge_interval_s) {
            return invalid(format!(
                "judge_interval_s: {}: must be in [0.1, 3600]",
                self.judge_interval_s
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

    fn check(&self) -> Check {
        Check {
            test: self.test,
            min_probability: self.min_probability,
            min_entries: self.min_entries,
        }
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
        let judging = Judging {
            reference,
            check: self.check(),
            every: Duration::from_secs_f64(self.judge_interval_s),
        };
        let (sender, samples) = crossbeam_channel::bounded(self.queue);
        let registry = registry.clone();
        let thread = std::thread::Builder::new()
            .name("dqm".into())
            .spawn(move || swdaq_dqm::online::run(samples, fill, &judging, &registry))?;
        Ok(Some(OnlineDqm {
            tap: SampleTap::new(sender, self.sample_every),
            thread,
            reference_run: self.reference_run,
            check: self.check(),
        }))
    }
}

/// A running monitoring thread and the tap its samplers are made from.
pub struct OnlineDqm<T> {
    tap: SampleTap<T>,
    thread: JoinHandle<Result<OnlineOutcome, MonitorError>>,
    reference_run: Option<u32>,
    check: Check,
}

impl<T> OnlineDqm<T> {
    pub fn tap(&self) -> &SampleTap<T> {
        &self.tap
    }

    /// Once every data thread's sampler has gone (their counts `samples`): the thread's
    /// outcome, the set saved as `run`'s in its output directory, naming the run and the
    /// software, and noted among its files.
    pub fn finish(self, run: &RunSection, samples: SampleCounts) -> DqmReport {
        // The tap's own sender: once it goes, the thread drains what is queued and ends.
        drop(self.tap);
        let mut report = DqmReport {
            samples,
            reference_run: self.reference_run,
            check: self.check,
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
    pub first_problem: Option<String>,
    /// Where the set was saved; none if it could not be (then `error` says why).
    pub file: Option<PathBuf>,
    pub error: Option<String>,
    pub reference_run: Option<u32>,
    pub check: Check,
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
            "DQM: {} events sampled, {} dropped (sample queue full), {} unreadable; {} histograms",
            self.samples.sampled, self.samples.dropped, self.unreadable, self.histograms
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
                "DQM against run {run} ({:?}, Bad below probability {}): {} Bad, {} Undetermined, {} Good\n",
                self.check.test,
                self.check.min_probability,
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
            "events": self.events,
            "histograms": self.histograms,
            "unreadable": self.unreadable,
            "file": self.file,
            "error": self.error,
            "reference_run": self.reference_run,
            "check": self.check,
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
        file.dqm.validate(7, false)?;
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
                "[dqm]\nenabled = true\nsample = 1",
                "unknown field `sample`",
            ),
        ] {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(words), "{text}: {e}");
        }
        let e = dqm.validate(0, true).unwrap_err().to_string();
        assert!(e.contains("one process only"), "{e}");
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
}
