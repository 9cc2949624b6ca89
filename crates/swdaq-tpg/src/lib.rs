//! Trigger-primitive generation (hit finding) inside the readout thread.
//!
//! Algorithm `threshold` (DUNE's production one, as in its public `tpglibs`): per channel a
//! frugal-streaming median pedestal — an accumulator moves +1/-1 as the sample is above/below
//! the pedestal; when it passes +limit the pedestal rises by 1 and the accumulator resets,
//! past -limit it falls by 1 — updated *before* it is subtracted; a sample is over threshold
//! when `adc - pedestal > threshold`. The pedestal starts from each channel's first sample by
//! default, so there is no warm-up and no junk hits.
//!
//! A hit opens on the first sample over threshold and closes on the first one that is not;
//! hits carry over frame boundaries; TP fields follow `swdaq_format::TriggerPrimitive`
//! (time of the first sample over threshold, samples over threshold, samples to the peak,
//! 32-bit integral of pedestal-subtracted ADC, peak), with flags for hits cut at the maximum
//! length and for saturated ADCs. [`order::TpOrderer`] releases TPs time-ordered.
//!
//! Algorithms `protodune` and `abs-running-sum` (see [`config::Algorithm`]) follow the same
//! pedestal with more stages (module `stages`): a FIR, quartile noise trackers and a noise-scaled
//! threshold; or a running sum of |signal| for bipolar induction pulses. Each plane
//! (collection, induction) runs its own algorithm, per group of 16 channels; `threshold`
//! groups keep their own fast path. [`roi::RoiBuilder`] turns TPs into regions of interest.
//!
//! Two implementations do the per-sample work: the scalar reference and an AVX2 path
//! (16 channels per instruction, the 14-bit WIBEth and 12-bit ProtoDUNE WIB unpacking fused
//! in) that gives identical TPs. ProtoDUNE WIB frames carry one sample each, so the finder
//! gathers up to 32 consecutive ones into a block before processing (see
//! [`finder::PROTOWIB_BLOCK`]).
//!
//! [`quality`] scores found hits against the emulator's truth: per run (`swdaq run`'s
//! summary) and over a threshold scan (`swdaq tpg-quality`).

pub mod avx2;
pub mod bench;
pub mod config;
pub mod finder;
pub mod hits;
pub mod noisy;
pub mod order;
pub mod quality;
pub mod roi;
#[cfg(target_arch = "x86_64")]
mod simd;
mod stages;

pub use config::{
    AbsRunSumConfig, Algorithm, ConfigError, Plane, PlaneAlgorithms, ProtoDuneConfig,
    ThresholdConfig,
};
pub use finder::{HitFinder, Implementation};
pub use noisy::{NoisyChannel, NoisyChannelDetector, NoisyConfig};
pub use order::TpOrderer;
pub use roi::{RegionOfInterest, RoiBuilder, RoiConfig};
