//! Hit-finding configuration: DUNE's production `threshold` algorithm (frugal-streaming
//! pedestal, fixed threshold in ADC counts).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdConfig {
    /// A sample is over threshold when `adc - pedestal > threshold` (strictly).
    pub threshold: i16,
    /// The frugal accumulator moves the pedestal by 1 once it passes +/- this value.
    pub accumulator_limit: i16,
    /// Pedestal to start from; `None`: each channel's first sample (no warm-up, no junk hits).
    pub initial_pedestal: Option<i16>,
    /// Hits longer than this many samples are closed and flagged `TRUNCATED`.
    pub max_hit_samples: u16,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            threshold: 20,
            accumulator_limit: 10,
            initial_pedestal: None,
            max_hit_samples: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid hit-finding setting `{field}`: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl ThresholdConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Limits keep every intermediate value inside i16 (ADCs are 14-bit).
        if !(0..=16383).contains(&self.threshold) {
            return Err(ConfigError {
                field: "threshold",
                reason: "must be 0..=16383 ADC",
            });
        }
        if !(1..=1000).contains(&self.accumulator_limit) {
            return Err(ConfigError {
                field: "accumulator_limit",
                reason: "must be 1..=1000",
            });
        }
        if self
            .initial_pedestal
            .is_some_and(|p| !(0..=16383).contains(&p))
        {
            return Err(ConfigError {
                field: "initial_pedestal",
                reason: "must be 0..=16383 ADC",
            });
        }
        if self.max_hit_samples == 0 {
            return Err(ConfigError {
                field: "max_hit_samples",
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}

/// Wire plane of a channel: collection wires see unipolar pulses, induction wires bipolar ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    Collection,
    Induction,
}

/// One plane's hit-finding algorithm. All of them start with the frugal median pedestal of
/// [`ThresholdConfig`] (`accumulator_limit`, `initial_pedestal`) and close hits at its
/// `max_hit_samples`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum Algorithm {
    /// DUNE's production algorithm: `ThresholdConfig::threshold` ADC over the pedestal.
    Threshold,
    /// The ProtoDUNE-SP hit finder with its defects fixed.
    #[serde(rename = "protodune")]
    ProtoDune(ProtoDuneConfig),
    /// A running sum of |signal| for bipolar induction pulses.
    AbsRunningSum(AbsRunSumConfig),
}

impl Algorithm {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Threshold => "threshold",
            Self::ProtoDune(_) => "protodune",
            Self::AbsRunningSum(_) => "abs-running-sum",
        }
    }

    /// Each algorithm with its default settings.
    pub fn all() -> [Self; 3] {
        [
            Self::Threshold,
            Self::ProtoDune(ProtoDuneConfig::default()),
            Self::AbsRunningSum(AbsRunSumConfig::default()),
        ]
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Threshold => Ok(()),
            Self::ProtoDune(c) => c.validate(),
            Self::AbsRunningSum(c) => c.validate(),
        }
    }
}

/// The algorithm of each plane.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaneAlgorithms {
    pub collection: Algorithm,
    pub induction: Algorithm,
}

impl PlaneAlgorithms {
    /// The same algorithm on both planes.
    pub fn uniform(algorithm: Algorithm) -> Self {
        Self {
            collection: algorithm,
            induction: algorithm,
        }
    }

    pub fn of(&self, plane: Plane) -> Algorithm {
        match plane {
            Plane::Collection => self.collection,
            Plane::Induction => self.induction,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.collection.validate()?;
        self.induction.validate()
    }
}

impl Default for PlaneAlgorithms {
    fn default() -> Self {
        Self::uniform(Algorithm::Threshold)
    }
}

/// Taps a FIR can have (one AVX2 multiply-add per pair of taps).
pub const MAX_FIR_TAPS: usize = 8;

/// `protodune`: median pedestal, FIR low-pass filter, noise from frugal 25th/75th
/// percentiles of the *filtered* signal, threshold a multiple of that noise. Fixed defects of
/// the original: the FIR's group delay is removed from TP times, the noise is measured on the
/// signal the threshold applies to, and every product and sum is exact in 32 bits, saturated
/// (and the hit flagged `SATURATED`) where it must fit 16.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtoDuneConfig {
    /// Threshold in units of the noise sigma, estimated as IQR / 1.349 of the filtered signal.
    pub threshold_sigmas: f32,
    /// Lower bound of the threshold, in ADC counts of the filtered signal.
    pub min_threshold: f32,
    /// Noise sigma (filtered ADC) the percentile trackers start from.
    pub initial_sigma: f32,
    /// FIR taps, tap `k` weighting the sample `k` steps back (unused ones 0). They must sum
    /// to a power of two (the gain is removed by a shift), magnitudes at most 32768 in total.
    pub taps: [i16; MAX_FIR_TAPS],
}

impl Default for ProtoDuneConfig {
    fn default() -> Self {
        Self {
            threshold_sigmas: 5.0,
            min_threshold: 2.0,
            initial_sigma: 2.0,
            taps: [1, 6, 15, 20, 15, 6, 1, 0],
        }
    }
}

impl ProtoDuneConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field, reason| Err(ConfigError { field, reason });
        if !(self.threshold_sigmas > 0.0 && self.threshold_sigmas < 170.0) {
            // The Q8 multiplier of the IQR must fit i16.
            return fail("threshold_sigmas", "must be in (0, 170)");
        }
        if !(0.0..=1000.0).contains(&self.min_threshold) {
            return fail("min_threshold", "must be 0..=1000 ADC");
        }
        if !(0.0..=1000.0).contains(&self.initial_sigma) {
            return fail("initial_sigma", "must be 0..=1000 ADC");
        }
        let sum: i32 = self.taps.iter().map(|&t| t as i32).sum();
        if sum <= 0 || !(sum as u32).is_power_of_two() {
            return fail("taps", "must sum to a positive power of two");
        }
        // Keeps every FIR sum of 15-bit samples inside i32.
        if self.taps.iter().map(|&t| (t as i32).abs()).sum::<i32>() > 1 << 15 {
            return fail("taps", "sum of magnitudes must be at most 32768");
        }
        Ok(())
    }
}

/// `abs-running-sum` (tpglibs' AbsRunSum): `RS = R * (RS / Dm) + S * (|signal| / Ds)` after
/// the median pedestal, then `RS > threshold`; the TP integral and peak are RS values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AbsRunSumConfig {
    /// Over threshold when `RS > threshold` (strictly).
    pub threshold: i16,
    /// R, the memory: the share of the previous sum kept is `memory_factor / memory_divisor`.
    pub memory_factor: i16,
    pub memory_divisor: i16,
    /// S, the scale of each new |signal|: `scale_factor / scale_divisor`.
    pub scale_factor: i16,
    pub scale_divisor: i16,
}

impl Default for AbsRunSumConfig {
    fn default() -> Self {
        Self {
            // Meets the physics goal on the emulator's induction channels (BENCHMARKS.md).
            threshold: 45,
            memory_factor: 8,
            memory_divisor: 10,
            scale_factor: 10,
            scale_divisor: 10,
        }
    }
}

impl AbsRunSumConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field, reason| Err(ConfigError { field, reason });
        if self.threshold < 1 {
            return fail("threshold", "must be at least 1");
        }
        if self.memory_factor < 0 {
            return fail("memory_factor", "must be at least 0");
        }
        if self.scale_factor < 1 {
            return fail("scale_factor", "must be at least 1");
        }
        if self.memory_divisor < 1 || self.scale_divisor < 1 {
            return fail("memory_divisor", "divisors must be at least 1");
        }
        Ok(())
    }
}
