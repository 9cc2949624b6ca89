//! The AVX2 path gives the scalar reference's TPs bit for bit, on random and adversarial
//! input; and the reference itself does what the algorithm says.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::TriggerPrimitive;
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::tp::tp_flags;
use swdaq_format::wibeth::{self, WibEthAdcs, WibEthFrame, WibEthHeader};
use swdaq_tpg::{HitFinder, Implementation, ThresholdConfig, TpOrderer};

const N: usize = wibeth::NUM_CHANNELS;

fn frame_bytes(index: u64, adcs: &WibEthAdcs) -> Vec<u8> {
    let mut b = vec![0u8; wibeth::FRAME_SIZE];
    let daq = DaqEthHeader {
        timestamp: 1_000_000 + index * 2048,
        seq_id: index as u16 & 0xfff,
        ..Default::default()
    };
    wibeth::encode(&daq, &WibEthHeader::healthy(), adcs, &mut b);
    b
}

fn finder(config: ThresholdConfig, implementation: Implementation) -> HitFinder {
    HitFinder::new(
        config,
        (100..100 + N as u32).collect(),
        32,
        3,
        implementation,
    )
    .unwrap()
}

/// TPs and final pedestals of running `frames` through one implementation, with `masked` channels.
fn run(
    frames: &[Vec<u8>],
    config: ThresholdConfig,
    implementation: Implementation,
    masked: &[usize],
) -> (Vec<TriggerPrimitive>, Vec<i16>) {
    let mut f = finder(config, implementation);
    let mut tps = Vec::new();
    for &c in masked {
        f.set_masked(c, true, &mut tps);
    }
    for bytes in frames {
        f.process_wibeth(&WibEthFrame::parse(bytes).unwrap(), &mut tps);
    }
    f.flush(&mut tps);
    // Hits close in an order that depends on the loop order; TPs are compared time-ordered.
    let mut orderer = TpOrderer::default();
    orderer.push(tps);
    let mut ordered = Vec::new();
    orderer.drain(&mut ordered);
    (ordered, (0..N).map(|c| f.pedestal(c)).collect())
}

fn both_agree(
    frames: &[Vec<u8>],
    config: ThresholdConfig,
    masked: &[usize],
) -> Vec<TriggerPrimitive> {
    let scalar = run(frames, config, Implementation::Scalar, masked);
    if swdaq_tpg::avx2::available() {
        let avx2 = run(frames, config, Implementation::Avx2, masked);
        assert_eq!(avx2.1, scalar.1, "pedestals differ");
        assert_eq!(avx2.0, scalar.0, "TPs differ");
    }
    scalar.0
}

/// Noisy pedestals with pulses, steps and extremes, from a seed.
fn adversarial_frames(seed: u64, count: u64) -> Vec<Vec<u8>> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let base: Vec<i32> = (0..N)
        .map(|c| if c % 3 == 0 { 900 } else { 2350 })
        .collect();
    let mut step = vec![0i32; N];
    (0..count)
        .map(|i| {
            let mut adcs: WibEthAdcs = [[0; N]; 64];
            for (s, row) in adcs.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    if rng.random_ratio(1, 2000) {
                        step[c] += rng.random_range(-300..300); // pedestal step
                    }
                    let mut x = base[c] + step[c] + rng.random_range(-6..=6);
                    let t = i as usize * 64 + s;
                    if (t + 7 * c) % 97 < 6 {
                        x += 40 * ((t + 7 * c) % 97) as i32; // short pulses
                    }
                    if c == 5 && (60..200).contains(&t) {
                        x = 16383; // saturated hit longer than a frame
                    }
                    if c == 6 && t % 64 == 63 {
                        x += 500; // single-sample hits at frame boundaries
                    }
                    if c == 7 {
                        x = if rng.random_ratio(1, 3) { 0 } else { 16383 }; // rail to rail
                    }
                    *v = x.clamp(0, 16383) as u16;
                }
            }
            frame_bytes(i, &adcs)
        })
        .collect()
}

#[test]
fn simd_unpacking_equals_the_reference() {
    if !swdaq_tpg::avx2::available() {
        return;
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    for _ in 0..200 {
        let adcs: WibEthAdcs =
            std::array::from_fn(|_| std::array::from_fn(|_| rng.random_range(0..=16383)));
        let bytes = frame_bytes(0, &adcs);
        let frame = WibEthFrame::parse(&bytes).unwrap();
        for s in [0, 31, 63] {
            // SAFETY: AVX2 checked above.
            let groups = unsafe { swdaq_tpg::avx2::unpack_wibeth_row(frame.row(s)) };
            let got: Vec<u16> = groups
                .iter()
                // SAFETY: a 256-bit register is 16 u16 lanes; every bit pattern is a valid u16.
                .flat_map(|g| unsafe { std::mem::transmute::<_, [u16; 16]>(*g) })
                .collect();
            assert_eq!(got, adcs[s]);
        }
    }
}

#[test]
fn implementations_agree_on_adversarial_input() {
    for seed in 0..4 {
        let frames = adversarial_frames(seed, 40);
        for config in [
            ThresholdConfig::default(),
            ThresholdConfig {
                threshold: 0,
                accumulator_limit: 1,
                ..Default::default()
            },
            ThresholdConfig {
                threshold: 100,
                accumulator_limit: 10,
                initial_pedestal: Some(0),
                max_hit_samples: 50,
            },
            ThresholdConfig {
                threshold: 16383,
                ..Default::default()
            },
        ] {
            let tps = both_agree(&frames, config, &[]);
            let masked = both_agree(&frames, config, &[0, 5, 17, 63]);
            assert!(
                masked
                    .iter()
                    .all(|tp| ![100, 105, 117, 163].contains(&tp.channel))
            );
            if config.threshold < 16383 {
                assert!(!tps.is_empty());
            }
        }
        // A whole masked group of 16 is skipped.
        both_agree(
            &frames,
            ThresholdConfig::default(),
            &(16..32).collect::<Vec<_>>(),
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn implementations_agree_on_random_frames(values in proptest::collection::vec(0u16..=16383, 64 * 64 * 3), threshold in 0i16..200, limit in 1i16..20) {
        let frames: Vec<Vec<u8>> = values
            .chunks_exact(64 * 64)
            .enumerate()
            .map(|(i, v)| frame_bytes(i as u64, &std::array::from_fn(|s| std::array::from_fn(|c| v[s * 64 + c]))))
            .collect();
        both_agree(&frames, ThresholdConfig { threshold, accumulator_limit: limit, ..Default::default() }, &[]);
    }
}

#[test]
fn reference_semantics_on_a_hand_made_pulse() {
    // Flat pedestal 1000 on every channel; channel 2 gets a pulse 10,30,50,40,20,10 from sample 3.
    let mut adcs: WibEthAdcs = [[1000; N]; 64];
    for (i, v) in [10u16, 30, 50, 40, 20, 10].iter().enumerate() {
        adcs[3 + i][2] += v;
    }
    let frames = vec![frame_bytes(0, &adcs)];
    let config = ThresholdConfig {
        threshold: 15,
        accumulator_limit: 10,
        initial_pedestal: None,
        max_hit_samples: 100,
    };
    let tps = both_agree(&frames, config, &[]);
    // Over threshold (> 15): 30, 50, 40, 20 at samples 4..8; the pedestal has not moved
    // (the accumulator reaches only +6 < 10 ... then falls).
    assert_eq!(
        tps,
        vec![TriggerPrimitive {
            flags: 0,
            detector_id: 3,
            channel: 102,
            samples_over_threshold: 4,
            time_start: 1_000_000 + 4 * 32,
            samples_to_peak: 1,
            adc_integral: 140,
            adc_peak: 50,
        }]
    );
}

#[test]
fn frugal_pedestal_follows_a_step_one_count_per_limit_plus_one_samples() {
    let mut adcs: WibEthAdcs = [[500; N]; 64];
    for row in adcs.iter_mut().skip(1) {
        row[0] = 600;
    }
    let config = ThresholdConfig {
        threshold: 1000,
        accumulator_limit: 10,
        ..Default::default()
    };
    let mut f = finder(config, Implementation::Scalar);
    f.process_wibeth(
        &WibEthFrame::parse(&frame_bytes(0, &adcs)).unwrap(),
        &mut Vec::new(),
    );
    // 63 samples above: the accumulator passes +10 every 11 samples -> 5 steps of +1.
    assert_eq!(f.pedestal(0), 505);
    assert_eq!(f.pedestal(1), 500);
}

#[test]
fn hits_across_frames_come_out_whole_and_long_ones_are_cut() {
    let mut a: WibEthAdcs = [[1000; N]; 64];
    let mut b: WibEthAdcs = [[1000; N]; 64];
    for row in &mut a[60..64] {
        row[9] = 1100;
    }
    for row in &mut b[0..3] {
        row[9] = 1100;
    }
    for s in 0..64 {
        a[s][10] = 1200;
        b[s][10] = 1200;
    }
    let frames = vec![frame_bytes(0, &a), frame_bytes(1, &b)];
    let config = ThresholdConfig {
        threshold: 50,
        accumulator_limit: 1000,
        initial_pedestal: Some(1000),
        max_hit_samples: 100,
    };
    let tps = both_agree(&frames, config, &[]);
    let on = |ch| {
        tps.iter()
            .filter(move |tp| tp.channel == ch)
            .copied()
            .collect::<Vec<_>>()
    };
    assert_eq!(on(109).len(), 1);
    assert_eq!(
        (on(109)[0].samples_over_threshold, on(109)[0].time_start),
        (7, 1_000_000 + 60 * 32)
    );
    let long = on(110);
    assert_eq!(long[0].samples_over_threshold, 100);
    assert_eq!(long[0].flags & tp_flags::TRUNCATED, tp_flags::TRUNCATED);
    assert_eq!(
        long.iter()
            .map(|t| t.samples_over_threshold as u32)
            .sum::<u32>(),
        128
    );
}

#[test]
fn orderer_releases_tps_in_time_order_behind_open_hits() {
    let tp = |t: u64, ch: u32| TriggerPrimitive {
        time_start: t,
        channel: ch,
        ..Default::default()
    };
    let mut o = TpOrderer::default();
    o.push([tp(300, 1), tp(100, 2), tp(200, 3)]);
    let mut out = Vec::new();
    o.release(250, &mut out);
    assert_eq!(
        out.iter().map(|t| t.time_start).collect::<Vec<_>>(),
        vec![100, 200]
    );
    o.drain(&mut out);
    assert_eq!(out.last().unwrap().time_start, 300);
    assert!(o.is_empty());
}

#[test]
fn bad_configurations_are_errors() {
    let ids: Vec<u32> = (0..64).collect();
    assert!(
        HitFinder::new(
            ThresholdConfig {
                accumulator_limit: 0,
                ..Default::default()
            },
            ids.clone(),
            32,
            3,
            Implementation::Scalar
        )
        .is_err()
    );
    assert!(
        HitFinder::new(
            ThresholdConfig {
                threshold: -1,
                ..Default::default()
            },
            ids,
            32,
            3,
            Implementation::Scalar
        )
        .is_err()
    );
    assert!(
        HitFinder::new(
            ThresholdConfig::default(),
            vec![0; 10],
            32,
            3,
            Implementation::Scalar
        )
        .is_err()
    );
}
