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
pub mod unit;

use super::config::EvbRunConfig;
use crate::runtime::app::KindSpec;
use crate::runtime::dqm_stream::StreamKeys;
pub use unit::{EvbAppReport, EvbContext};

/// The event manager, readout unit 0 (it sees the trigger).
pub const EVM: &str = "evm";
/// A readout unit other than the event manager (1.., in topology order).
pub const RU: &str = "ru";
/// A builder unit (0.., in topology order).
pub const BU: &str = "bu";

/// A builder unit's event stream for online monitoring (`event_stream`: a ZeroMQ PUB
/// endpoint, or "") and every how many events it publishes (`event_stream_every`; default:
/// `[dqm] sample_every` with `[dqm]`, else 1): each event it hands its writer, one message of
/// one frame, the event as written (FRD v6).
pub const EVENT_STREAMS: StreamKeys = StreamKeys::new(
    BU,
    ["event_stream", "event_stream_every"],
    "events",
    "only builder units publish events",
);

/// The event builder's application kinds: one `evm`, `readout_units - 1` `ru` and
/// `builder_units` `bu`.
pub const KINDS: &[KindSpec<EvbRunConfig, EvbAppReport>] = &[
    KindSpec {
        name: EVM,
        fields: &[],
        count: |_| (1, 1),
        run: evm::run,
    },
    KindSpec {
        name: RU,
        fields: &[],
        count: |c| {
            let rus = c.evb.rus.len().saturating_sub(1);
            (rus, rus)
        },
        run: ru::run,
    },
    KindSpec {
        name: BU,
        fields: &[EVENT_STREAMS.stream, EVENT_STREAMS.every],
        count: |c| (c.evb.builder_units as usize, c.evb.builder_units as usize),
        run: bu::run,
    },
];

impl crate::runtime::model::Applications for EvbRunConfig {
    type Report = EvbAppReport;
    type Message = crate::models::evb::wire::EvbMessage;
    const KINDS: &'static [KindSpec<Self, Self::Report>] = KINDS;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::dqm_stream::checks::every_stream_is_required;

    /// With `[dqm]`, a builder unit without an event stream is refused by name, as is a
    /// stream on another kind or a zero `event_stream_every`; with every builder unit's
    /// stream the topology is valid and the streams are reached where their units are.
    #[test]
    fn dqm_in_a_topology_needs_every_builder_unit_s_event_stream() {
        let shipped = include_str!("../../../../../../configs/evb-apps.toml");
        let mut config = crate::models::evb::config::parse(shipped).unwrap();
        config.dqm.enabled = true;
        every_stream_is_required(
            &config,
            &EVENT_STREAMS,
            |c| &mut c.topology,
            |c| c.validate(),
            7390,
        );
    }
}
