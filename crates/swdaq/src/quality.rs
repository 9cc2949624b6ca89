//! `swdaq tpg-quality`: hit-finding quality against the emulator's truth — efficiency versus
//! true peak / noise, fake-hit rate, time and charge resolution — over a threshold scan of
//! one algorithm.

use crate::table;
use serde::Serialize;
use swdaq_app::truth_match::matches;
use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_sim::{Detector, FrameFormat, SimConfig, TruePulse};
use swdaq_tpg::{
    AbsRunSumConfig, Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ProtoDuneConfig,
    ThresholdConfig,
};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of emulated data per threshold.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// The hit-finding algorithm whose threshold is scanned (its other settings: defaults).
    #[arg(long, value_enum, default_value_t = Scanned::Threshold)]
    algorithm: Scanned,
    /// Thresholds to scan, in the algorithm's unit (threshold: ADC over pedestal;
    /// protodune: sigmas of the filtered noise; abs-running-sum: running-sum counts).
    #[arg(long, value_delimiter = ',')]
    thresholds: Option<Vec<f64>>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Where to write the PNG plot of efficiency and fake rate (default:
    /// tpg-quality-<algorithm>.png in the current directory).
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

/// The algorithm a scan varies the threshold of (its other settings are the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scanned {
    Threshold,
    Protodune,
    AbsRunningSum,
}

impl Scanned {
    fn default_thresholds(self) -> Vec<f64> {
        match self {
            Self::Threshold => vec![10.0, 14.0, 17.0, 20.0, 25.0, 30.0],
            Self::Protodune => vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            Self::AbsRunningSum => vec![30.0, 35.0, 40.0, 45.0, 60.0, 100.0],
        }
    }

    /// The finder settings at `threshold`.
    fn at(self, threshold: f64) -> (ThresholdConfig, Algorithm) {
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
    fn plane(self) -> Plane {
        match self {
            Self::AbsRunningSum => Plane::Induction,
            _ => Plane::Collection,
        }
    }

    /// An emulated link with channels of that plane: with the default channel map link 1
    /// is all collection, link 0 half induction (V).
    fn link(self) -> u32 {
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

#[derive(Serialize)]
pub struct QualityRow {
    pub algorithm: &'static str,
    /// In the algorithm's unit (see `Args::thresholds`).
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

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds > 0.0, "--seconds must be positive");
    let thresholds = args
        .thresholds
        .clone()
        .unwrap_or_else(|| args.algorithm.default_thresholds());
    let rows = scan(
        &SimConfig::default(),
        args.seconds,
        args.algorithm,
        &thresholds,
    )?;
    let algorithm = rows.first().map_or("none", |r| r.algorithm);
    let plot = args
        .plot
        .clone()
        .unwrap_or_else(|| format!("tpg-quality-{algorithm}.png").into());
    let title = format!(
        "{algorithm} hit finding on emulated {:?} channels vs truth ({} s per threshold)",
        args.algorithm.plane(),
        args.seconds
    );
    crate::quality_plot::write(&plot, &rows, &title)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    eprintln!("wrote {}", plot.display());
    let header: Vec<String> = [
        "threshold",
        "sigma",
        "eff >=5s",
        "fake Hz/ch",
        "dt bias",
        "dt rms",
        "Q ratio",
        "Q rms",
    ]
    .into_iter()
    .map(String::from)
    .chain(BINS.iter().map(|(lo, hi)| {
        if hi.is_finite() {
            format!("eff {lo}-{hi}s")
        } else {
            format!("eff >{lo}s")
        }
    }))
    .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut v = vec![
                r.threshold.to_string(),
                format!("{:.1}", r.threshold_sigma),
                format!("{:.3}", r.efficiency_5_sigma),
                format!("{:.1}", r.fake_rate_hz_per_channel),
                format!("{:.0}", r.time_bias_ticks),
                format!("{:.0}", r.time_rms_ticks),
                format!("{:.2}", r.charge_ratio_mean),
                format!("{:.2}", r.charge_ratio_rms),
            ];
            v.extend(r.efficiency_by_peak_sigma.iter().map(|e| format!("{e:.3}")));
            v
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    println!(
        "{} algorithm on emulated {:?} channels (link {}, default emulator), {} s",
        rows.first().map_or("no", |r| r.algorithm),
        args.algorithm.plane(),
        args.algorithm.link(),
        args.seconds
    );
    print!("{}", table::render(&header, &cells));
    Ok(())
}

/// Emulates `seconds` of one link once and runs the `scanned` algorithm at each threshold,
/// scoring the channels of its plane.
pub fn scan(
    config: &SimConfig,
    seconds: f64,
    scanned: Scanned,
    thresholds: &[f64],
) -> anyhow::Result<Vec<QualityRow>> {
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
