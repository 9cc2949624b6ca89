//! The detector emulator: realistic TPC data with known truth, deterministic for a seed.
//!
//! Model, per channel: a pedestal (collection ~900 ADC, induction ~2350 ADC, with spread),
//! white noise, low-frequency AR(1) noise, noise shared by groups of adjacent channels, and
//! a slow sinusoidal drift; pulses shaped by the front-end response (unipolar on collection,
//! bipolar on induction, [`response`]) from radiological blips (per-channel Poisson rate,
//! exponential amplitude spectrum down to the noise) and tracks (many adjacent channels,
//! time linear in channel, generated per time slice from `(seed, slice)` so all links agree
//! without sharing state); pathologies (noisy, dead channels, stuck bits, saturation); frame
//! encoding (WIBEth, ProtoDUNE WIB) with correct headers, timestamps and sequence ids; and
//! fault injection. Every pulse and fault is recorded as [`truth`].
//!
//! [`fed`] emulates CMS-style front-end drivers instead: one FED fragment per level-1 accept,
//! with size distributions and injected faults as truth. [`felix`] emulates a FELIX card in
//! GBT mode: e-link chunks per L1 accept packed into to-host blocks.

pub mod channel_map;
pub mod config;
pub mod fed;
pub mod felix;
pub mod link;
mod normal;
pub mod response;
pub mod truth;

/// The most level-1 accepts per second an emulator is asked for: the LHC's bunch-crossing
/// rate, beyond any real trigger. A larger rate is a typo that would only spin and fill
/// memory, so configurations are refused above it.
pub const MAX_L1_RATE_HZ: f64 = 40e6;

pub use channel_map::Plane;
pub use config::{ConfigError, FaultRates, SimConfig, StuckBit};
pub use link::{Detector, FrameFormat, FrameInfo, LinkSimulator};
pub use truth::{FaultKind, InjectedFault, PulseKind, TruePulse};
