//! Building one trigger record per decision: requests out, fragments in, time-out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use swdaq_format::fragment::fragment_error;
use swdaq_format::trigger_record::{ComponentRequest, record_status};
use swdaq_format::{Fragment, SourceId, Subsystem, TriggerRecord, TriggerRecordHeader};
use swdaq_readout::request::DataRequest;
use swdaq_trigger::TriggerDecision;

#[derive(Debug, Clone, Copy)]
pub struct BuilderConfig {
    pub run_number: u32,
    /// How long a record waits for its fragments before it is completed as Incomplete.
    pub timeout: Duration,
    /// Builder instance number (the record header's element id).
    pub element: u32,
}

/// Fragment error bits that mean data of the window is absent from the fragment.
const DATA_ABSENT: u32 = fragment_error::DATA_NOT_FOUND | fragment_error::INCOMPLETE;

struct Pending {
    decision: TriggerDecision,
    started: Instant,
    /// One slot per window of the decision, in its order.
    fragments: Vec<Option<Vec<u8>>>,
    /// Slots whose source could not be asked (its readout is gone): nothing will come.
    given_up: Vec<bool>,
    /// Slots settled: arrived or given up.
    arrived: usize,
}

impl Pending {
    /// The first slot of `source` still waiting for its fragment.
    fn open_slot(&self, source: SourceId) -> Option<usize> {
        (0..self.fragments.len()).find(|&k| {
            self.decision.windows[k].source == source
                && self.fragments[k].is_none()
                && !self.given_up[k]
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildOutcome {
    /// Every fragment arrived and none lacks data.
    Complete,
    /// Fragments arrived but some lack data (source stopped, data evicted, time-out at the link).
    DataMissing,
    /// Some fragments never came: the record timed out, the run ended, or a source could not
    /// be asked at all.
    TimedOut,
}

/// A finished record and why it is what it is.
#[derive(Debug)]
pub struct BuiltRecord {
    pub record: TriggerRecord,
    pub outcome: BuildOutcome,
    /// Sources whose fragment never came.
    pub missing: Vec<SourceId>,
    /// Sources whose fragment came flagged as lacking data.
    pub lacking_data: Vec<SourceId>,
    /// When the builder received the decision.
    pub started: Instant,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuilderCounts {
    pub decisions: u64,
    /// Decisions whose trigger number was already being built or built: ignored.
    pub duplicate_decisions: u64,
    pub requests: u64,
    pub fragments: u64,
    /// Fragments for records already finished (or never started): dropped.
    pub late_fragments: u64,
    /// Fragments naming a source the record did not ask for (or asked for twice): dropped.
    pub unexpected_fragments: u64,
    pub complete: u64,
    pub data_missing: u64,
    pub timed_out: u64,
    /// Fragments absent from timed-out records, by source.
    pub missing_by_source: BTreeMap<SourceId, u64>,
    /// Fragments flagged as lacking data, by source.
    pub lacking_by_source: BTreeMap<SourceId, u64>,
}

impl BuilderCounts {
    pub fn add(&mut self, o: &BuilderCounts) {
        self.decisions += o.decisions;
        self.duplicate_decisions += o.duplicate_decisions;
        self.requests += o.requests;
        self.fragments += o.fragments;
        self.late_fragments += o.late_fragments;
        self.unexpected_fragments += o.unexpected_fragments;
        self.complete += o.complete;
        self.data_missing += o.data_missing;
        self.timed_out += o.timed_out;
        for (map, other) in [
            (&mut self.missing_by_source, &o.missing_by_source),
            (&mut self.lacking_by_source, &o.lacking_by_source),
        ] {
            for (s, n) in other {
                *map.entry(*s).or_default() += n;
            }
        }
    }
}

pub struct RecordBuilder {
    config: BuilderConfig,
    pending: BTreeMap<u64, Pending>,
    /// Trigger numbers finished, to tell late fragments and duplicate decisions from new ones.
    finished_below: u64,
    finished_above: BTreeSet<u64>,
    pub counts: BuilderCounts,
}

impl RecordBuilder {
    pub fn new(config: BuilderConfig) -> Self {
        Self {
            config,
            pending: BTreeMap::new(),
            finished_below: 1,
            finished_above: Default::default(),
            counts: BuilderCounts::default(),
        }
    }

    /// Records being built.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn is_finished(&self, trigger: u64) -> bool {
        trigger < self.finished_below || self.finished_above.contains(&trigger)
    }

    fn mark_finished(&mut self, trigger: u64) {
        self.finished_above.insert(trigger);
        while self.finished_above.remove(&self.finished_below) {
            self.finished_below += 1;
        }
    }

    /// Starts a record; returns the requests to send (one per window of the decision).
    pub fn start(&mut self, decision: TriggerDecision, now: Instant) -> Vec<DataRequest> {
        self.counts.decisions += 1;
        let n = decision.trigger_number;
        if self.is_finished(n) || self.pending.contains_key(&n) {
            self.counts.duplicate_decisions += 1;
            return Vec::new();
        }
        let requests: Vec<DataRequest> = decision
            .windows
            .iter()
            .map(|w| DataRequest {
                trigger_number: n,
                trigger_timestamp: decision.timestamp,
                run_number: self.config.run_number,
                sequence_number: 0,
                source: w.source,
                window_begin: w.begin,
                window_end: w.end,
                destination: self.config.element,
            })
            .collect();
        self.counts.requests += requests.len() as u64;
        self.pending.insert(
            n,
            Pending {
                fragments: vec![None; decision.windows.len()],
                given_up: vec![false; decision.windows.len()],
                arrived: 0,
                decision,
                started: now,
            },
        );
        requests
    }

    /// Takes a fragment in; returns the record if it was the last one missing.
    pub fn on_fragment(
        &mut self,
        trigger: u64,
        source: SourceId,
        fragment: Vec<u8>,
    ) -> Option<BuiltRecord> {
        self.counts.fragments += 1;
        let Some(pending) = self.pending.get_mut(&trigger) else {
            self.counts.late_fragments += 1;
            return None;
        };
        let Some(k) = pending.open_slot(source) else {
            self.counts.unexpected_fragments += 1;
            return None;
        };
        pending.fragments[k] = Some(fragment);
        self.settle(trigger)
    }

    /// `source`'s request for record `trigger` could not be sent (its readout is gone): its
    /// fragment is given up at once rather than waited for until the time-out. Returns the
    /// record if that was the last one open.
    pub fn unreachable(&mut self, trigger: u64, source: SourceId) -> Option<BuiltRecord> {
        let pending = self.pending.get_mut(&trigger)?;
        let k = pending.open_slot(source)?;
        pending.given_up[k] = true;
        self.settle(trigger)
    }

    /// Counts one more slot of `trigger` settled; finishes the record when none is open.
    fn settle(&mut self, trigger: u64) -> Option<BuiltRecord> {
        let pending = self.pending.get_mut(&trigger)?;
        pending.arrived += 1;
        if pending.arrived < pending.fragments.len() {
            return None;
        }
        let pending = self.pending.remove(&trigger).expect("present above");
        Some(self.finish(pending))
    }

    /// Completes every record older than the time-out, flagged.
    pub fn expire(&mut self, now: Instant) -> Vec<BuiltRecord> {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now.duration_since(p.started) >= self.config.timeout)
            .map(|(&n, _)| n)
            .collect();
        let mut built = Vec::with_capacity(expired.len());
        for n in expired {
            if let Some(p) = self.pending.remove(&n) {
                built.push(self.finish(p));
            }
        }
        built
    }

    /// Completes everything still being built (end of run), flagged.
    pub fn abandon_all(&mut self) -> Vec<BuiltRecord> {
        std::mem::take(&mut self.pending)
            .into_values()
            .map(|p| self.finish(p))
            .collect()
    }

    fn finish(&mut self, pending: Pending) -> BuiltRecord {
        self.mark_finished(pending.decision.trigger_number);
        let mut missing = Vec::new();
        let mut lacking_data = Vec::new();
        let mut fragments = Vec::with_capacity(pending.fragments.len());
        for (w, f) in pending.decision.windows.iter().zip(pending.fragments) {
            match f {
                None => {
                    missing.push(w.source);
                    *self.counts.missing_by_source.entry(w.source).or_default() += 1;
                }
                Some(bytes) => {
                    let absent = !Fragment::parse(&bytes)
                        .is_ok_and(|f| f.header.error_bits & DATA_ABSENT == 0);
                    if absent {
                        lacking_data.push(w.source);
                        *self.counts.lacking_by_source.entry(w.source).or_default() += 1;
                    }
                    fragments.push(bytes);
                }
            }
        }
        let outcome = if !missing.is_empty() {
            self.counts.timed_out += 1;
            BuildOutcome::TimedOut
        } else if !lacking_data.is_empty() {
            self.counts.data_missing += 1;
            BuildOutcome::DataMissing
        } else {
            self.counts.complete += 1;
            BuildOutcome::Complete
        };
        let d = &pending.decision;
        let header = TriggerRecordHeader {
            trigger_number: d.trigger_number,
            trigger_timestamp: d.timestamp,
            run_number: self.config.run_number,
            status_bits: if outcome == BuildOutcome::Complete {
                0
            } else {
                record_status::INCOMPLETE
            },
            trigger_type: d.trigger_type,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, self.config.element),
            components: d
                .windows
                .iter()
                .map(|w| ComponentRequest {
                    component: w.source,
                    window_begin: w.begin,
                    window_end: w.end,
                })
                .collect(),
        };
        BuiltRecord {
            record: TriggerRecord { header, fragments },
            outcome,
            missing,
            lacking_data,
            started: pending.started,
        }
    }
}

/// Sources' names for messages: `Detector_Readout:0x00000003, Trigger:0x00000003`.
pub fn source_list(sources: &[SourceId]) -> String {
    sources
        .iter()
        .map(SourceId::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
