//! What the event builder's applications share: their report, their context, how a readout
//! unit (the event manager included) comes up, and how an application ends.

use super::super::config::EvbRunConfig;
use crate::models::evb::wire::EvbMessage;
use crate::runtime::app::{AppContext, Clock};
use crate::runtime::dqm_stream::Published;
use crate::runtime::monitoring::Monitoring;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::Outbox;
use swdaq_evb::bu::BuReport;
use swdaq_evb::check::FedCounts;
use swdaq_evb::evm::EvmReport;
use swdaq_evb::farm::FarmReport;
use swdaq_evb::files::WriterCounts;
use swdaq_evb::message::ToBu;
use swdaq_evb::pause::TriggerClock;
use swdaq_evb::producer::Producer;
use swdaq_evb::ru::RuReport;
use swdaq_net::{Heartbeat, Immediate, Inlet};
use swdaq_sim::fed::FedFaultKind;

pub type EvbContext = AppContext<EvbRunConfig>;

/// One event-builder application's part of the summary.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct EvbAppReport {
    pub evm: Option<EvmReport>,
    pub ru: Option<RuReport>,
    pub bu: Option<BuReport>,
    /// A builder unit's writer: its counts and, if it failed, why.
    pub writer: Option<(WriterCounts, Option<String>)>,
    /// A builder unit's filter-farm stand-in (`[evb.farm]`), over its consumers.
    #[serde(default)]
    pub farm: Option<FarmReport>,
    /// Per FED read: (readout unit, FED id, counts).
    pub feds: Vec<(u16, u16, FedCounts)>,
    /// Faults the FED emulators injected (the truth).
    pub injected: Vec<((u16, FedFaultKind), u64)>,
    /// Messages the inbox refused, by reason.
    pub refused_messages: BTreeMap<String, u64>,
    /// A builder unit's `event_stream`: events published and dropped (none without one).
    #[serde(default)]
    pub events_published: Option<Published>,
    pub thread_cpu: Vec<(String, f64)>,
    /// Seconds the shares are of.
    pub seconds: f64,
}

impl EvbAppReport {
    pub(super) fn read_from(&mut self, ru: u16, producer: &Producer) {
        self.feds = producer
            .feds()
            .iter()
            .zip(producer.fed_counts())
            .map(|(&fed, &c)| (ru, fed, c))
            .collect();
        self.injected = producer.injected().iter().map(|(&k, &n)| (k, n)).collect();
    }
}

/// How often the demultiplexers look at their peers' liveness and at `done`.
pub(super) const DEMUX_WAKE: Duration = Duration::from_millis(20);

/// This application's position among those of its kind.
pub(super) fn position(ctx: &EvbContext) -> u16 {
    ctx.ids_of(&ctx.spec.kind)
        .iter()
        .position(|&id| id == ctx.me)
        .expect("an application is among those of its kind") as u16
}

/// A readout unit's application (the event manager is readout unit `index` 0) once the run
/// has started: its monitoring, inbox, a never-waiting outbox to every builder unit with
/// their heartbeat, and its FEDs.
pub(super) struct ReadoutUnit {
    pub(super) monitoring: Monitoring,
    pub(super) inlet: Inlet<EvbMessage>,
    pub(super) bu_ids: Vec<u32>,
    pub(super) to_bus: Vec<Box<dyn Outbox<ToBu>>>,
    pub(super) _heartbeat: Heartbeat,
    pub(super) clock: Clock,
    pub(super) producer: Producer,
}

/// Sets readout unit `index` up, says ready and waits for the start; `None`: stopped first.
pub(super) fn start_readout_unit(
    ctx: &EvbContext,
    index: u16,
) -> anyhow::Result<Option<ReadoutUnit>> {
    let config = &ctx.config.builder();
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let bu_ids = ctx.ids_of(super::BU);
    let bus = ctx.outlets_to::<EvbMessage>(&bu_ids)?;
    let heartbeat = ctx.connect_and_heartbeat(bus.clone())?;
    let (clock, started) = ctx.ready()?;
    if !started {
        return Ok(None);
    }
    let trigger_clock = TriggerClock::new(Instant::now());
    let producer = swdaq_evb::input::open(config, index as usize, trigger_clock)
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
