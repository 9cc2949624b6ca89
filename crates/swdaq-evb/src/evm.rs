//! The event manager: readout unit 0, which sees the trigger. It gives each event to a
//! builder unit that has asked for work, never more than a builder unit asked for, and
//! sends its own super-fragment with the assignment. Without credit it holds the trigger
//! (counted as throttled), so slow builder units slow the trigger down instead of losing
//! events. A builder unit that has gone (its inbox closed) gets nothing more; what it was
//! given and had not reported finished is counted as lost (an upper bound: its events are
//! not re-assigned).

use crate::message::{Assignment, BuRequest, MAX_BATCH, ToBu};
use crate::metrics::{CounterSet, FedMetrics, PUBLISH_EVERY};
use crate::producer::Producer;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use swdaq_dataflow::transport::{Inbox, Outbox, Received};
use swdaq_monitor::{MonitorError, Registry};

/// How long the loop blocks on builder-unit requests when it has nothing else to do.
const IDLE_WAIT: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuAccount {
    pub requested: u64,
    pub assigned: u64,
    pub finished: u64,
    pub alive: bool,
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
                a.finished = a.finished.max(request.finished);
                true
            }
            _ => false,
        }
    }

    /// The next builder unit with credit, round robin; takes one credit.
    pub fn take(&mut self) -> Option<u16> {
        let n = self.accounts.len();
        for i in 0..n {
            let bu = (self.next + i) % n;
            let a = &mut self.accounts[bu];
            if a.alive && a.assigned < a.requested {
                a.assigned += 1;
                self.next = (bu + 1) % n;
                return Some(bu as u16);
            }
        }
        None
    }

    /// Marks a builder unit gone; returns the events it was given and never finished.
    pub fn died(&mut self, bu: u16) -> u64 {
        let a = &mut self.accounts[bu as usize];
        a.alive = false;
        a.assigned.saturating_sub(a.finished)
    }

    pub fn accounts(&self) -> &[BuAccount] {
        &self.accounts
    }
}

#[derive(Debug, Clone, Default)]
pub struct EvmReport {
    pub assigned: u64,
    /// Events that waited for a builder unit's credit.
    pub throttled: u64,
    /// Events given to builder units that died, minus those they had reported finished: an
    /// upper bound, since a unit may finish (and write) some after its last report.
    pub lost: u64,
    /// When paced: the most any event was given out after its trigger time. A trigger rate
    /// holds when this stays small (the event manager keeps up with the trigger clock).
    pub max_behind: Duration,
    pub accounts: Vec<BuAccount>,
}

pub struct Evm {
    pub producer: Producer,
    pub requests: Box<dyn Inbox<BuRequest>>,
    pub to_bus: Vec<Box<dyn Outbox<ToBu>>>,
    pub stop: Arc<AtomicBool>,
    pub max_events: Option<u64>,
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
        loop {
            let all_gone = drain(&*self.requests, &mut credits, Duration::ZERO);
            let (event, _) = self.producer.peek();
            let done = self.max_events.is_some_and(|m| event > m);
            if all_gone || done || self.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(wait) = self.producer.not_due_for() {
                self.flush(&mut batches, &mut credits, &mut report);
                drain(&*self.requests, &mut credits, wait.min(IDLE_WAIT));
                continue;
            }
            let Some(bu) = credits.take() else {
                if !waited_for_credit {
                    report.throttled += 1;
                    waited_for_credit = true;
                }
                self.flush(&mut batches, &mut credits, &mut report);
                drain(&*self.requests, &mut credits, IDLE_WAIT);
                continue;
            };
            waited_for_credit = false;
            report.max_behind = report.max_behind.max(self.producer.behind());
            let (trigger_ns, evm_fragment) = self.producer.take();
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
                counters.publish(&[report.assigned, report.throttled, report.lost]);
            }
        }
        self.flush(&mut batches, &mut credits, &mut report);
        for (bu, outbox) in self.to_bus.iter().enumerate() {
            if credits.accounts()[bu].alive && outbox.send(ToBu::EndOfRun).is_err() {
                report.lost += credits.died(bu as u16);
            }
        }
        fed_metrics.publish(self.producer.fed_counts());
        counters.publish(&[report.assigned, report.throttled, report.lost]);
        report.accounts = credits.accounts().to_vec();
        Ok((report, self.producer))
    }
}

impl Evm {
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
                report.lost += credits.died(bu as u16);
            }
        }
    }
}

/// Takes every request waiting (the first may be waited for up to `wait`). True when every
/// builder unit has gone.
fn drain(requests: &dyn Inbox<BuRequest>, credits: &mut BuCredits, mut wait: Duration) -> bool {
    loop {
        match requests.receive(wait) {
            Received::Message(r) => {
                credits.grant(&r);
                wait = Duration::ZERO;
            }
            Received::Nothing => return false,
            Received::Closed => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the order of requests and assignments, no builder unit is ever given
        /// more events than it asked for, and every credit is eventually used.
        #[test]
        fn never_more_than_asked(steps in proptest::collection::vec((0u16..3, 0u32..5, any::<bool>()), 0..200)) {
            let mut credits = BuCredits::new(3);
            let mut asked = [0u64; 3];
            for (bu, count, assign) in steps {
                if assign {
                    credits.take();
                } else {
                    credits.grant(&BuRequest { bu, count, finished: 0 });
                    asked[bu as usize] += count as u64;
                }
                for (a, &asked) in credits.accounts().iter().zip(&asked) {
                    prop_assert!(a.assigned <= asked);
                }
            }
            while credits.take().is_some() {}
            for (a, &asked) in credits.accounts().iter().zip(&asked) {
                prop_assert_eq!(a.assigned, asked);
            }
        }
    }

    #[test]
    fn round_robin_and_death() {
        let mut c = BuCredits::new(2);
        assert_eq!(c.take(), None);
        for bu in 0..2 {
            c.grant(&BuRequest {
                bu,
                count: 2,
                finished: 0,
            });
        }
        assert_eq!([c.take(), c.take(), c.take()], [Some(0), Some(1), Some(0)]);
        c.grant(&BuRequest {
            bu: 0,
            count: 0,
            finished: 1,
        });
        assert_eq!(c.died(0), 1);
        assert!(!c.grant(&BuRequest {
            bu: 0,
            count: 5,
            finished: 1
        }));
        assert!(!c.grant(&BuRequest {
            bu: 9,
            count: 5,
            finished: 1
        }));
        assert_eq!([c.take(), c.take()], [Some(1), None]);
    }
}
