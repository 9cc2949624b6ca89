//! The event manager: readout unit 0, which sees the trigger. It gives each event to a
//! builder unit that has asked for work, never more than a builder unit asked for, and
//! sends its own super-fragment with the assignment. Without credit it holds the trigger
//! (counted as throttled), so slow builder units slow the trigger down instead of losing
//! events. A builder unit that has gone (a send to it fails, or its watcher says so) gets
//! nothing more; the events it was given and had not settled are counted lost by number
//! (then checked against its closed files, [`crate::reconcile`]). The credits and accounts
//! are `swdaq_dataflow::credit`'s, shared with the SW ROD's HLT supervisor.
//! They are not re-assigned: the event manager's own super-fragment went with the assignment
//! and the other readout units may already have sent theirs to the dead unit.
//!
//! It counts the events it gives out per lumi section and, once an event of a later lumi
//! section is given out, ends the earlier ones (empty ones too) with their counts to every
//! builder unit, after their events: a CMS EoLS's `TotalEvents` is the whole lumi section's,
//! the same in every builder unit's.

use crate::message::{Assignment, MAX_BATCH, ToBu, ToEvm};
use crate::metrics::{CounterSet, FedMetrics, PUBLISH_EVERY};
use crate::producer::Producer;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use swdaq_dataflow::credit::{Credits, UnitAccount};
use swdaq_dataflow::transport::{Inbox, Outbox, Received};
use swdaq_monitor::{MonitorError, Registry};

/// How long the loop blocks on builder-unit requests when it has nothing else to do.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// A builder unit's account with the event manager.
pub type BuAccount = UnitAccount;

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
    /// Time the trigger spent paused by run control.
    pub paused: Duration,
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
        let mut credits = Credits::new(self.to_bus.len());
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
            // A pause asked for begins here: this event is the first held.
            self.producer.clock().pause().fix_point(event);
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
            let Some(bu) = credits.take(event).map(|bu| bu as u16) else {
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
        report.paused = self.producer.clock().pause().paused_for();
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
        credits: &mut Credits,
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
    fn broadcast(&self, message: &ToBu, credits: &mut Credits, report: &mut EvmReport) {
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
        credits: &mut Credits,
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
    fn bu_gone(&mut self, credits: &mut Credits, bu: u16) {
        if credits.accounts().get(bu as usize).is_some_and(|a| a.alive) {
            self.gone.push(bu);
            self.lost.extend(credits.died(bu as usize));
            self.lost.sort_unstable();
        }
    }
}

/// Takes every request waiting (the first may be waited for up to `wait`). True when every
/// builder unit has gone.
fn drain(
    requests: &dyn Inbox<ToEvm>,
    credits: &mut Credits,
    report: &mut EvmReport,
    mut wait: Duration,
) -> bool {
    loop {
        match requests.receive(wait) {
            Received::Message(ToEvm::Request(r)) => {
                credits.grant(r.bu as usize, u64::from(r.count), &r.settled);
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

    #[test]
    fn a_builder_unit_declared_gone_is_reported_with_its_events() {
        let (tx, rx) = swdaq_dataflow::transport::local(8);
        let mut c = Credits::new(2);
        c.grant(1, 4, &[]);
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
