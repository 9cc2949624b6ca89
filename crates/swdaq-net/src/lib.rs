//! swdaq between processes and hosts, over ZeroMQ. Without the default `zmq` feature only
//! the wire format is built (for its fuzz target).
//!
//! * [`wire`]: the dataflow's messages on the wire — a fixed header (magic, protocol
//!   version, frame count, sender) and a `postcard` body; fragments' bytes travel as a second
//!   frame without a copy. A peer speaking another version, or garbage, is refused and counted.
//! * [`socket`]: one [`Inlet`] (PULL) per application, one [`Outlet`] (PUSH) per peer it
//!   sends to; outlets implement the dataflow's `Outbox`, so the node loops run unchanged.
//! * [`liveness`]: heartbeats on every outlet, and peers declared gone after a silence.
//! * [`bench`]: fragment throughput through this transport against bare ZeroMQ.

#[cfg(feature = "zmq")]
pub mod bench;
#[cfg(feature = "zmq")]
pub mod liveness;
#[cfg(feature = "zmq")]
pub mod socket;
pub mod wire;

#[cfg(feature = "zmq")]
pub use liveness::{Heartbeat, Liveness};
#[cfg(feature = "zmq")]
pub use socket::{
    Delivery, Immediate, Inlet, InletCounts, NetError, NetOptions, Outlet, SendError,
};
pub use wire::{AppId, Message, PROTOCOL_VERSION, WireError};
