//! What the SW ROD's applications send each other, as plain `serde` data for `swdaq-net`'s
//! wire: the HLT supervisor gives L1 accepts to HLT applications by credit ([`ToHlt`],
//! [`HltRequest`]) and tells the SW ROD applications how far their cards may run ahead (the
//! L1A horizon, on the wire itself); an HLT application asks the SW ROD applications for ROB
//! fragments ([`RobAsk`]) and they answer ([`RobAnswer`]), each fragment found travelling as
//! a frame of its own after the answers, not inside them.

use crate::consumers::RobRequestStatus;
use crate::trigger::L1Accept;
use serde::{Deserialize, Serialize};

/// An HLT application asks the HLT supervisor for `count` more events (it has room for them;
/// 0 when it only reports what it has settled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HltRequest {
    pub hlt: u16,
    pub count: u32,
    /// Events (global ids) settled since the last request: built and not accepted, or stored
    /// in a closed file. What an HLT application that dies was given and had not settled is
    /// what it lost, by number.
    pub settled: Vec<u64>,
}

/// What an HLT application hears from the HLT supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToHlt {
    /// L1 accepts, batched: one message per event costs more than the event's requests.
    Assigned(Vec<L1Accept>),
    /// The supervisor gives out nothing more: finish what is in hand.
    EndOfRun,
}

/// An HLT application asks for ROB `source_id`'s fragment of `l1_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RobAsk {
    pub source_id: u32,
    pub l1_id: u32,
}

/// A ROB's request server's answer; when `status` is found, the fragment's bytes travel as
/// the next frame of the message (in the order of the answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RobAnswer {
    pub source_id: u32,
    pub l1_id: u32,
    pub status: RobRequestStatus,
    /// The fragment has every e-link's chunk.
    pub complete: bool,
}

/// Most requests or answers one message carries.
pub const MAX_BATCH: usize = 64;

/// The frames that follow a message carrying `answers`: one per fragment found.
pub fn frames_of(answers: &[RobAnswer]) -> usize {
    answers
        .iter()
        .filter(|a| a.status == RobRequestStatus::Found)
        .count()
}
