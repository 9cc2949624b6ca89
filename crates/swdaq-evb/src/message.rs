//! What readout units, the event manager and builder units send each other: plain `serde`
//! data, so each link can be an in-process channel or a ZeroMQ socket
//! (`swdaq_dataflow::transport`).

use serde::{Deserialize, Serialize};

/// A builder unit asks the event manager for `count` more events (it has room for them; 0
/// when it only reports what it has settled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuRequest {
    pub bu: u16,
    pub count: u32,
    /// Events settled since the last request: in a closed file, or shed by the disk-full
    /// policy (counted there). What a builder unit that dies was given and had not settled is
    /// what it lost, by number.
    pub settled: Vec<u64>,
}

/// What the event manager hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToEvm {
    Request(BuRequest),
    /// A builder unit has gone silent (declared by whoever watches its liveness).
    BuGone(u16),
}

/// One readout unit's data of one event: its FEDs' checked fragments back to back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuperFragment {
    pub ru: u16,
    pub event: u64,
    /// FEDs whose fragment failed a check or never came: left out of `data`.
    pub bad_feds: u16,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// The event manager gives an event to a builder unit, with its own super-fragment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub event: u64,
    /// Trigger time, ns since the start of the run (for the lumi section and the latency).
    pub trigger_ns: u64,
    pub evm_fragment: SuperFragment,
}

/// Everything a builder unit receives, on one inbox. Assignments and super-fragments travel
/// in batches: one message per event costs more in hand-offs than the event's checks and
/// building together (measured by `swdaq bench evb`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToBu {
    Assigned(Vec<Assignment>),
    Fragments(Vec<SuperFragment>),
    /// Lumi section `lumi` is over: the event manager gave out `total_events` events in it,
    /// to all builder units together (a CMS EoLS's `TotalEvents`). Sent for every lumi
    /// section of the run in order, empty ones too: a filter unit moves on to the next lumi
    /// section only once this one's EoLS exists.
    EndOfLumi {
        lumi: u32,
        total_events: u64,
    },
    /// The event manager assigns nothing more: finish what is open and stop. `last_lumi`:
    /// the run's last lumi section, every one up to it ended by an `EndOfLumi` (0: the run
    /// had no event); `None` when the run's end was not heard from the event manager (it
    /// went silent), so the run's totals are unknown.
    EndOfRun {
        last_lumi: Option<u32>,
    },
}

/// A builder unit asks a readout unit for its super-fragments of these events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentRequest {
    pub bu: u16,
    pub events: Vec<u64>,
}

/// Most assignments or super-fragments a unit gathers for one builder unit before sending.
pub const MAX_BATCH: usize = 32;
