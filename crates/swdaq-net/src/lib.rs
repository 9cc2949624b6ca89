//! swdaq between processes and hosts, over ZeroMQ. Without the default `zmq` feature only
//! the wire format is built (for its fuzz target).
//!
//! * [`wire`]: messages on the wire — a fixed header (magic, protocol version, frame count,
//!   sender, model and model message version) and a `postcard` body; each model owns its
//!   messages (a [`WireMessage`] enum), the framework only its heartbeat; fragments' bytes
//!   travel as frames of their own without a copy. A peer speaking another version, another
//!   model's messages, or garbage, is refused and counted.
//! * [`socket`]: one [`Inlet`] (PULL) per application, one [`Outlet`] (PUSH) per peer it
//!   sends to, both typed by the model's messages; outlets implement the dataflow's `Outbox`,
//!   so the node loops run unchanged.
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
pub use wire::{AppId, Framework, PROTOCOL_VERSION, WireError, WireMessage};
