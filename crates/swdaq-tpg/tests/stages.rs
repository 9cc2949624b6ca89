//! What `protodune`, `abs-running-sum` and ROI readout do, on hand-made and synthetic
//! input (every check runs both implementations through `common::agree`).

mod common;

use common::{N, Setup, T0, agree, frames_of};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::TriggerPrimitive;
use swdaq_format::tp::tp_flags;
use swdaq_tpg::{
    AbsRunSumConfig, Algorithm, Implementation, ProtoDuneConfig, RoiBuilder, RoiConfig,
    ThresholdConfig, TpOrderer,
};

fn flat(samples: usize, value: u16) -> Vec<[u16; N]> {
    vec![[value; N]; samples]
}

fn protodune(threshold_sigmas: f32) -> Algorithm {
    Algorithm::ProtoDune(ProtoDuneConfig {
        threshold_sigmas,
        ..Default::default()
    })
}

/// Time of a TP's peak, in ticks.
fn peak_time(tp: &TriggerPrimitive) -> u64 {
    tp.time_start + tp.samples_to_peak as u64 * 32
}

#[test]
fn protodune_removes_the_fir_delay_from_tp_times() {
    // A symmetric pulse peaking at sample 100 of channel 4 on a flat pedestal.
    let mut rows = flat(192, 1000);
    for (k, v) in [10u16, 40, 100, 160, 100, 40, 10].iter().enumerate() {
        rows[97 + k][4] += v;
    }
    let tps = agree(
        &frames_of(&rows),
        &Setup::uniform(ThresholdConfig::default(), protodune(5.0)),
        &[],
    );
    assert_eq!(tps.len(), 1);
    assert_eq!(tps[0].channel, 104);
    assert_eq!(peak_time(&tps[0]), T0 + 100 * 32, "peak on the true sample");
    // The filtered peak: (10*1 + 40*6 + 100*15 + 160*20 + 100*15 + 40*6 + 10*1) / 64.
    assert_eq!(tps[0].adc_peak, 6700 / 64);
    // The filter spreads the pulse: over threshold on both sides of the 7 samples' core.
    assert!(tps[0].time_start < T0 + 100 * 32 && tps[0].samples_over_threshold >= 5);
}

#[test]
fn protodune_flags_saturation_and_keeps_full_integrals() {
    // Rail-high for 3 frames on channel 0: the fine filtered signal clips at i16::MAX.
    let mut rows = flat(64 * 5, 900);
    for row in &mut rows[64..256] {
        row[0] = 16383;
    }
    let config = ThresholdConfig {
        accumulator_limit: 1000,
        max_hit_samples: 10_000,
        ..Default::default()
    };
    let tps = agree(
        &frames_of(&rows),
        &Setup::uniform(config, protodune(5.0)),
        &[],
    );
    assert_eq!(tps.len(), 1, "one hit across frame boundaries");
    let tp = tps[0];
    assert_eq!(tp.flags & tp_flags::SATURATED, tp_flags::SATURATED);
    // 192 samples of 15483 ADC filtered (ramps of the 7 taps at both ends), far over 2^16.
    assert!(
        tp.adc_integral > 190 * 15_000,
        "integral {}",
        tp.adc_integral
    );
    assert_eq!(tp.adc_peak, 15483);
}

#[test]
fn abs_running_sum_finds_bipolar_pulses_and_integrates_the_sum() {
    let mut rows = flat(128, 2000);
    for k in 0..8 {
        rows[40 + k][9] += 80;
        rows[48 + k][9] -= 80;
    }
    let algorithm = Algorithm::AbsRunningSum(AbsRunSumConfig::default());
    let tps = agree(
        &frames_of(&rows),
        &Setup::uniform(ThresholdConfig::default(), algorithm),
        &[],
    );
    assert_eq!(tps.len(), 1);
    // RS: 80, 144, 195, ... towards 400: over 45 from the first sample, through both lobes
    // and the decay after them.
    assert_eq!(tps[0].time_start, T0 + 40 * 32);
    assert!(tps[0].samples_over_threshold >= 15);
    assert!(tps[0].adc_peak > 300);
}

#[test]
fn delayed_tps_still_leave_in_time_order() {
    // protodune dates hits 3 samples before they are seen, so a `threshold` TP closed at the
    // end of one frame must wait for a protodune hit seen at the start of the next.
    let mut rows = flat(192, 1000);
    rows[62][40] = 1500; // threshold channel: one sample, closed at 63
    for row in &mut rows[64..70] {
        row[3] = 3000; // protodune channel: seen at 64, dated 61
    }
    let setup = Setup::mixed(
        ThresholdConfig::default(),
        protodune(5.0),
        Algorithm::Threshold,
    );
    let mut finder = setup.finder(Implementation::best());
    let mut orderer = TpOrderer::default();
    let (mut closed, mut released) = (Vec::new(), Vec::new());
    for bytes in frames_of(&rows) {
        let frame = swdaq_format::wibeth::WibEthFrame::parse(&bytes).unwrap();
        finder.process_wibeth(&frame, &mut closed);
        orderer.push(closed.drain(..));
        let now = frame.timestamp() + swdaq_format::wibeth::TICKS_PER_FRAME;
        orderer.release(finder.release_horizon(now), &mut released);
    }
    finder.flush(&mut closed);
    orderer.push(closed.drain(..));
    orderer.drain(&mut released);
    let starts: Vec<(u32, u64)> = released
        .iter()
        .map(|tp| (tp.channel, (tp.time_start - T0) / 32))
        .collect();
    assert_eq!(starts, [(103, 61), (140, 62)]);
}

/// Sum of 12 uniforms: Gaussian enough for noise, mean 0, sigma 1.
fn gauss(rng: &mut impl Rng) -> f64 {
    (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0
}

/// Pedestals with Gaussian noise of sigma 4 and (optionally) pulses of 150..400 ADC peaking
/// at known samples: (rows, (channel, peak sample)).
fn synthetic(seed: u64, samples: usize, pulses: bool) -> (Vec<[u16; N]>, Vec<(u32, usize)>) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut v: Vec<[f64; N]> = (0..samples)
        .map(|_| {
            std::array::from_fn(|c| if c % 3 == 0 { 900.0 } else { 2350.0 } + 4.0 * gauss(&mut rng))
        })
        .collect();
    let mut truth = Vec::new();
    if pulses {
        for c in 0..N {
            let mut t = 100 + rng.random_range(0..100);
            while t + 100 < samples {
                let amplitude = rng.random_range(150.0..400.0);
                for (k, row) in v.iter_mut().enumerate().skip(t - 10).take(21) {
                    let x = (k as f64 - t as f64) / 2.0;
                    row[c] += amplitude * (-x * x / 2.0).exp();
                }
                truth.push((100 + c as u32, t));
                t += rng.random_range(150..400);
            }
        }
    }
    let rows = v
        .iter()
        .map(|r| std::array::from_fn(|c| r[c].round().clamp(0.0, 16383.0) as u16))
        .collect();
    (rows, truth)
}

/// Every large pulse found once with its peak within `peak_tolerance` samples, and no hit
/// on pure noise.
fn check_physics(algorithm: Algorithm, peak_tolerance: u64) {
    let setup = Setup::uniform(ThresholdConfig::default(), algorithm);
    let (rows, truth) = synthetic(1, 64 * 120, true);
    let tps = agree(&frames_of(&rows), &setup, &[]);
    let found = truth
        .iter()
        .filter(|&&(channel, sample)| {
            let expected = T0 + sample as u64 * 32;
            tps.iter().any(|tp| {
                tp.channel == channel && peak_time(tp).abs_diff(expected) <= 32 * peak_tolerance
            })
        })
        .count();
    assert!(truth.len() > 1000);
    assert_eq!(found, truth.len(), "{}: efficiency", algorithm.name());
    assert!(
        tps.len() <= truth.len() + truth.len() / 100,
        "{}: {} TPs for {} pulses",
        algorithm.name(),
        tps.len(),
        truth.len()
    );
    let (noise, _) = synthetic(2, 64 * 120, false);
    let fake = agree(&frames_of(&noise), &setup, &[]);
    assert!(
        fake.is_empty(),
        "{}: {} fake hits",
        algorithm.name(),
        fake.len()
    );
}

#[test]
fn protodune_finds_large_pulses_on_time_and_no_noise() {
    check_physics(protodune(8.0), 1);
}

#[test]
fn abs_running_sum_finds_large_pulses_and_no_noise() {
    // The running sum peaks after the pulse: its memory delays it by a few samples.
    check_physics(
        Algorithm::AbsRunningSum(AbsRunSumConfig {
            threshold: 300,
            ..Default::default()
        }),
        8,
    );
}

#[test]
fn rois_cover_the_hits() {
    let mut rows = flat(256, 1000);
    for row in &mut rows[100..110] {
        row[20] = 1300;
    }
    let mut finder = Setup::threshold(ThresholdConfig {
        threshold: 50,
        ..Default::default()
    })
    .finder(Implementation::best());
    let mut roi = RoiBuilder::new(RoiConfig::default(), 32).unwrap();
    let (mut tps, mut rois) = (Vec::new(), Vec::new());
    for bytes in frames_of(&rows) {
        let from = tps.len();
        let frame = swdaq_format::wibeth::WibEthFrame::parse(&bytes).unwrap();
        finder.process_wibeth(&frame, &mut tps);
        roi.push(&tps[from..], &mut rois);
        let now = frame.timestamp() + swdaq_format::wibeth::TICKS_PER_FRAME;
        roi.release(finder.release_horizon(now), &mut rois);
    }
    roi.flush(&mut rois);
    // Channel 120 is in group 7; blocks of 12 samples (384 ticks) aligned to absolute time,
    // from the one holding sample 100 to the one holding sample 109, +/- 50 samples.
    let block = |t: u64| t / 384 * 384;
    assert_eq!(rois.len(), 1);
    assert_eq!(rois[0].channel_group, 120 / 16);
    assert_eq!(rois[0].begin_ts, block(T0 + 100 * 32) - 50 * 32);
    assert_eq!(rois[0].end_ts, block(T0 + 109 * 32) + 384 + 50 * 32);
}
