//! The stages that follow the median pedestal in the `protodune` and `abs-running-sum`
//! algorithms, per group of 16 channels: their integer parameters, their state, the scalar
//! reference ([`scalar`]) and its AVX2 twin ([`avx2`]). `threshold` needs none of this: it
//! runs the finder's own fast path.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
pub mod scalar;

use crate::config::{AbsRunSumConfig, Algorithm, MAX_FIR_TAPS, ProtoDuneConfig};
use crate::finder::LANES;

pub type Lanes = [i16; LANES];

/// Samples a frame holds: the most one AVX2 call processes.
pub const MAX_SAMPLES: usize = swdaq_format::wibeth::SAMPLES_PER_FRAME;
/// Rows of FIR input pairs (a sample with the one before) per call: the earlier samples the
/// taps reach, then the call's own.
pub const PAIR_ROWS: usize = MAX_FIR_TAPS - 2 + MAX_SAMPLES;
/// Scratch rows `protodune`'s AVX2 passes hand over through: pairs (low and high halves),
/// pedestal-subtracted signals, fine filtered signals.
pub const SCRATCH_ROWS: usize = 2 * PAIR_ROWS + 2 * MAX_SAMPLES;

/// One scratch row, aligned so that no AVX2 load of it straddles two cache lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScratchRow(pub Lanes);

/// What one group of channels runs after the pedestal, as the integers the per-sample code
/// uses (`threshold` groups have none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    ProtoDune(ProtoDuneParams),
    AbsRunSum(AbsRunSumParams),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProtoDuneParams {
    pub taps: [i16; MAX_FIR_TAPS],
    /// log2 of the tap sum: `filtered = fir >> shift` is in ADC counts.
    pub shift: u32,
    /// `fine = fir >> fine_shift` keeps `FINE_BITS` fractional bits (where the taps have
    /// them), so the noise of a filtered signal of ~2 ADC sigma is resolved.
    pub fine_shift: u32,
    /// `threshold_sigmas / 1.349` in Q8: `threshold = max(iqr * mult >> 8, min_threshold)`.
    pub mult_q8: i16,
    /// Fine units, as are the quartiles.
    pub min_threshold: i16,
    /// Starting distance of the quartile trackers from 0, fine units.
    pub quartile_start: i16,
    /// The FIR's group delay, removed from TP times.
    pub delay_samples: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbsRunSumParams {
    pub threshold: i16,
    /// `32767 / divisor`: the Q15 multiplier that divides by the divisor, as tpglibs does.
    pub memory_q15: i16,
    pub memory_factor: i16,
    pub scale_q15: i16,
    pub scale_factor: i16,
}

/// Fractional bits kept on the filtered signal for noise estimation and thresholding.
const FINE_BITS: u32 = 4;

/// Walk weights (up, down) of the frugal 25th and 75th percentile trackers: the estimate
/// settles where `up` x (share above) = `down` x (share below).
pub const Q25: (i16, i16) = (1, 3);
pub const Q75: (i16, i16) = (3, 1);

impl Kernel {
    /// `None` for `threshold`.
    pub fn new(algorithm: &Algorithm) -> Option<Self> {
        match algorithm {
            Algorithm::Threshold => None,
            Algorithm::ProtoDune(c) => Some(Self::ProtoDune(ProtoDuneParams::new(c))),
            Algorithm::AbsRunningSum(c) => Some(Self::AbsRunSum(AbsRunSumParams::new(c))),
        }
    }

    pub fn delay_samples(&self) -> u64 {
        match self {
            Self::ProtoDune(p) => p.delay_samples,
            Self::AbsRunSum(_) => 0,
        }
    }
}

impl ProtoDuneParams {
    fn new(c: &ProtoDuneConfig) -> Self {
        let sum: i32 = c.taps.iter().map(|&t| t as i32).sum();
        let shift = sum.trailing_zeros();
        let fine_shift = shift.saturating_sub(FINE_BITS);
        let scale = (1u32 << (shift - fine_shift)) as f32;
        let fine = |adc: f32| (adc * scale).round().clamp(0.0, i16::MAX as f32) as i16;
        Self {
            taps: c.taps,
            shift,
            fine_shift,
            mult_q8: (c.threshold_sigmas / 1.349 * 256.0).round() as i16,
            min_threshold: fine(c.min_threshold),
            // A Gaussian's quartiles are 0.6745 sigma from its median.
            quartile_start: fine(0.6745 * c.initial_sigma),
            delay_samples: group_delay(&c.taps),
        }
    }
}

/// The taps' centroid rounded to whole samples (3 for any symmetric 7 taps); a centroid
/// before the newest sample means no delay.
fn group_delay(taps: &[i16; MAX_FIR_TAPS]) -> u64 {
    let sum: i64 = taps.iter().map(|&t| t as i64).sum();
    let moment: i64 = taps
        .iter()
        .enumerate()
        .map(|(k, &t)| k as i64 * t as i64)
        .sum();
    ((2 * moment + sum) / (2 * sum)).max(0) as u64
}

impl AbsRunSumParams {
    fn new(c: &AbsRunSumConfig) -> Self {
        Self {
            threshold: c.threshold,
            memory_q15: i16::MAX / c.memory_divisor,
            memory_factor: c.memory_factor,
            scale_q15: i16::MAX / c.scale_divisor,
            scale_factor: c.scale_factor,
        }
    }
}

/// One group's stage state, 16 lanes per row so the AVX2 path loads whole rows.
#[derive(Debug, Clone, Default)]
pub struct StageState {
    /// Frugal 25th/75th percentiles of the fine filtered signal and their accumulators.
    pub q25: Lanes,
    pub q25_acc: Lanes,
    pub q75: Lanes,
    pub q75_acc: Lanes,
    /// FIR history of pedestal-subtracted samples: `history[k]` is the sample `k + 1` back.
    pub history: [Lanes; MAX_FIR_TAPS - 1],
    pub run_sum: Lanes,
}

impl StageState {
    pub fn new(kernel: &Kernel) -> Self {
        let q = match kernel {
            Kernel::ProtoDune(p) => p.quartile_start,
            Kernel::AbsRunSum(_) => 0,
        };
        Self {
            q25: [-q; LANES],
            q75: [q; LANES],
            ..Default::default()
        }
    }
}

/// What a stage hands to TP assembly for one lane and sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageOutput {
    /// Integrated into the TP (filtered ADC or running sum).
    pub value: i16,
    pub over: bool,
    /// A 16-bit value had to saturate.
    pub clipped: bool,
}

pub fn saturate(v: i32) -> i16 {
    v.clamp(i16::MIN as i32, i16::MAX as i32) as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_taps_delay_by_half_their_length() {
        assert_eq!(group_delay(&[1, 6, 15, 20, 15, 6, 1, 0]), 3);
        assert_eq!(group_delay(&[1, 0, 0, 0, 0, 0, 0, 0]), 0);
        assert_eq!(group_delay(&[0, 0, 2, 0, 0, 0, 0, 0]), 2);
    }
}
