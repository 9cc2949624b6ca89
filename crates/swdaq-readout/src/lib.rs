//! Link readout: sources, zero-copy latency buffers, continuity checks and data requests.

pub mod checks;
pub mod link_format;
pub mod request;
pub mod ring;
