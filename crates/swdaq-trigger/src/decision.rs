//! What the trigger decides: a trigger number, a time, why (type bits), and which data to read.

use swdaq_format::SourceId;

/// Bits of [`TriggerDecision::trigger_type`] (and of the record header's trigger type): one per
/// kind of candidate; a decision merged from several candidates carries all their bits.
pub mod trigger_type {
    pub const PERIODIC: u64 = 1 << 0;
    pub const RANDOM: u64 = 1 << 1;
    pub const MULTIPLICITY: u64 = 1 << 2;
    pub const ADC_SUM: u64 = 1 << 3;
    pub const TRACK: u64 = 1 << 4;

    /// Each bit and its readable name.
    pub const NAMED: [(u64, &str); 5] = [
        (PERIODIC, "periodic"),
        (RANDOM, "random"),
        (MULTIPLICITY, "multiplicity"),
        (ADC_SUM, "adc-sum"),
        (TRACK, "track"),
    ];

    /// Readable names of the bits set in `bits`, for logs and summaries.
    pub fn names(bits: u64) -> Vec<&'static str> {
        NAMED
            .into_iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|(_, name)| name)
            .collect()
    }

    /// The bit a readable name stands for.
    pub fn bit(name: &str) -> Option<u64> {
        NAMED.iter().find(|(_, n)| *n == name).map(|(bit, _)| *bit)
    }
}

/// A maker's wish to trigger at `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub timestamp: u64,
    pub trigger_type: u64,
}

/// The data one source is asked for: `[begin, end)` in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadoutWindow {
    pub source: SourceId,
    pub begin: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TriggerDecision {
    /// Consecutive from 1 within a run (dropped decisions take no number; they are counted).
    pub trigger_number: u64,
    pub timestamp: u64,
    pub trigger_type: u64,
    /// How many candidates this decision stands for (1 unless overlapping ones were merged).
    pub candidates: u32,
    pub windows: Vec<ReadoutWindow>,
}
