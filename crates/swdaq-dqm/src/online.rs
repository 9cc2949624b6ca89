//! The online monitoring thread: fills a run's set from its samples as they come (with the
//! model's own fill function, the one `swdaq dqm` uses on files), judges it against the
//! reference run's set every `judge_every` and once more at the end, and exports each
//! histogram's quality as the gauge `swdaq_dqm_quality{histogram="..."}` ([`quality_value`]).
//! Every `judge_every`, and at the end, it also publishes the set as filled so far with its
//! verdicts ([`Published`], in a [`Latest`]) for readers on other threads: run control's
//! console draws it. Its cost is bounded: over its share of a core (a budget of its own CPU
//! time), a sample is skipped and counted, never waited for.

use crate::checks::Checks;
use crate::compare::{Quality, Verdict};
use crate::sample::SampleCounts;
use crate::set::HistSet;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

/// The monitoring thread's metric block's thread label.
const THREAD: &str = "dqm";

/// How the online set is judged.
#[derive(Debug, Clone)]
pub struct Judging {
    /// The reference run's set; none: histograms are filled and kept, not judged.
    pub reference: Option<HistSet>,
    pub checks: Checks,
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
    /// Samples not read because the thread had used its share of a core.
    pub skipped: u64,
}

/// The set as the monitoring thread last published it.
#[derive(Debug, Clone)]
pub struct Published {
    pub set: HistSet,
    /// Against the reference, worst first; none without one.
    pub verdicts: Option<Vec<(String, Verdict)>>,
    /// When it was published (and judged, with a reference).
    pub at: SystemTime,
    /// What the data threads' samplers had counted then.
    pub samples: SampleCounts,
    pub unreadable: u64,
    pub skipped: u64,
    /// The run's last: every sample was taken in (read or skipped).
    pub last: bool,
}

/// The monitoring thread's latest [`Published`] set. A reader clones an `Arc` under a lock
/// that only readers and the monitoring thread (once per judgement) take: the data path
/// never does, and a slow reader holds up nobody's filling.
#[derive(Debug, Clone, Default)]
pub struct Latest(Arc<Mutex<Option<Arc<Published>>>>);

impl Latest {
    /// The last publication; none before the first judgement.
    pub fn get(&self) -> Option<Arc<Published>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn publish(&self, published: Published) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(published));
    }
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
/// the next one read. Publishes into `latest` every `judging.every` and at the end. A sample
/// that comes while the thread is over `max_core_share` of a core (`CoreBudget`; 1: a whole
/// core, no limit) is skipped and counted.
pub fn run<T, E: std::fmt::Display>(
    samples: Receiver<T>,
    fill: impl Fn(&mut HistSet, T) -> Result<(), E>,
    judging: &Judging,
    max_core_share: f64,
    registry: &Registry,
    latest: &Latest,
) -> Result<OnlineOutcome, MonitorError> {
    let mut block = registry.block(THREAD, &[]);
    let unreadable_counter: Counter = block.counter(
        "swdaq_dqm_unreadable_samples_total",
        "Samples the data-quality monitoring could not read",
    )?;
    let skipped_counter: Counter = block.counter(
        "swdaq_dqm_samples_skipped_total",
        "Samples the data-quality monitoring skipped: it had used its share of a core",
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
        skipped: 0,
    };
    let mut budget = CoreBudget::new(max_core_share);
    let mut next_judgement = Instant::now() + judging.every;
    loop {
        match samples.recv_deadline(next_judgement) {
            Ok(_) if !budget.allows() => {
                outcome.skipped += 1;
                skipped_counter.inc();
            }
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
            let verdicts = judged(&outcome.set, judging, &mut gauges)?;
            latest.publish(publication(&outcome, verdicts, registry, false));
            next_judgement = now + judging.every;
        }
    }
    outcome.verdicts = judged(&outcome.set, judging, &mut gauges)?;
    latest.publish(publication(
        &outcome,
        outcome.verdicts.clone(),
        registry,
        true,
    ));
    Ok(outcome)
}

/// A thread's share of a core as a bucket of CPU time: it fills at `share` of the time that
/// passes, up to [`BURST_S`] seconds' worth (a full bucket at the start), and everything the
/// thread does draws from it, its own CPU time measured (a busy machine that preempts the
/// thread does not count against it). Empty: the thread is over its share.
struct CoreBudget {
    share: f64,
    credit_s: f64,
    cpu: cpu_time::ThreadTime,
    spent: Duration,
    at: Instant,
}

/// Seconds of a core's share the budget saves up at most: monitoring may catch up on one
/// second's worth of samples after a quiet spell, no more.
const BURST_S: f64 = 1.0;

impl CoreBudget {
    /// For the calling thread.
    fn new(share: f64) -> CoreBudget {
        CoreBudget {
            share,
            credit_s: share * BURST_S,
            cpu: cpu_time::ThreadTime::now(),
            spent: Duration::ZERO,
            at: Instant::now(),
        }
    }

    /// Whether the thread may do more now (always with a whole core's share).
    fn allows(&mut self) -> bool {
        if self.share >= 1.0 {
            return true;
        }
        let (now, spent) = (Instant::now(), self.cpu.elapsed());
        let earned = self.share * (now - self.at).as_secs_f64();
        let used = (spent - self.spent).as_secs_f64();
        self.credit_s = (self.credit_s + earned - used).min(self.share * BURST_S);
        (self.at, self.spent) = (now, spent);
        self.credit_s > 0.0
    }
}

/// `set` judged against the reference, if there is one, and the gauges brought up to date.
fn judged(
    set: &HistSet,
    judging: &Judging,
    gauges: &mut QualityGauges<'_>,
) -> Result<Option<Vec<(String, Verdict)>>, MonitorError> {
    let Some(reference) = &judging.reference else {
        return Ok(None);
    };
    let verdicts = set.judge(reference, &judging.checks);
    gauges.show(&verdicts)?;
    Ok(Some(verdicts))
}

/// What readers are shown of `outcome` now (`last`: the run's final set, every sample read).
fn publication(
    outcome: &OnlineOutcome,
    verdicts: Option<Vec<(String, Verdict)>>,
    registry: &Registry,
    last: bool,
) -> Published {
    Published {
        set: outcome.set.clone(),
        verdicts,
        at: SystemTime::now(),
        samples: SampleCounts::in_registry(registry),
        unreadable: outcome.unreadable,
        skipped: outcome.skipped,
        last,
    }
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

    fn monitored(samples: Vec<f64>, reference: Option<HistSet>) -> (OnlineOutcome, Latest) {
        let (tx, rx) = crossbeam_channel::bounded(samples.len().max(1));
        for x in samples {
            tx.send(x).unwrap();
        }
        drop(tx);
        let registry = Registry::new();
        let judging = Judging {
            reference,
            checks: Checks::default(),
            every: Duration::from_secs(1),
        };
        let latest = Latest::default();
        let outcome = run(rx, fill, &judging, 1.0, &registry, &latest).unwrap();
        (outcome, latest)
    }

    /// Fills like [`fill`] after spinning for 20 ms of CPU time.
    fn fill_slowly(set: &mut HistSet, x: f64) -> Result<(), String> {
        let cpu = cpu_time::ThreadTime::now();
        while cpu.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        fill(set, x)
    }

    #[test]
    fn over_its_share_of_a_core_the_thread_skips_samples_and_counts_them() {
        let (tx, rx) = crossbeam_channel::bounded(100);
        for x in 0..100 {
            tx.send(f64::from(x % 10)).unwrap();
        }
        drop(tx);
        let judging = Judging {
            reference: None,
            checks: Checks::default(),
            every: Duration::from_secs(60),
        };
        let registry = Registry::new();
        let outcome = run(
            rx,
            fill_slowly,
            &judging,
            0.1,
            &registry,
            &Latest::default(),
        )
        .unwrap();
        // All 100 waiting, each 20 ms of CPU: a tenth of a core's bucket (0.1 s) holds about
        // five, and refills by 2 ms while each is read; the rest are skipped at once.
        assert_eq!(outcome.set.events + outcome.skipped, 100);
        let read = outcome.set.events;
        assert!((1..=20).contains(&read), "{read} read");
        assert_eq!(
            registry.counter_total("swdaq_dqm_samples_skipped_total"),
            outcome.skipped
        );
    }

    #[test]
    fn samples_fill_the_set_and_unreadable_ones_are_counted() {
        let (outcome, _) = monitored(vec![1.0, -2.0, 3.0, -4.0], None);
        assert_eq!(outcome.set.events, 2);
        assert_eq!(outcome.set.histograms["x"].entries(), 2);
        assert_eq!(outcome.unreadable, 2);
        assert_eq!(outcome.first_problem.as_deref(), Some("-2 is negative"));
        assert!(outcome.verdicts.is_none(), "no reference, no verdict");
        assert_eq!(outcome.skipped, 0, "a whole core: none skipped");
    }

    #[test]
    fn a_shifted_run_is_bad_and_a_like_one_good_against_the_reference() {
        let flat: Vec<f64> = (0..1000).map(|i| (i % 10) as f64).collect();
        let (reference, _) = monitored(flat.clone(), None);
        let (like, _) = monitored(flat, Some(reference.set.clone()));
        let verdicts = like.verdicts.unwrap();
        assert_eq!(verdicts[0].1.quality, Quality::Good, "{verdicts:?}");
        let low: Vec<f64> = (0..1000).map(|i| (i % 3) as f64).collect();
        let (shifted, latest) = monitored(low, Some(reference.set));
        let verdicts = shifted.verdicts.unwrap();
        assert_eq!(verdicts[0].1.quality, Quality::Bad, "{verdicts:?}");
        let published = latest.get().expect("the end is published");
        assert!(published.last);
        assert_eq!(published.set, shifted.set);
        assert_eq!(published.verdicts.as_ref(), Some(&verdicts));
    }

    #[test]
    fn the_set_is_published_while_samples_come_and_without_a_reference() {
        let (tx, rx) = crossbeam_channel::bounded(16);
        let judging = Judging {
            reference: None,
            checks: Checks::default(),
            every: Duration::from_millis(20),
        };
        let latest = Latest::default();
        let reader = latest.clone();
        let thread = std::thread::spawn(move || {
            run(rx, fill, &judging, 1.0, &Registry::new(), &latest).unwrap()
        });
        tx.send(1.0).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let published = loop {
            match reader.get() {
                Some(p) if p.set.events == 1 => break p,
                _ => assert!(Instant::now() < deadline, "nothing published while running"),
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(!published.last && published.verdicts.is_none());
        drop(tx);
        thread.join().unwrap();
        assert!(reader.get().unwrap().last);
    }

    #[test]
    fn quality_values_order_bad_below_good() {
        assert!(quality_value(Quality::Bad) < quality_value(Quality::Undetermined));
        assert!(quality_value(Quality::Undetermined) < quality_value(Quality::Good));
    }
}
