//! The CMS-style event builder as applications over ZeroMQ, booted by the same launcher as
//! the chain's (`swdaq run --config configs/evb-apps.toml`):
//!
//! ```text
//!  evm (readout unit 0, sees the trigger) ──assignments + its super-fragment, end of run──▶ bu-J
//!     ▲ └────────────────────── requests for K events, events settled ◀───────────────────┘ │
//!  ru-K ◀──────────────────────────── fragment requests ────────────────────────────────────┘
//!     └─────────────────────────────── super-fragments ────────────────────────────────────▶ bu-J
//! ```
//!
//! Each application runs the same unit loop as the one-process builder (`swdaq_evb::evm`,
//! `ru`, `bu`) behind the dataflow's transport traits: a thread demultiplexes its inbox into a
//! local channel and watches its peers' heartbeats. Sends to builder units never wait (a
//! builder unit is sent only what it asked for, so a full queue means it has gone: the
//! event manager then counts its unsettled events lost by number); requests to readout units
//! never wait either (a dead readout unit shows as missing, by name, in each event). After
//! its loop each application waits for `stop`, so a run ended by `max_events` still stops in
//! order: event manager, builder units, readout units.

pub mod bench;
pub mod bu;
pub mod evm;
pub mod ru;

use super::config::EvbRunConfig;
use crate::runtime::app::TopologyConfig;
use crate::runtime::app::{AppContext, Clock};
use crate::runtime::monitoring::Monitoring;
use crate::runtime::stdio as control;
use crate::runtime::topology::AppKind;
use crate::runtime::topology::TopologySection;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::Outbox;
use swdaq_evb::bu::BuReport;
use swdaq_evb::check::FedCounts;
use swdaq_evb::evm::EvmReport;
use swdaq_evb::files::WriterCounts;
use swdaq_evb::message::ToBu;
use swdaq_evb::producer::Producer;
use swdaq_evb::ru::RuReport;
use swdaq_net::{Heartbeat, Immediate, Inlet};
use swdaq_sim::fed::FedFaultKind;

pub type EvbContext = AppContext<EvbRunConfig>;

impl TopologyConfig for EvbRunConfig {
    fn topology(&self) -> &TopologySection {
        &self.topology
    }
}

/// One event-builder application's part of the summary.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct EvbAppReport {
    pub evm: Option<EvmReport>,
    pub ru: Option<RuReport>,
    pub bu: Option<BuReport>,
    /// A builder unit's writer: its counts and, if it failed, why.
    pub writer: Option<(WriterCounts, Option<String>)>,
    /// Per FED read: (readout unit, FED id, counts).
    pub feds: Vec<(u16, u16, FedCounts)>,
    /// Faults the FED emulators injected (the truth).
    pub injected: Vec<((u16, FedFaultKind), u64)>,
    /// Messages the inbox refused, by reason.
    pub refused_messages: BTreeMap<String, u64>,
    pub thread_cpu: Vec<(String, f64)>,
    /// Seconds the shares are of.
    pub seconds: f64,
}

impl EvbAppReport {
    fn read_from(&mut self, ru: u16, producer: &Producer) {
        self.feds = producer
            .feds()
            .iter()
            .zip(producer.fed_counts())
            .map(|(&fed, &c)| (ru, fed, c))
            .collect();
        self.injected = producer.injected().iter().map(|(&k, &n)| (k, n)).collect();
    }
}

/// Runs the application `ctx` names.
pub fn run(ctx: &EvbContext) -> anyhow::Result<EvbAppReport> {
    match ctx.spec.kind {
        AppKind::Evm => evm::run(ctx),
        AppKind::Ru => ru::run(ctx),
        AppKind::Bu => bu::run(ctx),
        kind => anyhow::bail!(
            "{}: {} applications belong to the chain's run, not the event builder's",
            ctx.spec.name,
            kind.name()
        ),
    }
}

/// How often the demultiplexers look at their peers' liveness and at `done`.
const DEMUX_WAKE: Duration = Duration::from_millis(20);

/// Waits for the launcher's `stop` (or the end of its input).
fn wait_for_stop(ctx: &EvbContext) {
    while !ctx.commands.wait_for_stop(Duration::from_millis(100)) {}
}

/// This application's position among those of its kind.
fn position(ctx: &EvbContext) -> u16 {
    ctx.ids_of(ctx.spec.kind)
        .iter()
        .position(|&id| id == ctx.me)
        .expect("an application is among those of its kind") as u16
}

/// A readout unit's application (the event manager is readout unit `index` 0) once the run
/// has started: its monitoring, inbox, a never-waiting outbox to every builder unit with
/// their heartbeat, and its FEDs.
struct ReadoutUnit {
    monitoring: Monitoring,
    inlet: Inlet,
    bu_ids: Vec<u32>,
    to_bus: Vec<Box<dyn Outbox<ToBu>>>,
    _heartbeat: Heartbeat,
    clock: Clock,
    producer: Producer,
}

/// Sets readout unit `index` up, says ready and waits for the start; `None`: stopped first.
fn start_readout_unit(ctx: &EvbContext, index: u16) -> anyhow::Result<Option<ReadoutUnit>> {
    let config = &ctx.config.evb;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let bu_ids = ctx.ids_of(AppKind::Bu);
    let bus = ctx.outlets_to(&bu_ids)?;
    let heartbeat = ctx.connect_and_heartbeat(bus.clone())?;
    control::say_ready()?;
    let clock = Clock::start();
    if !ctx.commands.wait_for_start() {
        return Ok(None);
    }
    let producer = swdaq_evb::input::open(config, index as usize, Instant::now())
        .with_context(|| format!("readout unit {index}'s FEDs"))?;
    Ok(Some(ReadoutUnit {
        monitoring,
        inlet,
        bu_ids,
        to_bus: bus
            .into_iter()
            .map(|o| Box::new(Immediate(o)) as Box<dyn Outbox<ToBu>>)
            .collect(),
        _heartbeat: heartbeat,
        clock,
        producer,
    }))
}

/// Ends an application's report: its threads' CPU over the run, then monitoring stops.
fn finish(
    ctx: &EvbContext,
    mut report: EvbAppReport,
    clock: &Clock,
    monitoring: Monitoring,
) -> EvbAppReport {
    (report.seconds, report.thread_cpu) = clock.cpu(&ctx.spec.name);
    monitoring.stop();
    report
}
