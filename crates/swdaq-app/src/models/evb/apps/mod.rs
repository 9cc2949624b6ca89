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
use crate::runtime::app::KindBody;
use crate::runtime::topology::AppKind;
pub use unit::{EvbAppReport, EvbContext};

/// The event builder's application kinds.
pub const KINDS: &[KindBody<EvbRunConfig, EvbAppReport>] = &[
    (AppKind::Evm, evm::run),
    (AppKind::Ru, ru::run),
    (AppKind::Bu, bu::run),
];
