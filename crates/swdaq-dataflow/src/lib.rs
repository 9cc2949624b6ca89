//! Dataflow: from trigger decisions to trigger records.
//!
//! [`builder::RecordBuilder`] turns each decision into data requests (one per source in the
//! decision's windows), collects the answers into a [`swdaq_format::TriggerRecord`], and
//! completes records that wait too long with the Incomplete bit and the missing sources named.
//! [`nodes`] runs the trigger and the builder as threads that talk only through
//! [`transport`] endpoints (in-process channels today; the same messages are meant to cross
//! processes and hosts later). Flow control is by credit: the builder grants the trigger one
//! credit per record it can take, and returns it only when storage has accepted the record,
//! so a slow disk turns into trigger inhibit, never into lost records.

pub mod builder;
pub mod credit;
pub mod nodes;
pub mod orchestrator;
pub mod transport;

pub use builder::{BuildOutcome, BuilderConfig, BuilderCounts, BuiltRecord, RecordBuilder};
pub use nodes::{
    BuilderReport, CreditsToTrigger, RecordDone, RecordSink, SinkError, StorageFailurePolicy,
    TriggerInput, TriggerReport,
};
