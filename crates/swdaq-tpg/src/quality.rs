//! Hit finding scored against the emulator's truth: when a TP matches a true pulse
//! ([`matches`]), a stretch of data's efficiency and fake rate on collection channels
//! ([`Score`], the closing summary of `swdaq run`), and the threshold scan of one algorithm
//! with efficiency per true peak / noise, fake-hit rate, time and charge resolution
//! ([`scan`], `swdaq tpg-quality`).

use crate::{
    AbsRunSumConfig, Algorithm, ConfigError, HitFinder, Implementation, Plane, PlaneAlgorithms,
    ProtoDuneConfig, ThresholdConfig,
};
use serde::Serialize;
use swdaq_format::wibeth::{self, TICKS_PER_SAMPLE, WibEthFrame};
use swdaq_format::{FormatError, TriggerPrimitive};
use swdaq_sim::{Detector, FrameFormat, SimConfig, TruePulse};

/// A TP matches a true pulse on the same channel when the pulse peaks within the TP's span,
/// widened by two samples each side (`channel` is the TP's channel in the pulse's numbering).
pub fn matches(tp: &TriggerPrimitive, channel: u32, p: &TruePulse) -> bool {
    let margin = 2 * TICKS_PER_SAMPLE;
    let end = tp.time_start + tp.samples_over_threshold as u64 * TICKS_PER_SAMPLE;
    channel == p.channel && p.peak_tick + margin >= tp.time_start && p.peak_tick <= end + margin
}

/// Hit-finding quality on collection channels against the truth of one stretch of data.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    /// True collection pulses with peak >= 5 noise sigma, and how many have a matching TP.
    pub pulses_5_sigma: u64,
    pub found_5_sigma: u64,
    /// Collection-channel TPs that match no true pulse.
    pub fake_tps: u64,
    pub channel_seconds: f64,
}

impl Score {
    /// `tps` carry link-local channel indices; `sigma` and `collection` are per index.
    pub fn of(
        pulses: &[TruePulse],
        tps: &[TriggerPrimitive],
        sigma: &[f64],
        collection: &[bool],
        seconds: f64,
    ) -> Self {
        let is_collection = |c: u32| collection.get(c as usize).copied().unwrap_or(false);
        let mut by_channel: Vec<Vec<&TriggerPrimitive>> = vec![Vec::new(); sigma.len()];
        for tp in tps.iter().filter(|tp| is_collection(tp.channel)) {
            by_channel[tp.channel as usize].push(tp);
        }
        let mut score = Score {
            channel_seconds: collection.iter().filter(|&&c| c).count() as f64 * seconds,
            ..Default::default()
        };
        for p in pulses.iter().filter(|p| is_collection(p.channel)) {
            if p.peak_adc / sigma[p.channel as usize] >= 5.0 {
                score.pulses_5_sigma += 1;
                let found = by_channel[p.channel as usize]
                    .iter()
                    .any(|tp| matches(tp, tp.channel, p));
                score.found_5_sigma += found as u64;
            }
        }
        score.fake_tps = by_channel
            .iter()
            .flatten()
            .filter(|tp| !pulses.iter().any(|p| matches(tp, tp.channel, p)))
            .count() as u64;
        score
    }

    pub fn add(&mut self, other: &Score) {
        self.pulses_5_sigma += other.pulses_5_sigma;
        self.found_5_sigma += other.found_5_sigma;
        self.fake_tps += other.fake_tps;
        self.channel_seconds += other.channel_seconds;
    }

    pub fn efficiency_5_sigma(&self) -> f64 {
        self.found_5_sigma as f64 / self.pulses_5_sigma as f64
    }

    pub fn fake_rate_hz_per_channel(&self) -> f64 {
        self.fake_tps as f64 / self.channel_seconds
    }
}

/// The algorithm a scan varies the threshold of (its other settings are the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned {
    Threshold,
    Protodune,
    AbsRunningSum,
}

impl Scanned {
    /// The thresholds scanned when none are given.
    pub fn default_thresholds(self) -> Vec<f64> {
        match self {
            Self::Threshold => vec![10.0, 14.0, 17.0, 20.0, 25.0, 30.0],
            Self::Protodune => vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            Self::AbsRunningSum => vec![30.0, 35.0, 40.0, 45.0, 60.0, 100.0],
        }
    }

    /// The finder settings at `threshold`.
    pub fn at(self, threshold: f64) -> (ThresholdConfig, Algorithm) {
        match self {
            Self::Threshold => (
                ThresholdConfig {
                    threshold: threshold as i16,
                    ..Default::default()
                },
                Algorithm::Threshold,
            ),
            Self::Protodune => (
                ThresholdConfig::default(),
                Algorithm::ProtoDune(ProtoDuneConfig {
                    threshold_sigmas: threshold as f32,
                    ..Default::default()
                }),
            ),
            Self::AbsRunningSum => (
                ThresholdConfig::default(),
                Algorithm::AbsRunningSum(AbsRunSumConfig {
                    threshold: threshold as i16,
                    ..Default::default()
                }),
            ),
        }
    }

    /// The plane the algorithm is meant for: the running sum is for bipolar induction pulses.
    pub fn plane(self) -> Plane {
        match self {
            Self::AbsRunningSum => Plane::Induction,
            _ => Plane::Collection,
        }
    }

    /// An emulated link with channels of that plane: with the default channel map link 1
    /// is all collection, link 0 half induction (V).
    pub fn link(self) -> u32 {
        match self.plane() {
            Plane::Collection => 1,
            Plane::Induction => 0,
        }
    }
}

/// Bins of true peak amplitude in units of the channel's noise sigma.
pub const BINS: [(f64, f64); 7] = [
    (2.0, 3.0),
    (3.0, 4.0),
    (4.0, 5.0),
    (5.0, 6.0),
    (6.0, 8.0),
    (8.0, 12.0),
    (12.0, f64::INFINITY),
];

/// One threshold of a scan.
#[derive(Serialize)]
pub struct QualityRow {
    pub algorithm: &'static str,
    /// In the algorithm's unit (threshold: ADC over pedestal; protodune: sigmas of the
    /// filtered noise; abs-running-sum: running-sum counts).
    pub threshold: f64,
    /// The threshold over the raw noise sigma (`threshold` in ADC only; NaN otherwise).
    pub threshold_sigma: f64,
    /// Fraction of true collection pulses with peak >= 5 sigma that have a matching TP.
    pub efficiency_5_sigma: f64,
    /// Efficiency per bin of BINS.
    pub efficiency_by_peak_sigma: Vec<f64>,
    /// TPs matching no true pulse, per channel per second.
    pub fake_rate_hz_per_channel: f64,
    /// TP peak time minus true peak time, mean and RMS, in ticks.
    pub time_bias_ticks: f64,
    pub time_rms_ticks: f64,
    /// TP integral over true charge: mean and relative RMS (pulses >= 5 sigma).
    pub charge_ratio_mean: f64,
    pub charge_ratio_rms: f64,
}

/// Why a scan could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Emulator(#[from] swdaq_sim::ConfigError),
    #[error(transparent)]
    HitFinder(#[from] ConfigError),
    #[error(transparent)]
    Frame(#[from] FormatError),
}

/// Emulates `seconds` of one link once and runs the `scanned` algorithm at each threshold,
/// scoring the channels of its plane.
pub fn scan(
    config: &SimConfig,
    seconds: f64,
    scanned: Scanned,
    thresholds: &[f64],
) -> Result<Vec<QualityRow>, ScanError> {
    let detector = Detector::new(config.clone())?;
    let mut link = detector.link(scanned.link(), FrameFormat::WibEth, 0);
    let frames = (seconds * 62.5e6 / wibeth::TICKS_PER_FRAME as f64).ceil() as usize;
    let mut data = vec![0u8; frames * wibeth::FRAME_SIZE];
    for f in data.chunks_exact_mut(wibeth::FRAME_SIZE) {
        link.next_frame(f);
    }
    let sigma: Vec<f64> = (0..wibeth::NUM_CHANNELS)
        .map(|c| link.expected_noise_sigma(c))
        .collect();
    let scored: Vec<bool> = (0..wibeth::NUM_CHANNELS)
        .map(|c| link.channel_info(c).1.is_collection() == (scanned.plane() == Plane::Collection))
        .collect();
    let truth: Vec<TruePulse> = link
        .drain_truth()
        .into_iter()
        .filter(|p| scored[p.channel as usize])
        .collect();
    // Every channel runs the algorithm (planes need not align with SIMD groups here); only
    // the scored plane's TPs count.
    let planes = [scanned.plane(); wibeth::NUM_CHANNELS];
    let channel_ids: Vec<u32> = (0..wibeth::NUM_CHANNELS as u32).collect();
    let mean_sigma = sigma.iter().sum::<f64>() / sigma.len() as f64;
    thresholds
        .iter()
        .map(|&threshold| {
            let (tp_config, algorithm) = scanned.at(threshold);
            let mut finder = HitFinder::with_algorithms(
                tp_config,
                &PlaneAlgorithms::uniform(algorithm),
                &planes,
                channel_ids.clone(),
                wibeth::TICKS_PER_SAMPLE,
                3,
                Implementation::best(),
            )?;
            let mut tps = Vec::new();
            for bytes in data.chunks_exact(wibeth::FRAME_SIZE) {
                finder.process_wibeth(&WibEthFrame::parse(bytes)?, &mut tps);
            }
            finder.flush(&mut tps);
            tps.retain(|tp| scored[tp.channel as usize]);
            let live_channels = scored.iter().filter(|c| **c).count() as f64;
            let threshold_sigma = match scanned {
                Scanned::Threshold => threshold / mean_sigma,
                _ => f64::NAN,
            };
            Ok(evaluate(
                algorithm.name(),
                threshold,
                threshold_sigma,
                &truth,
                &tps,
                &sigma,
                live_channels * seconds,
            ))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn evaluate(
    algorithm: &'static str,
    threshold: f64,
    threshold_sigma: f64,
    truth: &[TruePulse],
    tps: &[TriggerPrimitive],
    sigma: &[f64],
    channel_seconds: f64,
) -> QualityRow {
    let mut by_channel: Vec<Vec<&TriggerPrimitive>> = vec![Vec::new(); sigma.len()];
    for tp in tps {
        by_channel[tp.channel as usize].push(tp);
    }
    let found = |p: &TruePulse| {
        by_channel[p.channel as usize]
            .iter()
            .find(|tp| matches(tp, tp.channel, p))
            .copied()
    };
    let significance = |p: &TruePulse| p.peak_adc / sigma[p.channel as usize];
    let efficiency = |lo: f64, hi: f64| {
        let sel: Vec<_> = truth
            .iter()
            .filter(|p| (lo..hi).contains(&significance(p)))
            .collect();
        if sel.is_empty() {
            f64::NAN
        } else {
            sel.iter().filter(|p| found(p).is_some()).count() as f64 / sel.len() as f64
        }
    };
    let fakes = tps
        .iter()
        .filter(|tp| !truth.iter().any(|p| matches(tp, tp.channel, p)))
        .count();
    let (mut dt, mut q) = (Vec::new(), Vec::new());
    for p in truth.iter().filter(|p| significance(p) >= 5.0) {
        if let Some(tp) = found(p) {
            let tp_peak = tp.time_start + tp.samples_to_peak as u64 * wibeth::TICKS_PER_SAMPLE;
            dt.push(tp_peak as f64 - p.peak_tick as f64);
            q.push(tp.adc_integral as f64 / p.charge);
        }
    }
    let (time_bias, time_rms) = mean_rms(&dt);
    let (charge_mean, charge_rms) = mean_rms(&q);
    QualityRow {
        algorithm,
        threshold,
        threshold_sigma,
        efficiency_5_sigma: efficiency(5.0, f64::INFINITY),
        efficiency_by_peak_sigma: BINS.iter().map(|&(lo, hi)| efficiency(lo, hi)).collect(),
        fake_rate_hz_per_channel: fakes as f64 / channel_seconds,
        time_bias_ticks: time_bias,
        time_rms_ticks: time_rms,
        charge_ratio_mean: charge_mean,
        charge_ratio_rms: if charge_mean != 0.0 {
            charge_rms / charge_mean
        } else {
            f64::NAN
        },
    }
}

/// Mean and standard deviation (NaN for no values).
fn mean_rms(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    (
        mean,
        (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_pulses_are_found_and_a_high_threshold_makes_no_fakes() {
        let config = SimConfig {
            blip_rate_hz: 50.0,
            blip_min_adc: 60.0,
            track_rate_hz: 0.0,
            ..SimConfig::default()
        };
        let rows = scan(&config, 0.1, Scanned::Threshold, &[30.0]).unwrap();
        let r = &rows[0];
        assert!(
            r.efficiency_5_sigma > 0.97,
            "efficiency {}",
            r.efficiency_5_sigma
        );
        assert!(
            r.fake_rate_hz_per_channel < 1.0,
            "fake rate {}",
            r.fake_rate_hz_per_channel
        );
        assert!(r.time_rms_ticks < 64.0, "time rms {}", r.time_rms_ticks);
    }

    #[test]
    fn protodune_at_five_sigma_meets_the_physics_goal() {
        let rows = scan(&SimConfig::default(), 0.2, Scanned::Protodune, &[5.0]).unwrap();
        let r = &rows[0];
        assert!(
            r.efficiency_5_sigma >= 0.95,
            "efficiency {}",
            r.efficiency_5_sigma
        );
        assert!(
            r.fake_rate_hz_per_channel <= 10.0,
            "fake rate {}",
            r.fake_rate_hz_per_channel
        );
        // The FIR's group delay is removed: peaks land within a sample of the truth.
        assert!(
            r.time_bias_ticks.abs() < 32.0,
            "time bias {}",
            r.time_bias_ticks
        );
    }
}
