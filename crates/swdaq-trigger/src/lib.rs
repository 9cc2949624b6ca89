//! The self-trigger: trigger primitives from every link, merged into one time-ordered stream
//! ([`merge::TpMerger`], with a bounded wait for late links), feed activity makers
//! ([`makers`]) and calibration triggers ([`calibration`]); their candidates become
//! [`TriggerDecision`]s ([`engine::Trigger`]) with a readout window per source, overlapping
//! candidates merged, and an inhibit (credits from the record builder) that holds or drops
//! decisions by policy — always counted.
//!
//! Everything here runs on data time (62.5 MHz ticks): the same TPs give the same decisions.
//! Wall-clock time enters only through the late-link wait and the latency measurement.

pub mod calibration;
pub mod config;
pub mod decision;
pub mod engine;
pub mod makers;
pub mod merge;

pub use config::{ConfigError, InhibitPolicy, SourceSetting, TriggerChange, TriggerConfig};
pub use decision::{ReadoutWindow, TriggerDecision, trigger_type};
pub use engine::{Trigger, TriggerControl, TriggerCounts};
pub use merge::TpBatch;
