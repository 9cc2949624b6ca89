//! What a SW ROD run reports: every thread's counts, and the emulator's truth against the
//! counters: every injected fault must end in exactly one counter, per ROB counter and over
//! the run (events holding a ROB that misses e-links).

use super::config::SwrodSettings;
use crate::runtime::dqm::DqmReport;
use crate::runtime::dqm_stream::Published;
use crate::runtime::outcome::AppOutcome;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use swdaq_dataflow::credit::{ReadBackOf, UnitAccount};
use swdaq_sim::felix::{FelixFault, FelixFaultKind};
use swdaq_swrod::consumers::{ConsumerCounts, RequestCounts};
use swdaq_swrod::files::StoredFile;
use swdaq_swrod::hlt::{HltCounts, MissingRob};
use swdaq_swrod::net::subscriber::IntakeCounts;
use swdaq_swrod::read_back::LeftOnDisk;
use swdaq_swrod::{AggregatorCounts, DecoderCounts};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CardResult {
    /// The card's number in the run.
    pub card: u16,
    pub l1as: u64,
    #[serde(skip)]
    pub faults: Vec<FelixFault>,
    /// Seconds the card waited for a full ROB queue (the SW ROD did not keep up).
    pub waited_for_rod_s: f64,
    /// Seconds the card waited for the HLT's L1 ID queue (busy: the HLT did not keep up).
    pub waited_for_hlt_s: f64,
    /// Largest delay of an L1 accept batch behind the L1A clock.
    pub max_lag_ms: f64,
    pub cpu_s: f64,
    /// File or TCP input: TTC-to-host blocks lost or broken and records not readable (L1
    /// accepts the HLT may never have heard of).
    pub ttc_problems: u64,
    /// TCP input: the subscription to the card's TTC-to-host e-link.
    pub intake: Option<IntakeCounts>,
    /// Why the card's input ended early: its file cut short or unreadable, its FELIX
    /// server's connection lost for good or the subscription refused.
    pub input_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RodResult {
    pub source_id: u32,
    pub decoder: DecoderCounts,
    pub aggregator: AggregatorCounts,
    /// The aggregation plugin's first error on this ROB (`aggregator.plugin_errors` counts
    /// them all).
    #[serde(default)]
    pub plugin_error: Option<String>,
    pub consumers: Vec<(String, ConsumerCounts)>,
    /// TCP input: the ROB's subscription to its e-links.
    pub intake: Option<IntakeCounts>,
    /// CPU time of the SW ROD thread, and the wall time it spent decoding and aggregating.
    pub cpu_s: f64,
    pub processing_s: f64,
}

#[derive(Debug, Clone)]
pub struct SwrodReport {
    pub run_number: u32,
    pub seconds: f64,
    pub settings: SwrodSettings,
    pub cards: Vec<CardResult>,
    /// Whether every card's injected faults are known (file or TCP input without the
    /// generator's truth: nothing to score against).
    pub truth_known: bool,
    pub robs: Vec<RodResult>,
    pub requests: Vec<RequestCounts>,
    pub hlt: HltCounts,
    pub hlt_cpu_s: f64,
    pub incomplete_examples: Vec<(u32, Vec<(u32, MissingRob)>)>,
    pub samples: u64,
    pub sample_errors: u64,
    pub stored_events: u64,
    /// Stored events that carry status (a ROB missing, or one missing e-links).
    pub stored_flagged_events: u64,
    /// Bytes of the closed files (headers included).
    pub stored_bytes: u64,
    /// Events sent to storage that are in no closed file (storage failed).
    pub unwritten_events: u64,
    pub files: Vec<StoredFile>,
    pub storage_error: Option<String>,
    /// L1 accepts the HLT was given: card 0's in one process, the HLT supervisor's with
    /// applications (the cards may have sent more: they run on until they are stopped).
    pub l1as_to_hlt: u64,
    /// With applications: what only they have.
    pub apps: Option<AppsPart>,
    /// Online data-quality monitoring (`[dqm]`: in one process, or from the HLT
    /// applications' event streams).
    pub dqm: Option<DqmReport>,
}

/// The HLT supervisor's account of a run as applications.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HltsvReport {
    /// L1 accepts given out, global ids `1..=l1as`: each to one HLT application.
    pub l1as: u64,
    /// Seconds the L1 accepts waited for an HLT application with room (busy: dead time).
    /// The L1A clock stands still meanwhile; fed by FELIX servers, card 0's TTC e-link is not
    /// read, so its server is held by TCP flow control (a real card's buffers would fill).
    pub busy_s: f64,
    /// For each HLT application declared gone, the events it was given and had not settled,
    /// by number: an upper bound until the run's summary reads back what it closed.
    pub lost: BTreeMap<u16, Vec<u64>>,
    /// HLT applications declared gone, by their index among the HLT applications.
    pub gone: Vec<u16>,
    /// Each HLT application's account.
    pub accounts: Vec<UnitAccount>,
    /// Fed by FELIX servers: its subscription to card 0's TTC-to-host e-link, and the TTC
    /// records lost or broken there (L1 accepts the HLT never heard of).
    pub ttc_intake: Option<(IntakeCounts, u64)>,
    /// Fed by FELIX servers: why card 0's TTC-to-host subscription ended before its server's
    /// `End` (the L1 accepts after it never reached the HLT).
    pub ttc_input_error: Option<String>,
}

/// What only a run as applications has.
#[derive(Debug, Clone, Default)]
pub struct AppsPart {
    /// The supervisor's account (`None`: it did not report).
    pub hltsv: Option<HltsvReport>,
    /// Events lost, by number: given to an HLT application that died, in none of its closed
    /// files (exact once read back).
    pub lost_events: Vec<u64>,
    /// Events built by HLT applications that did not report (settled with the supervisor or
    /// in their closed files): in no HLT count.
    pub events_of_unreported_hlts: u64,
    /// HLT applications settled with what they left on disk.
    pub read_back: Vec<ReadBackOf<LeftOnDisk>>,
    pub apps: Vec<AppOutcome>,
    /// Messages refused by the applications' inboxes, by reason.
    pub refused_messages: BTreeMap<String, u64>,
    /// Requests or answers a peer did not take (gone, or its queue full).
    pub undelivered: BTreeMap<String, u64>,
    /// Each application's threads' CPU shares, named `app/thread`.
    pub thread_cpu: Vec<(String, f64)>,
    /// What each HLT application published on its `event_stream`, by name.
    pub events_published: BTreeMap<String, Published>,
}

/// One fault kind: injected by the emulators, and the counter that must hold it.
#[derive(Debug, Clone, Serialize)]
pub struct TruthCheck {
    pub fault: &'static str,
    pub injected: u64,
    pub counter: &'static str,
    pub counted: u64,
    /// What the counter must read: `injected`, or for ECRs `injected` x ROBs per card (each
    /// ROB sees every ECR of its card).
    pub expected: u64,
    pub ok: bool,
}

impl SwrodReport {
    /// Faults of `kind` on the L1 accepts the cards sent: an ECR the generator records after
    /// a card's last L1 accept (its count a multiple of `ecr_every`) never reaches the data.
    fn injected(&self, kind: FelixFaultKind) -> u64 {
        self.cards
            .iter()
            .flat_map(|c| {
                c.faults
                    .iter()
                    .filter(move |f| f.kind == kind && self.l1a_index(f.l1_id) < c.l1as)
            })
            .count() as u64
    }

    /// The run's index (from 0) of the L1 accept with extended L1 ID `l1_id`.
    fn l1a_index(&self, l1_id: u32) -> u64 {
        let ecr_every = u64::from(self.settings.felix.ecr_every);
        let epoch = u64::from(l1_id >> 24);
        let count = u64::from(l1_id & 0x00FF_FFFF);
        if ecr_every > 0 {
            epoch * ecr_every + count
        } else {
            count
        }
    }

    fn sum(&self, f: impl Fn(&RodResult) -> u64) -> u64 {
        self.robs.iter().map(f).sum()
    }

    pub fn truth_checks(&self) -> Vec<TruthCheck> {
        let per_card = u64::from(self.settings.robs_per_card);
        let check = |fault, kind, counter, counted, times: u64| {
            let injected = self.injected(kind);
            TruthCheck {
                fault,
                injected,
                counter,
                counted,
                expected: injected * times,
                ok: counted == injected * times,
            }
        };
        vec![
            check(
                "missing_chunk",
                FelixFaultKind::MissingChunk,
                "missing_chunks",
                self.sum(|r| r.aggregator.missing_chunks),
                1,
            ),
            check(
                "truncated_chunk",
                FelixFaultKind::TruncatedChunk,
                "truncated_chunks",
                self.sum(|r| r.aggregator.truncated_chunks),
                1,
            ),
            check(
                "sequence_gap",
                FelixFaultKind::SequenceGap,
                "sequence_gaps",
                self.sum(|r| r.decoder.sequence_gaps),
                1,
            ),
            check(
                "l1id_out_of_order",
                FelixFaultKind::L1idOutOfOrder,
                "out_of_order_chunks",
                self.sum(|r| r.aggregator.out_of_order_chunks),
                1,
            ),
            check(
                "dead_elink",
                FelixFaultKind::DeadElink,
                "elinks_silent",
                self.sum(|r| r.aggregator.elinks_silent),
                1,
            ),
            check(
                "ecr",
                FelixFaultKind::Ecr,
                "ecrs",
                self.sum(|r| r.aggregator.ecrs),
                per_card,
            ),
        ]
    }

    /// Counters no injected fault leads to: each must be 0. A ROB missing from an HLT event
    /// is one: e-link faults leave a ROB fragment incomplete, never absent. So is anything
    /// the input lost on the way (TTC records, a file cut short, the network's losses).
    pub fn unexpected(&self) -> Vec<(&'static str, u64)> {
        let d = |f: fn(&DecoderCounts) -> u64| self.sum(|r| f(&r.decoder));
        let a = |f: fn(&AggregatorCounts) -> u64| self.sum(|r| f(&r.aggregator));
        let intakes = || {
            self.robs
                .iter()
                .filter_map(|r| r.intake)
                .chain(self.cards.iter().filter_map(|c| c.intake))
        };
        let net = |f: fn(&IntakeCounts) -> u64| intakes().map(|i| f(&i)).sum::<u64>();
        vec![
            (
                "ttc_problems",
                self.cards.iter().map(|c| c.ttc_problems).sum(),
            ),
            (
                "input_errors",
                self.cards
                    .iter()
                    .filter(|c| c.input_error.is_some())
                    .count() as u64,
            ),
            ("felix_out_of_sequence", net(|i| i.out_of_sequence)),
            ("felix_malformed", net(|i| i.malformed)),
            ("felix_connection_losses", net(|i| i.connection_losses)),
            ("felix_blocks_missing", net(|i| i.blocks_missing)),
            ("hlt_events_missing_robs", self.hlt.incomplete_events),
            ("corrupt_blocks", d(|c| c.corrupt_blocks)),
            ("foreign_blocks", d(|c| c.foreign_blocks)),
            ("broken_chunks", d(|c| c.broken_chunks)),
            ("late_chunks", a(|c| c.late_chunks)),
            ("duplicate_chunks", a(|c| c.duplicate_chunks)),
            ("crc_error_chunks", a(|c| c.crc_error_chunks)),
            (
                "malformed_chunks",
                a(|c| c.malformed_chunks + c.oversized_chunks),
            ),
            ("bcid_mismatches", a(|c| c.bcid_mismatches)),
            ("ring_collisions", a(|c| c.ring_collisions)),
            ("elinks_revived", a(|c| c.elinks_revived)),
            // No injected fault makes a plugin fail: its L1 IDs are stored flagged in swdaq's
            // layout, and the run is not what the detector asked for.
            ("plugin_errors", a(|c| c.plugin_errors)),
        ]
    }

    /// Events the truth says hold a ROB fragment missing e-links: the L1 accepts given to
    /// the HLT with a chunk never sent, and every one from an e-link's death on.
    pub fn expected_events_with_incomplete_robs(&self) -> u64 {
        let l1as = self.l1as_to_hlt;
        let index = |l1_id: u32| self.l1a_index(l1_id);
        let faults = || self.cards.iter().flat_map(|c| &c.faults);
        let first_death = faults()
            .filter(|f| f.kind == FelixFaultKind::DeadElink)
            .map(|f| index(f.l1_id))
            .min()
            .unwrap_or(l1as);
        let lost: BTreeSet<u64> = faults()
            .filter(|f| f.kind == FelixFaultKind::MissingChunk)
            .map(|f| index(f.l1_id))
            .filter(|&i| i < first_death.min(l1as))
            .collect();
        lost.len() as u64 + l1as.saturating_sub(first_death)
    }

    /// Every L1 accept given to the HLT became one event (or, with applications, is counted
    /// lost by number or was built by an HLT application that did not report), and every
    /// ROB built one fragment for each of its card's L1 accepts.
    pub fn nothing_silently_dropped(&self) -> bool {
        let s = &self.settings;
        let accounted = self.apps.as_ref().map_or(0, |a| {
            a.lost_events.len() as u64 + a.events_of_unreported_hlts
        });
        let card_l1as = |source_id: u32| {
            let card = (source_id - s.first_rob_source_id) / u32::from(s.robs_per_card.max(1));
            let card = self.cards.iter().find(|c| u32::from(c.card) == card);
            card.map(|c| c.l1as)
        };
        self.hlt.events + accounted == self.l1as_to_hlt
            && self
                .robs
                .iter()
                .all(|r| card_l1as(r.source_id) == Some(r.aggregator.fragments))
    }

    /// Every check against the truth holds (false when the truth is not known).
    pub fn truth_ok(&self) -> bool {
        self.truth_known
            && self.truth_checks().iter().all(|c| c.ok)
            && self.unexpected().iter().all(|(_, n)| *n == 0)
            && self.hlt.events_with_incomplete_robs == self.expected_events_with_incomplete_robs()
            && self.nothing_silently_dropped()
            && self.sample_errors == 0
    }

    pub fn chunks(&self) -> u64 {
        self.sum(|r| r.decoder.chunks)
    }
}
