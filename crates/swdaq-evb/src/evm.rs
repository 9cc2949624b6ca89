//! The event manager: readout unit 0, which sees the trigger. It gives each event to a
//! builder unit that has asked for work, never more than a builder unit asked for, and
//! sends its own super-fragment with the assignment. Without credit it holds the trigger
//! (counted as throttled), so slow builder units slow the trigger down instead of losing
//! events. A builder unit that has gone (a send to it fails, or its watcher says so) gets
//! nothing more; the events it was given and had not settled are counted lost by number
//! (then checked against its closed files, [`crate::reconcile`]).
//! They are not re-assigned: the event manager's own super-fragment went with the assignment
//! and the other readout units may already have sent theirs to the dead unit.
//!
//! It counts the events it gives out per lumi section and, once an event of a later lumi
//! section is given out, ends the earlier ones (empty ones too) with their counts to every
//! builder unit, after their events: a CMS EoLS's `TotalEvents` is the whole lumi section's,
//! the same in every builder unit's.

use crate::message::{Assignment, BuRequest, MAX_BATCH, ToBu, ToEvm};
use crate::metrics::{CounterSet, FedMetrics, PUBLISH_EVERY};
use crate::producer::Producer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use swdaq_dataflow::transport::{Inbox, Outbox, Received};
use swdaq_monitor::{MonitorError, Registry};

/// How long the loop blocks on builder-unit requests when it has nothing else to do.
const IDLE_WAIT: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuAccount {
    pub requested: u64,
    pub assigned: u64,
    pub alive: bool,
    /// Events given and not yet settled (in a closed file or shed).
    pub unsettled: BTreeSet<u64>,
}

/// Credits per builder unit and round-robin assignment among those with credit.
#[derive(Debug, Clone)]
pub struct BuCredits {
    accounts: Vec<BuAccount>,
    next: usize,
}

impl BuCredits {
    pub fn new(builder_units: u16) -> Self {
        let alive = BuAccount {
            alive: true,
            ..Default::default()
        };
        Self {
            accounts: vec![alive; builder_units as usize],
            next: 0,
        }
    }

    /// Records a request; requests from unknown or gone builder units are ignored (false).
    pub fn grant(&mut self, request: &BuRequest) -> bool {
        match self.accounts.get_mut(request.bu as usize) {
            Some(a) if a.alive => {
                a.requested += request.count as u64;
                for event in &request.settled {
                    a.unsettled.remove(event);
                }
                true
            }
            _ => false,
        }
    }

    /// The next builder unit with credit, round robin, for `event`; takes one credit.
    pub fn take(&mut self, event: u64) -> Option<u16> {
        let n = self.accounts.len();
        for i in 0..n {
            let bu = (self.next + i) % n;
            let a = &mut self.accounts[bu];
            if a.alive && a.assigned < a.requested {
                a.assigned += 1;
                a.unsettled.insert(event);
                self.next = (bu + 1) % n;
                return Some(bu as u16);
            }
        }
        None
    }

    /// Marks a builder unit gone; returns the events it was given and never settled, in
    /// order (none if it was already gone or is unknown).
    pub fn died(&mut self, bu: u16) -> Vec<u64> {
        match self.accounts.get_mut(bu as usize) {
            Some(a) if a.alive => {
                a.alive = false;
                std::mem::take(&mut a.unsettled).into_iter().collect()
            }
            _ => Vec::new(),
        }
    }

    pub fn accounts(&self) -> &[BuAccount] {
        &self.accounts
    }

    pub fn all_gone(&self) -> bool {
        self.accounts.iter().all(|a| !a.alive)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EvmReport {
    pub assigned: u64,
    /// Events that waited for a builder unit's credit.
    pub throttled: u64,
    /// Events given to builder units that died and not settled by them, by number. As the
    /// event manager sees it this is an upper bound (a unit may close a file after its last
    /// report and die before the next); the summary settles it exactly with what the unit
    /// left on disk (`EvbSummary::settle_with_disk`).
    pub lost: Vec<u64>,
    /// Builder units declared gone during the run.
    pub gone: Vec<u16>,
    /// When paced: the most any event was given out after its trigger time. A trigger rate
    /// holds when this stays small (the event manager keeps up with the trigger clock).
    pub max_behind: Duration,
    pub accounts: Vec<BuAccount>,
}

pub struct Evm {
    pub producer: Producer,
    pub requests: Box<dyn Inbox<ToEvm>>,
    pub to_bus: Vec<Box<dyn Outbox<ToBu>>>,
    pub stop: Arc<AtomicBool>,
    pub max_events: Option<u64>,
    /// The lumi section of a trigger time (`EvbConfig::lumi_of`).
    pub lumi_of: Box<dyn Fn(u64) -> u32 + Send>,
}

/// The lumi section being given out and its events so far.
struct LumiCount {
    lumi: u32,
    events: u64,
}

impl Evm {
    pub fn run(mut self, registry: &Registry) -> Result<(EvmReport, Producer), MonitorError> {
        let mut fed_metrics = FedMetrics::register(registry, "evm", 0, self.producer.feds())?;
        let mut counters = CounterSet::register(
            registry,
            "evm",
            &[],
            &[
                (
                    "swdaq_evb_events_assigned_total",
                    "Events the event manager gave to builder units",
                ),
                (
                    "swdaq_evb_events_throttled_total",
                    "Events that waited for a builder unit to ask for work",
                ),
                (
                    "swdaq_evb_events_lost_total",
                    "Events given to builder units that died before finishing them",
                ),
            ],
        )?;
        let mut credits = BuCredits::new(self.to_bus.len() as u16);
        let mut report = EvmReport::default();
        let mut waited_for_credit = false;
        let mut batches: Vec<Vec<Assignment>> = vec![Vec::new(); self.to_bus.len()];
        let mut counting = LumiCount { lumi: 1, events: 0 };
        loop {
            let all_gone = drain(&*self.requests, &mut credits, &mut report, Duration::ZERO);
            let (event, _) = self.producer.peek();
            let done = self.max_events.is_some_and(|m| event > m) || self.producer.exhausted();
            if all_gone || done || self.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(wait) = self.producer.not_due_for() {
                self.flush(&mut batches, &mut credits, &mut report);
                drain(
                    &*self.requests,
                    &mut credits,
                    &mut report,
                    wait.min(IDLE_WAIT),
                );
                continue;
            }
            let Some(bu) = credits.take(event) else {
                if !waited_for_credit {
                    report.throttled += 1;
                    waited_for_credit = true;
                }
                self.flush(&mut batches, &mut credits, &mut report);
                drain(&*self.requests, &mut credits, &mut report, IDLE_WAIT);
                continue;
            };
            waited_for_credit = false;
            report.max_behind = report.max_behind.max(self.producer.behind());
            let (trigger_ns, evm_fragment) = self.producer.take();
            let lumi = (self.lumi_of)(trigger_ns);
            if lumi > counting.lumi {
                self.end_lumis_before(lumi, &mut counting, &mut batches, &mut credits, &mut report);
            }
            counting.events += 1;
            let assignment = Assignment {
                event,
                trigger_ns,
                evm_fragment,
            };
            report.assigned += 1;
            batches[bu as usize].push(assignment);
            if batches[bu as usize].len() >= MAX_BATCH {
                self.flush(&mut batches, &mut credits, &mut report);
            }
            if report.assigned.is_multiple_of(PUBLISH_EVERY) {
                fed_metrics.publish(self.producer.fed_counts());
                counters.publish(&[report.assigned, report.throttled, report.lost.len() as u64]);
            }
        }
        // The run's last lumi section is its last event's: none without events.
        let last_lumi = if report.assigned == 0 {
            0
        } else {
            counting.lumi
        };
        let after_last = last_lumi + 1;
        self.end_lumis_before(
            after_last,
            &mut counting,
            &mut batches,
            &mut credits,
            &mut report,
        );
        let end = ToBu::EndOfRun {
            last_lumi: Some(last_lumi),
        };
        self.broadcast(&end, &mut credits, &mut report);
        fed_metrics.publish(self.producer.fed_counts());
        counters.publish(&[report.assigned, report.throttled, report.lost.len() as u64]);
        report.accounts = credits.accounts().to_vec();
        Ok((report, self.producer))
    }
}

impl Evm {
    /// Ends every lumi section from the one being counted up to `lumi` (excluded), after
    /// sending the assignments gathered so far, so each builder unit has their events first.
    fn end_lumis_before(
        &self,
        lumi: u32,
        counting: &mut LumiCount,
        batches: &mut [Vec<Assignment>],
        credits: &mut BuCredits,
        report: &mut EvmReport,
    ) {
        self.flush(batches, credits, report);
        while counting.lumi < lumi {
            let end = ToBu::EndOfLumi {
                lumi: counting.lumi,
                total_events: counting.events,
            };
            self.broadcast(&end, credits, report);
            *counting = LumiCount {
                lumi: counting.lumi + 1,
                events: 0,
            };
        }
    }

    /// Sends `message` to every builder unit still alive.
    fn broadcast(&self, message: &ToBu, credits: &mut BuCredits, report: &mut EvmReport) {
        for (bu, outbox) in self.to_bus.iter().enumerate() {
            if credits.accounts()[bu].alive && outbox.send(message.clone()).is_err() {
                report.bu_gone(credits, bu as u16);
            }
        }
    }

    /// Sends every builder unit its gathered assignments.
    fn flush(
        &self,
        batches: &mut [Vec<Assignment>],
        credits: &mut BuCredits,
        report: &mut EvmReport,
    ) {
        for (bu, batch) in batches.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let batch = std::mem::take(batch);
            if self.to_bus[bu].send(ToBu::Assigned(batch)).is_err() {
                report.bu_gone(credits, bu as u16);
            }
        }
    }
}

impl EvmReport {
    /// Counts a builder unit's unsettled events lost, by number, once.
    fn bu_gone(&mut self, credits: &mut BuCredits, bu: u16) {
        if credits.accounts().get(bu as usize).is_some_and(|a| a.alive) {
            self.gone.push(bu);
            self.lost.extend(credits.died(bu));
            self.lost.sort_unstable();
        }
    }
}

/// Takes every request waiting (the first may be waited for up to `wait`). True when every
/// builder unit has gone.
fn drain(
    requests: &dyn Inbox<ToEvm>,
    credits: &mut BuCredits,
    report: &mut EvmReport,
    mut wait: Duration,
) -> bool {
    loop {
        match requests.receive(wait) {
            Received::Message(ToEvm::Request(r)) => {
                credits.grant(&r);
            }
            Received::Message(ToEvm::BuGone(bu)) => {
                report.bu_gone(credits, bu);
                if credits.all_gone() {
                    return true;
                }
            }
            Received::Nothing => return false,
            Received::Closed => return true,
        }
        wait = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(bu: u16, count: u32, settled: &[u64]) -> BuRequest {
        BuRequest {
            bu,
            count,
            settled: settled.to_vec(),
        }
    }

    proptest! {
        /// Whatever the order of requests and assignments, no builder unit is ever given
        /// more events than it asked for, and every credit is eventually used.
        #[test]
        fn never_more_than_asked(steps in proptest::collection::vec((0u16..3, 0u32..5, any::<bool>()), 0..200)) {
            let mut credits = BuCredits::new(3);
            let mut asked = [0u64; 3];
            let mut event = 0;
            for (bu, count, assign) in steps {
                if assign {
                    event += 1;
                    credits.take(event);
                } else {
                    credits.grant(&request(bu, count, &[]));
                    asked[bu as usize] += count as u64;
                }
                for (a, &asked) in credits.accounts().iter().zip(&asked) {
                    prop_assert!(a.assigned <= asked);
                }
            }
            while credits.take(event).is_some() {
                event += 1;
            }
            for (a, &asked) in credits.accounts().iter().zip(&asked) {
                prop_assert_eq!(a.assigned, asked);
            }
        }
    }

    #[test]
    fn round_robin_and_death_losing_the_unsettled_by_number() {
        let mut c = BuCredits::new(2);
        assert_eq!(c.take(1), None);
        for bu in 0..2 {
            c.grant(&request(bu, 2, &[]));
        }
        assert_eq!(
            [c.take(1), c.take(2), c.take(3)],
            [Some(0), Some(1), Some(0)]
        );
        c.grant(&request(0, 0, &[1]));
        assert_eq!(c.died(0), [3]);
        assert_eq!(c.died(0), [] as [u64; 0], "counted once");
        assert!(!c.grant(&request(0, 5, &[])));
        assert!(!c.grant(&request(9, 5, &[])));
        assert_eq!([c.take(4), c.take(5)], [Some(1), None]);
        assert!(!c.all_gone());
        assert_eq!(c.died(1), [2, 4]);
        assert!(c.all_gone());
    }

    #[test]
    fn a_builder_unit_declared_gone_is_reported_with_its_events() {
        let (tx, rx) = swdaq_dataflow::transport::local(8);
        let mut c = BuCredits::new(2);
        c.grant(&request(1, 4, &[]));
        c.take(10);
        let mut report = EvmReport::default();
        tx.send(ToEvm::BuGone(1)).unwrap();
        tx.send(ToEvm::BuGone(1)).unwrap();
        assert!(!drain(&rx, &mut c, &mut report, Duration::ZERO));
        assert_eq!((report.gone, report.lost), (vec![1], vec![10]));
        tx.send(ToEvm::BuGone(0)).unwrap();
        let mut report = EvmReport::default();
        assert!(drain(&rx, &mut c, &mut report, Duration::ZERO), "all gone");
    }
}
