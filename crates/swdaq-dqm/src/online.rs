//! The online monitoring thread: fills a run's set from its samples as they come (with the
//! model's own fill function, the one `swdaq dqm` uses on files), judges it against the
//! reference run's set every `judge_every` and once more at the end, and exports each
//! histogram's quality as the gauge `swdaq_dqm_quality{histogram="..."}` ([`quality_value`]).

use crate::compare::{Check, Quality, Verdict};
use crate::set::HistSet;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

/// The monitoring thread's metric block's thread label.
const THREAD: &str = "dqm";

/// How the online set is judged.
#[derive(Debug, Clone)]
pub struct Judging {
    /// The reference run's set; none: histograms are filled and kept, not judged.
    pub reference: Option<HistSet>,
    pub check: Check,
    /// How often the qualities are brought up to date while the run lasts.
    pub every: Duration,
}

/// What the monitoring thread made of a run's samples.
#[derive(Debug, Clone)]
pub struct OnlineOutcome {
    pub set: HistSet,
    /// Against the reference, worst first; none without one.
    pub verdicts: Option<Vec<(String, Verdict)>>,
    /// Samples the fill function could not read, and the first one's reason.
    pub unreadable: u64,
    pub first_problem: Option<String>,
}

/// A quality as the gauge shows it: 1 Good, 0 Undetermined, -1 Bad.
pub fn quality_value(quality: Quality) -> f64 {
    match quality {
        Quality::Good => 1.0,
        Quality::Undetermined => 0.0,
        Quality::Bad => -1.0,
    }
}

/// Fills from `samples` until every sender has gone; a sample `fill` refuses is counted and
/// the next one read.
pub fn run<T, E: std::fmt::Display>(
    samples: Receiver<T>,
    fill: impl Fn(&mut HistSet, T) -> Result<(), E>,
    judging: &Judging,
    registry: &Registry,
) -> Result<OnlineOutcome, MonitorError> {
    let unreadable_counter: Counter = registry.block(THREAD, &[]).counter(
        "swdaq_dqm_unreadable_samples_total",
        "Samples the data-quality monitoring could not read",
    )?;
    let mut gauges = QualityGauges {
        registry,
        gauges: BTreeMap::new(),
    };
    let mut outcome = OnlineOutcome {
        set: HistSet::new(),
        verdicts: None,
        unreadable: 0,
        first_problem: None,
    };
    let mut next_judgement = Instant::now() + judging.every;
    loop {
        match samples.recv_deadline(next_judgement) {
            Ok(sample) => {
                if let Err(e) = fill(&mut outcome.set, sample) {
                    outcome.unreadable += 1;
                    unreadable_counter.inc();
                    outcome.first_problem.get_or_insert_with(|| e.to_string());
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if now >= next_judgement {
            if let Some(reference) = &judging.reference {
                gauges.show(&outcome.set.judge(reference, &judging.check))?;
            }
            next_judgement = now + judging.every;
        }
    }
    if let Some(reference) = &judging.reference {
        let verdicts = outcome.set.judge(reference, &judging.check);
        gauges.show(&verdicts)?;
        outcome.verdicts = Some(verdicts);
    }
    Ok(outcome)
}

/// One gauge per histogram, registered when the histogram is first judged.
struct QualityGauges<'a> {
    registry: &'a Registry,
    gauges: BTreeMap<String, Gauge>,
}

impl QualityGauges<'_> {
    fn show(&mut self, verdicts: &[(String, Verdict)]) -> Result<(), MonitorError> {
        for (name, verdict) in verdicts {
            if !self.gauges.contains_key(name) {
                let gauge = self
                    .registry
                    .block(THREAD, &[("histogram", name.as_str())])
                    .gauge(
                        "swdaq_dqm_quality",
                        "A histogram's quality against the reference run's: 1 Good, 0 Undetermined, -1 Bad",
                    )?;
                self.gauges.insert(name.clone(), gauge);
            }
            self.gauges[name].set(quality_value(verdict.quality));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::{Axis, Hist1};

    /// Fills histogram "x" with the sample; a negative sample is unreadable.
    fn fill(set: &mut HistSet, x: f64) -> Result<(), String> {
        if x < 0.0 {
            return Err(format!("{x} is negative"));
        }
        set.events += 1;
        set.entry("x", || {
            Hist1::new("x", "x", Axis::new("x", "", 10, 0.0, 10.0)).unwrap()
        })
        .fill(x);
        Ok(())
    }

    fn judged(samples: Vec<f64>, reference: Option<HistSet>) -> (OnlineOutcome, Registry) {
        let (tx, rx) = crossbeam_channel::bounded(samples.len().max(1));
        for x in samples {
            tx.send(x).unwrap();
        }
        drop(tx);
        let registry = Registry::new();
        let judging = Judging {
            reference,
            check: Check::default(),
            every: Duration::from_secs(1),
        };
        (run(rx, fill, &judging, &registry).unwrap(), registry)
    }

    #[test]
    fn samples_fill_the_set_and_unreadable_ones_are_counted() {
        let (outcome, _) = judged(vec![1.0, -2.0, 3.0, -4.0], None);
        assert_eq!(outcome.set.events, 2);
        assert_eq!(outcome.set.histograms["x"].entries(), 2);
        assert_eq!(outcome.unreadable, 2);
        assert_eq!(outcome.first_problem.as_deref(), Some("-2 is negative"));
        assert!(outcome.verdicts.is_none(), "no reference, no verdict");
    }

    #[test]
    fn a_shifted_run_is_bad_and_a_like_one_good_against_the_reference() {
        let flat: Vec<f64> = (0..1000).map(|i| (i % 10) as f64).collect();
        let (reference, _) = judged(flat.clone(), None);
        let (like, _) = judged(flat, Some(reference.set.clone()));
        let verdicts = like.verdicts.unwrap();
        assert_eq!(verdicts[0].1.quality, Quality::Good, "{verdicts:?}");
        let low: Vec<f64> = (0..1000).map(|i| (i % 3) as f64).collect();
        let (shifted, _) = judged(low, Some(reference.set));
        let verdicts = shifted.verdicts.unwrap();
        assert_eq!(verdicts[0].1.quality, Quality::Bad, "{verdicts:?}");
    }

    #[test]
    fn quality_values_order_bad_below_good() {
        assert!(quality_value(Quality::Bad) < quality_value(Quality::Undetermined));
        assert!(quality_value(Quality::Undetermined) < quality_value(Quality::Good));
    }
}
