//! What can go wrong with a plugin: refused at load ([`LoadError`], one line each) or a bad
//! call ([`PluginError`], counted per instance in [`ErrorCounts`]).

use std::path::PathBuf;
use std::sync::Arc;

/// Why a plugin was not loaded or an instance not made. Its `Display` is one line naming the
/// file and the reason, the way the operator sees it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {}: no such file", path.display())]
    Missing { path: PathBuf },
    #[error("plugin {}: cannot be loaded: {reason}", path.display())]
    NotLoadable { path: PathBuf, reason: String },
    #[error("plugin {}: not a swdaq plugin (no symbol {symbol})", path.display())]
    NoEntrySymbol { path: PathBuf, symbol: &'static str },
    #[error("plugin {}: not a swdaq plugin ({symbol} returned NULL)", path.display())]
    NullDescriptor { path: PathBuf, symbol: &'static str },
    #[error("plugin {}: ABI version mismatch: got {got}, want {want}", path.display())]
    AbiMismatch { path: PathBuf, got: u32, want: u32 },
    #[error("plugin {}: descriptor too small: {got} bytes, version 1 has {want}", path.display())]
    DescriptorTooSmall {
        path: PathBuf,
        got: u32,
        want: usize,
    },
    #[error("plugin {}: {what} missing from its descriptor", path.display())]
    MissingField { path: PathBuf, what: &'static str },
    #[error("plugin {}: does not provide {capability}", path.display())]
    NoCapability {
        path: PathBuf,
        capability: &'static str,
    },
    #[error("plugin {}: create failed: {message}", path.display())]
    CreateFailed { path: PathBuf, message: String },
}

/// Which check a plugin's call failed: the plugin said so itself, or the host found a value
/// it returned impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The plugin returned `SWDAQ_ERROR`; its `last_error` message.
    #[error("reported: {0}")]
    Reported(String),
    #[error("returned unknown status {0}")]
    UnknownStatus(i32),
    #[error("returned {count} items with room for {capacity}")]
    CountAboveCapacity { count: usize, capacity: usize },
    #[error("consumed {consumed} bytes of a {len}-byte block")]
    ConsumedAboveBlock { consumed: usize, len: usize },
    #[error("fragment {index} at {offset}+{length} is outside the {consumed} bytes consumed")]
    FragmentOutOfBlock {
        index: usize,
        offset: u64,
        length: u64,
        consumed: usize,
    },
    #[error("fragment {index} has unknown flags {flags:#x}")]
    UnknownFlags { index: usize, flags: u32 },
    #[error("asked for more room without making progress")]
    NoProgress,
    #[error("payload of {len} bytes in a {capacity}-byte buffer")]
    PayloadAboveCapacity { len: usize, capacity: usize },
    #[error("asked for {needed} bytes, more than the limit of {limit}")]
    PayloadAboveLimit { needed: usize, limit: usize },
    #[error("asked for more room twice")]
    NeedRoomTwice,
    #[error("{done} fragments done of {count}")]
    DoneAboveCount { done: usize, count: usize },
    #[error("said done after {done} fragments of {count}")]
    DoneBelowCount { done: usize, count: usize },
    #[error(
        "decision {index} has accept = {accept} (0 or 1; {} means not written)",
        u32::MAX
    )]
    BadDecision { index: usize, accept: u32 },
}

/// One failed call of a plugin instance: the plugin's name and what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin}: {kind}")]
pub struct PluginError {
    pub plugin: Arc<str>,
    pub kind: ErrorKind,
}

/// Failed calls of one instance by kind: plain counts the caller reads and publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    /// `SWDAQ_ERROR` returns (for a Rust plugin, also its caught panics).
    pub reported: u64,
    /// Status codes the ABI does not have.
    pub unknown_status: u64,
    /// Counts above the capacity given, bytes consumed beyond the block, fragments done
    /// beyond the batch.
    pub count_out_of_range: u64,
    /// Fragments lying (partly) outside the bytes consumed.
    pub fragment_out_of_block: u64,
    /// Fragments with swdaq flag bits the ABI does not define.
    pub unknown_flags: u64,
    /// "Need room" answers that made no progress, came twice or asked beyond the limit.
    pub bad_room_request: u64,
    /// Payloads longer than their buffer.
    pub payload_out_of_range: u64,
    /// Decisions other than accept or reject.
    pub bad_decision: u64,
}

impl ErrorCounts {
    /// Counts one error of `kind`.
    pub fn count(&mut self, kind: &ErrorKind) {
        let counter = match kind {
            ErrorKind::Reported(_) => &mut self.reported,
            ErrorKind::UnknownStatus(_) => &mut self.unknown_status,
            ErrorKind::CountAboveCapacity { .. }
            | ErrorKind::ConsumedAboveBlock { .. }
            | ErrorKind::DoneAboveCount { .. }
            | ErrorKind::DoneBelowCount { .. } => &mut self.count_out_of_range,
            ErrorKind::FragmentOutOfBlock { .. } => &mut self.fragment_out_of_block,
            ErrorKind::UnknownFlags { .. } => &mut self.unknown_flags,
            ErrorKind::NoProgress
            | ErrorKind::NeedRoomTwice
            | ErrorKind::PayloadAboveLimit { .. } => &mut self.bad_room_request,
            ErrorKind::PayloadAboveCapacity { .. } => &mut self.payload_out_of_range,
            ErrorKind::BadDecision { .. } => &mut self.bad_decision,
        };
        *counter += 1;
    }

    /// Every error counted.
    pub fn total(&self) -> u64 {
        self.reported
            + self.unknown_status
            + self.count_out_of_range
            + self.fragment_out_of_block
            + self.unknown_flags
            + self.bad_room_request
            + self.payload_out_of_range
            + self.bad_decision
    }
}
