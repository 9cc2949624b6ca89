//! The ATLAS-style SW ROD as applications over ZeroMQ, booted by the same launcher as the
//! other models (`swdaq run --config configs/swrod-apps.toml`):
//!
//! ```text
//!  hltsv (the central trigger's L1 accepts) ──L1 accepts, by credit──▶ hlt-J ──full events──▶ files
//!     │   ▲ └──────────────────── requests for more, events settled ───┘  │ ▲
//!     │   └ pause/resume (run control)                     ROB requests │ │ ROB fragments
//!     └──L1A horizon──▶ swrod-K (FELIX cards, a SW ROD thread per ROB) ◀──┘ │
//!                            └──────────────────────────────────────────────┘
//! ```
//!
//! A `swrod` application runs its FELIX cards, which follow the L1A clock themselves as a
//! detector's front ends follow TTC (same rate and seeds as in one process, so the L1 IDs
//! the supervisor gives out and the chunks the cards send agree by construction), one SW ROD
//! thread per ROB and each ROB's request server; the network only carries requests in and
//! answers out (`rob_server`). The `hltsv` application is the HLT supervisor: it takes the
//! L1 accepts from the L1A clock and gives each to an HLT application with credit (when none
//! has, the trigger is busy: the clock stands still), and tells the `swrod` applications how
//! far their cards may run ahead of it (the L1A horizon: a pause, a busy HLT farm or the
//! supervisor's death holds the cards, as the central trigger's busy holds the front ends).
//! An `hlt` application asks every ROB for each L1 accept it is given (`rob_client`), builds
//! the full event and stores the accepted ones under `<run.output_dir>/<its name>/`, with
//! the same HLT and storage code as the one-process SW ROD.
//!
//! Faults: an HLT application that dies leaves the events it was given and had not settled
//! lost, by number (the summary reads back its closed files so the count is exact, as the
//! event builder does for a builder unit); a `swrod` application that dies shows as its ROBs
//! missing, named, in every later event (its requests cannot be delivered); a peer with
//! garbage or another protocol version is refused and counted by every inbox. The launcher
//! stops them supervisor, HLT applications, `swrod` applications.

pub mod bench;
mod hlt;
mod hltsv;
mod l1a_source;
pub(super) mod merge;
mod rob_client;
mod rob_server;
mod swrod;

use super::config::SwrodRunConfig;
use super::hlt::IncompleteExample;
use super::report::{CardResult, HltsvReport, RodResult};
use crate::runtime::app::{AppContext, KindSpec, check_kinds};
use crate::runtime::dqm_stream::{Published, StreamKeys};
use crate::runtime::topology::{App, Field};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use swdaq_sim::felix::FelixFault;
use swdaq_swrod::consumers::RequestCounts;
use swdaq_swrod::files::StoredFile;
use swdaq_swrod::hlt::HltCounts;

pub(super) type SwrodContext = AppContext<SwrodRunConfig>;

/// How often the network threads look at their peers' liveness and at their end.
const NET_WAKE: Duration = Duration::from_millis(20);

/// One SW ROD application's part of the summary.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SwrodAppReport {
    /// A `swrod` application's cards, with the faults each injected (the truth).
    pub cards: Vec<(CardResult, Vec<FelixFault>)>,
    /// Seconds from the start to its cards' last L1 accept.
    pub readout_seconds: f64,
    pub robs: Vec<RodResult>,
    pub requests: Vec<RequestCounts>,
    pub samples: u64,
    pub sample_errors: u64,
    /// A `swrod` application fed by FELIX servers whose generator's truth was not found.
    pub truth_unknown: bool,
    pub hltsv: Option<HltsvReport>,
    pub hlt: Option<HltAppReport>,
    /// Messages the inbox refused, by reason.
    pub refused_messages: BTreeMap<String, u64>,
    /// Messages a peer did not take, by what they were.
    pub undelivered: BTreeMap<String, u64>,
    pub thread_cpu: Vec<(String, f64)>,
    /// Seconds the shares are of.
    pub seconds: f64,
}

/// An HLT application's events and files.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HltAppReport {
    pub counts: HltCounts,
    pub incomplete_examples: Vec<IncompleteExample>,
    pub cpu_s: f64,
    pub stored_events: u64,
    /// Stored events that carry status (a ROB missing, or one missing e-links).
    pub stored_flagged_events: u64,
    pub stored_bytes: u64,
    pub unwritten_events: u64,
    pub files: Vec<StoredFile>,
    pub storage_error: Option<String>,
    /// Its `event_stream`: events published and dropped (none without one).
    #[serde(default)]
    pub events_published: Option<Published>,
}

/// FELIX cards (those in its `cards`), a SW ROD thread per ROB, the ROBs' request servers.
pub const SWROD: &str = "swrod";
/// The HLT supervisor: gives each L1 accept to an HLT application by credit.
pub const HLTSV: &str = "hltsv";
/// An HLT application (an HLT node's data collection and its storage), 0.. in topology order.
pub const HLT: &str = "hlt";

/// A `swrod` application's FELIX cards (`[u16]`).
pub const CARDS: Field = Field {
    key: "cards",
    elsewhere: "only swrod applications have FELIX cards",
};

/// An HLT application's event stream for online monitoring (`event_stream`: a ZeroMQ PUB
/// endpoint, or "") and every how many events it publishes (`event_stream_every`; default:
/// `[dqm] sample_every` with `[dqm]`, else 1): each full event it stores, one message of one
/// frame, the event as stored (eformat v5).
pub const EVENT_STREAMS: StreamKeys = StreamKeys::new(
    HLT,
    ["event_stream", "event_stream_every"],
    "events",
    "only hlt applications publish events",
);

/// The SW ROD's application kinds.
pub(super) const KINDS: &[KindSpec<SwrodRunConfig, SwrodAppReport>] = &[
    KindSpec {
        name: SWROD,
        fields: &[CARDS],
        count: |_| (1, usize::MAX),
        run: swrod::run,
    },
    KindSpec {
        name: HLTSV,
        fields: &[],
        count: |_| (1, 1),
        run: hltsv::run,
    },
    KindSpec {
        name: HLT,
        fields: &[EVENT_STREAMS.stream, EVENT_STREAMS.every],
        count: |_| (1, usize::MAX),
        run: hlt::run,
    },
];

impl crate::runtime::model::Applications for SwrodRunConfig {
    type Report = SwrodAppReport;
    type Message = crate::models::swrod::wire::SwrodMessage;
    const KINDS: &'static [KindSpec<Self, Self::Report>] = KINDS;
}

/// Checks the SW ROD's topology: its kinds, and each of the run's FELIX cards read out by
/// exactly one `swrod` application.
pub(super) fn check_topology(config: &SwrodRunConfig) -> anyhow::Result<()> {
    check_kinds(config, KINDS)?;
    EVENT_STREAMS.check(&config.topology, config.dqm.enabled)?;
    if !config.topology.is_distributed() {
        return Ok(());
    }
    let cards = config.swrod.cards;
    let mut covered = std::collections::BTreeSet::new();
    for (_, a) in config.topology.of_kind(SWROD) {
        for card in cards_of(a)? {
            anyhow::ensure!(
                card < cards,
                "invalid configuration: topology.apps.cards: {}: card {card} does not exist ({cards} cards)",
                a.name
            );
            anyhow::ensure!(
                covered.insert(card),
                "invalid configuration: topology.apps.cards: card {card} is read out twice"
            );
        }
    }
    let unread: Vec<u16> = (0..cards).filter(|c| !covered.contains(c)).collect();
    anyhow::ensure!(
        unread.is_empty(),
        "invalid configuration: topology.apps.cards: cards {unread:?} are read out by no swrod application"
    );
    Ok(())
}

/// A `swrod` application's FELIX cards.
pub(super) fn cards_of(app: &App) -> anyhow::Result<Vec<u16>> {
    app.field(CARDS.key)
}

/// Where HLT application `name` stores its events.
pub(super) fn hlt_directory(config: &SwrodRunConfig, name: &str) -> std::path::PathBuf {
    config.run.output_dir.join(name)
}

/// The ROBs (source ids) of the `swrod` application `app`, in ROB order.
fn robs_of(config: &SwrodRunConfig, cards: &[u16]) -> Vec<u32> {
    let s = &config.swrod;
    cards
        .iter()
        .flat_map(|&c| {
            (0..s.robs_per_card).map(move |r| s.rob_config(c, r, config.run.number).source_id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::dqm_stream::checks::every_stream_is_required;

    /// With `[dqm]`, an HLT application without an event stream is refused by name, as is a
    /// stream on another kind or a zero `event_stream_every`; with every HLT application's
    /// stream the topology is valid and the streams are reached where their applications are.
    #[test]
    fn dqm_in_a_topology_needs_every_hlt_application_s_event_stream() {
        let shipped = include_str!("../../../../../../configs/swrod-apps.toml");
        let mut config = crate::models::swrod::config::parse(shipped).unwrap();
        config.dqm.enabled = true;
        every_stream_is_required(
            &config,
            &EVENT_STREAMS,
            |c| &mut c.topology,
            |c| c.validate(),
            7395,
        );
    }
}
