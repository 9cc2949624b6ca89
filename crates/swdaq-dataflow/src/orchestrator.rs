//! The dataflow orchestrator: hands each trigger decision to one of several record builders,
//! by credit. A builder grants credits (records it can take); a decision goes to the alive
//! builder with the most credits left (ties: the one least recently given work), so storage
//! throughput grows with builders. A builder declared gone has its unfinished decisions given
//! to the others (numbers listed) or, with no builder left, counted lost (numbers listed).

use std::collections::{BTreeMap, VecDeque};
use swdaq_trigger::TriggerDecision;

/// A builder's index among the orchestrator's builders.
pub type BuilderIndex = usize;

#[derive(Debug, Default)]
struct Builder {
    credits: u64,
    /// Decisions given to this builder and not reported done, by trigger number.
    assigned: BTreeMap<u64, TriggerDecision>,
    gone: bool,
    last_given: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrchestratorReport {
    pub decisions: u64,
    /// Decisions given to each builder (re-assignments included).
    pub assigned: Vec<u64>,
    pub done: Vec<u64>,
    /// Builders declared gone, in order.
    pub builders_gone: Vec<BuilderIndex>,
    /// Trigger numbers taken from a gone builder and given to another.
    pub reassigned: Vec<u64>,
    /// Trigger numbers no builder could take (every builder gone), or still unfinished at a
    /// gone builder when the run ended.
    pub lost: Vec<u64>,
    /// `RecordDone`s for decisions this builder did not hold (duplicates, after a reassignment).
    pub unexpected_done: u64,
}

pub struct Orchestrator {
    builders: Vec<Builder>,
    /// Decisions waiting for a builder with credit, oldest first, each with whether it was
    /// taken back from a builder that went away.
    waiting: VecDeque<(TriggerDecision, bool)>,
    given: u64,
    report: OrchestratorReport,
}

impl Orchestrator {
    pub fn new(builders: usize) -> Self {
        Self {
            builders: (0..builders).map(|_| Builder::default()).collect(),
            waiting: VecDeque::new(),
            given: 0,
            report: OrchestratorReport {
                assigned: vec![0; builders],
                done: vec![0; builders],
                ..Default::default()
            },
        }
    }

    /// `builder` can take `n` more records.
    pub fn add_credits(&mut self, builder: BuilderIndex, n: u64) {
        if let Some(b) = self.builders.get_mut(builder).filter(|b| !b.gone) {
            b.credits += n;
        }
    }

    pub fn on_decision(&mut self, decision: TriggerDecision) {
        self.report.decisions += 1;
        self.waiting.push_back((decision, false));
    }

    /// `builder` has stored (or given up on) record `trigger_number`: its credit returns.
    pub fn on_done(&mut self, builder: BuilderIndex, trigger_number: u64) {
        let Some(b) = self.builders.get_mut(builder) else {
            self.report.unexpected_done += 1;
            return;
        };
        if b.assigned.remove(&trigger_number).is_some() {
            self.report.done[builder] += 1;
        } else {
            self.report.unexpected_done += 1;
        }
    }

    /// `builder` stopped answering: its unfinished decisions go back to the front of the
    /// queue (oldest first) for the others.
    pub fn builder_gone(&mut self, builder: BuilderIndex) {
        let Some(b) = self.builders.get_mut(builder).filter(|b| !b.gone) else {
            return;
        };
        b.gone = true;
        b.credits = 0;
        self.report.builders_gone.push(builder);
        let orphans = std::mem::take(&mut b.assigned);
        for d in orphans.into_values().rev() {
            self.waiting.push_front((d, true));
        }
    }

    /// Assigns what waits to builders with credit; with every builder gone, what waits is lost.
    pub fn dispatch(&mut self) -> Vec<(BuilderIndex, TriggerDecision)> {
        let mut out = Vec::new();
        if self.builders.iter().all(|b| b.gone) {
            self.report
                .lost
                .extend(self.waiting.drain(..).map(|(d, _)| d.trigger_number));
            return out;
        }
        while let Some(k) = self.pick() {
            let Some((d, taken_back)) = self.waiting.pop_front() else {
                break;
            };
            if taken_back {
                self.report.reassigned.push(d.trigger_number);
            }
            self.given += 1;
            let b = &mut self.builders[k];
            b.credits -= 1;
            b.last_given = self.given;
            b.assigned.insert(d.trigger_number, d.clone());
            self.report.assigned[k] += 1;
            out.push((k, d));
        }
        out
    }

    fn pick(&self) -> Option<BuilderIndex> {
        self.builders
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.gone && b.credits > 0)
            .max_by_key(|(_, b)| (b.credits, std::cmp::Reverse(b.last_given)))
            .map(|(k, _)| k)
    }

    /// Decisions waiting for a builder.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Decisions given to alive builders and not yet done.
    pub fn outstanding(&self) -> usize {
        self.builders
            .iter()
            .filter(|b| !b.gone)
            .map(|b| b.assigned.len())
            .sum()
    }

    pub fn is_gone(&self, builder: BuilderIndex) -> bool {
        self.builders.get(builder).is_none_or(|b| b.gone)
    }

    /// The report at the end: what still waits for a builder is lost.
    pub fn finish(mut self) -> OrchestratorReport {
        let lost = self.waiting.drain(..).map(|(d, _)| d.trigger_number);
        self.report.lost.extend(lost);
        self.report.lost.sort_unstable();
        self.report
    }

    pub fn report(&self) -> &OrchestratorReport {
        &self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(n: u64) -> TriggerDecision {
        TriggerDecision {
            trigger_number: n,
            timestamp: n,
            trigger_type: 1,
            candidates: 1,
            windows: vec![],
        }
    }

    fn numbers(out: &[(BuilderIndex, TriggerDecision)]) -> Vec<(BuilderIndex, u64)> {
        out.iter().map(|(k, d)| (*k, d.trigger_number)).collect()
    }

    #[test]
    fn decisions_spread_over_builders_by_credit_and_never_beyond_it() {
        let mut o = Orchestrator::new(2);
        o.add_credits(0, 2);
        o.add_credits(1, 1);
        for n in 1..=5 {
            o.on_decision(decision(n));
        }
        assert_eq!(numbers(&o.dispatch()), [(0, 1), (1, 2), (0, 3)]);
        assert_eq!(o.waiting(), 2);
        o.on_done(1, 2);
        o.add_credits(1, 1);
        assert_eq!(numbers(&o.dispatch()), [(1, 4)]);
        assert_eq!(o.outstanding(), 3);
    }

    #[test]
    fn a_gone_builders_records_go_to_the_others_oldest_first() {
        let mut o = Orchestrator::new(2);
        o.add_credits(0, 4);
        for n in 1..=3 {
            o.on_decision(decision(n));
        }
        assert_eq!(o.dispatch().len(), 3);
        o.on_done(0, 2);
        o.builder_gone(0);
        o.add_credits(0, 5); // a gone builder's late credits count for nothing
        assert!(o.dispatch().is_empty());
        o.add_credits(1, 8);
        assert_eq!(numbers(&o.dispatch()), [(1, 1), (1, 3)]);
        let r = o.finish();
        assert_eq!(r.reassigned, [1, 3]);
        assert_eq!(r.builders_gone, [0]);
        assert_eq!((r.assigned, r.done), (vec![3, 2], vec![1, 0]));
        assert!(r.lost.is_empty());
    }

    #[test]
    fn with_every_builder_gone_decisions_are_lost_by_number() {
        let mut o = Orchestrator::new(1);
        o.add_credits(0, 1);
        o.on_decision(decision(1));
        o.on_decision(decision(2));
        assert_eq!(o.dispatch().len(), 1);
        o.builder_gone(0);
        o.on_decision(decision(3));
        assert!(o.dispatch().is_empty());
        o.on_done(0, 1); // too late: it was taken back
        let r = o.finish();
        assert_eq!(r.lost, [1, 2, 3]);
        assert_eq!(r.unexpected_done, 1);
    }
}
