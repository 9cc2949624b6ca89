//! `swdaq tpg-quality`: hit-finding quality against the emulator's truth — efficiency versus
//! true peak / noise, fake-hit rate, time and charge resolution — over a threshold scan.

use crate::table;
use serde::Serialize;
use swdaq::truth_match::matches;
use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_sim::{Detector, FrameFormat, SimConfig, TruePulse};
use swdaq_tpg::{HitFinder, Implementation, ThresholdConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of emulated data per threshold.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Thresholds (ADC over pedestal) to scan.
    #[arg(long, value_delimiter = ',', default_values_t = [10i16, 14, 17, 20, 25, 30])]
    thresholds: Vec<i16>,
    #[arg(long)]
    json: bool,
}

/// Bins of true peak amplitude in units of the channel's noise sigma.
const BINS: [(f64, f64); 7] = [
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
    pub threshold_adc: i16,
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
    let rows = scan(&SimConfig::default(), args.seconds, &args.thresholds)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
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
                r.threshold_adc.to_string(),
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
        "threshold algorithm on emulated collection channels (link 1, default emulator), {} s",
        args.seconds
    );
    print!("{}", table::render(&header, &cells));
    Ok(())
}

/// Emulates `seconds` of link 1 once and runs the hit finder at each threshold.
pub fn scan(
    config: &SimConfig,
    seconds: f64,
    thresholds: &[i16],
) -> anyhow::Result<Vec<QualityRow>> {
    let detector = Detector::new(config.clone())?;
    let mut link = detector.link(1, FrameFormat::WibEth, 0);
    let frames = (seconds * 62.5e6 / wibeth::TICKS_PER_FRAME as f64).ceil() as usize;
    let mut data = vec![0u8; frames * wibeth::FRAME_SIZE];
    for f in data.chunks_exact_mut(wibeth::FRAME_SIZE) {
        link.next_frame(f);
    }
    let sigma: Vec<f64> = (0..wibeth::NUM_CHANNELS)
        .map(|c| link.expected_noise_sigma(c))
        .collect();
    let collection: Vec<bool> = (0..wibeth::NUM_CHANNELS)
        .map(|c| link.channel_info(c).1.is_collection())
        .collect();
    let truth: Vec<TruePulse> = link
        .drain_truth()
        .into_iter()
        .filter(|p| collection[p.channel as usize])
        .collect();
    let channel_ids: Vec<u32> = (0..wibeth::NUM_CHANNELS as u32).collect();
    let mean_sigma = sigma.iter().sum::<f64>() / sigma.len() as f64;
    thresholds
        .iter()
        .map(|&threshold| {
            let tp_config = ThresholdConfig {
                threshold,
                ..Default::default()
            };
            let mut finder = HitFinder::new(
                tp_config,
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
            tps.retain(|tp| collection[tp.channel as usize]);
            let live_channels = collection.iter().filter(|c| **c).count() as f64;
            Ok(evaluate(
                threshold,
                threshold as f64 / mean_sigma,
                &truth,
                &tps,
                &sigma,
                live_channels * seconds,
            ))
        })
        .collect()
}

fn evaluate(
    threshold: i16,
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
        algorithm: "threshold",
        threshold_adc: threshold,
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
        let rows = scan(&config, 0.1, &[30]).unwrap();
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
}
