//! The readout's metric blocks, each defined beside what it counts so that no component
//! imports this module: a link's ([`LinkMetrics`], published by the ingest loop every
//! [`PUBLISH_EVERY`] frames, in `link`), a request server's ([`ServerMetrics`], in `server`)
//! and a burst recorder's ([`RecorderMetrics`], in `record`). Named here too, for the
//! applications that register them.

pub use crate::link::{LinkMetrics, PUBLISH_EVERY};
pub use crate::record::RecorderMetrics;
pub use crate::server::ServerMetrics;
