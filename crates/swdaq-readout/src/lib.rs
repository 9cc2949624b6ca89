//! Link readout: sources, zero-copy latency buffers, continuity checks and data requests.
//!
//! A link is a [`link::LinkShared`] (its latency buffer and error log) fed by one
//! [`link::Ingest`] loop on its own thread, which pulls frames from a [`source::FrameSource`]
//! straight into buffer slots, checks them ([`checks`]), publishes them and lets an observer
//! (the hit finder) read them in place. Request servers answer [`request::DataRequest`]s from
//! pinned views of the buffer without ever blocking ingest.

pub mod bench;
pub mod board;
pub mod checks;
pub mod decoded;
pub mod hit_finding;
pub mod link;
pub mod raw_inspect;
pub mod record;
pub mod replay;
pub mod request;
pub mod ring;
pub mod roi;
pub mod server;
pub mod source;
pub mod stream_copy;
pub mod thread;
pub mod tp_buffer;
pub mod udp;
