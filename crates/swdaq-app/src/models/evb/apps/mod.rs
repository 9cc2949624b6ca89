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
use crate::runtime::topology::Field;
pub use unit::{EvbAppReport, EvbContext};

/// The event manager, readout unit 0 (it sees the trigger).
pub const EVM: &str = "evm";
/// A readout unit other than the event manager (1.., in topology order).
pub const RU: &str = "ru";
/// A builder unit (0.., in topology order).
pub const BU: &str = "bu";

/// A builder unit's event stream for online monitoring (a ZeroMQ PUB endpoint), or "".
pub const EVENT_STREAM: Field = Field {
    key: "event_stream",
    elsewhere: "only builder units publish events",
};
/// Publish every Nth built event on the stream (default: `[dqm] sample_every` with `[dqm]`,
/// else 1).
pub const EVENT_STREAM_EVERY: Field = Field {
    key: "event_stream_every",
    elsewhere: "only builder units publish events",
};
/// The builder units' event streams: each publishes every Nth event it hands its writer,
/// one message of one frame, the event as written (FRD v6).
pub const EVENT_STREAMS: StreamKeys = StreamKeys {
    kind: BU,
    stream: EVENT_STREAM,
    every: EVENT_STREAM_EVERY,
    items: "events",
};

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
        fields: &[EVENT_STREAM, EVENT_STREAM_EVERY],
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
    use crate::runtime::dqm_stream::SampleStream;

    /// With `[dqm]`, a builder unit without an event stream is refused by name, as is a
    /// stream on another kind or a zero `event_stream_every`; with every builder unit's
    /// stream the topology is valid and the streams are reached where their units are.
    #[test]
    fn dqm_in_a_topology_needs_every_builder_unit_s_event_stream() {
        let shipped = include_str!("../../../../../../configs/evb-apps.toml");
        let mut config = crate::models::evb::config::parse(shipped).unwrap();
        config.dqm.enabled = true;
        let e = config.validate().unwrap_err().to_string();
        assert!(
            e.contains("topology.apps.event_stream: bu-0") && e.contains("[dqm]"),
            "{e}"
        );
        let bus: Vec<usize> = (0..config.topology.apps.len())
            .filter(|&i| config.topology.apps[i].kind == BU)
            .collect();
        for (n, &i) in bus.iter().enumerate() {
            let stream = format!("tcp://*:{}", 7390 + n);
            (config.topology.apps[i].fields).insert(EVENT_STREAM.key.into(), stream.into());
        }
        config.validate().unwrap();
        let streams = EVENT_STREAMS.streams(&config.topology).unwrap();
        assert_eq!(
            streams,
            bus.iter()
                .enumerate()
                .map(|(n, &i)| SampleStream {
                    app: config.topology.apps[i].name.clone(),
                    endpoint: format!("tcp://127.0.0.1:{}", 7390 + n),
                })
                .collect::<Vec<_>>()
        );
        let mut zero = config.clone();
        (zero.topology.apps[bus[0]].fields).insert(EVENT_STREAM_EVERY.key.into(), 0.into());
        let e = zero.validate().unwrap_err().to_string();
        assert!(e.contains("event_stream_every: must be >= 1"), "{e}");
        let mut elsewhere = config.clone();
        (elsewhere.topology.apps[0].fields).insert(EVENT_STREAM.key.into(), "tcp://x:1".into());
        let e = elsewhere.validate().unwrap_err().to_string();
        assert!(e.contains("only builder units publish events"), "{e}");
        // Without [dqm] a builder unit needs no stream.
        let shipped = crate::models::evb::config::parse(shipped).unwrap();
        assert!(EVENT_STREAMS.streams(&shipped.topology).unwrap().is_empty());
    }
}
