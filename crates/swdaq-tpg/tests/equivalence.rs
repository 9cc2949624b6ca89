//! The AVX2 path gives the scalar reference's TPs bit for bit for every algorithm, on random
//! and adversarial input, through both input paths; and the `threshold` reference itself
//! does what the algorithm says (the other algorithms' semantics: `tests/stages.rs`).

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::TriggerPrimitive;
use swdaq_format::tp::tp_flags;
use swdaq_format::wibeth::{WibEthAdcs, WibEthFrame};
use swdaq_tpg::{
    Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ThresholdConfig, TpOrderer,
};

mod common;

use common::{
    N, Setup, adversarial_frames, agree, agree_with_and_without_masks, frame_bytes, frames_of,
    stage_algorithms,
};

fn both_agree(
    frames: &[Vec<u8>],
    config: ThresholdConfig,
    masked: &[usize],
) -> Vec<TriggerPrimitive> {
    agree(frames, &Setup::threshold(config), masked)
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

#[test]
fn every_algorithm_agrees_on_adversarial_input() {
    let configs = [
        ThresholdConfig::default(),
        ThresholdConfig {
            accumulator_limit: 1,
            initial_pedestal: Some(0),
            max_hit_samples: 50,
            ..Default::default()
        },
    ];
    let whole_group: Vec<usize> = (16..32).collect();
    for seed in 0..2 {
        let frames = adversarial_frames(seed, 40);
        for algorithm in stage_algorithms() {
            for config in configs {
                let setup = Setup::uniform(config, algorithm);
                agree_with_and_without_masks(&frames, &setup, &[0, 5, 17, 63], &whole_group);
            }
        }
    }
}

#[test]
fn planes_run_their_own_algorithms_and_agree() {
    let frames = adversarial_frames(7, 40);
    let config = ThresholdConfig::default();
    let [threshold, protodune, running_sum] = Algorithm::all();
    for (collection, induction) in [
        (protodune, running_sum),
        (threshold, running_sum),
        (protodune, threshold),
    ] {
        let mixed = agree(&frames, &Setup::mixed(config, collection, induction), &[3]);
        // Each plane's TPs are exactly those of its algorithm run alone.
        for (algorithm, channels) in [(collection, 100..132), (induction, 132..164)] {
            let alone = agree(&frames, &Setup::uniform(config, algorithm), &[3]);
            let on = |tps: &[TriggerPrimitive]| -> Vec<TriggerPrimitive> {
                tps.iter()
                    .filter(|tp| channels.contains(&tp.channel))
                    .copied()
                    .collect()
            };
            assert_eq!(on(&mixed), on(&alone), "{}", algorithm.name());
        }
    }
}

#[test]
fn a_group_of_16_must_share_a_plane() {
    let mut planes = vec![Plane::Collection; N];
    planes[20] = Plane::Induction;
    let make = |planes: &[Plane]| {
        HitFinder::with_algorithms(
            ThresholdConfig::default(),
            &PlaneAlgorithms::default(),
            planes,
            (0..N as u32).collect(),
            32,
            3,
            Implementation::Scalar,
        )
    };
    assert_eq!(make(&planes).err().map(|e| e.field), Some("planes"));
    assert_eq!(make(&planes[..10]).err().map(|e| e.field), Some("planes"));
    planes[16..32].fill(Plane::Induction);
    assert!(make(&planes).is_ok());
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

    #[test]
    fn every_algorithm_agrees_on_random_frames(
        values in proptest::collection::vec(0u16..=16383, 64 * 64 * 2),
        smooth in proptest::bool::ANY,
        algorithm in 0usize..7,
        limit in 1i16..20,
        initial_pedestal in proptest::option::of(0i16..=16383),
    ) {
        // Smooth frames (a random walk) keep the trackers near the signal, so hits open and close.
        let mut level = 8000i32;
        let rows: Vec<[u16; N]> = values
            .chunks_exact(N)
            .map(|v| std::array::from_fn(|c| {
                if smooth {
                    level = (level + (v[c] as i32 - 8191) / 512).clamp(0, 16383);
                    (level + (v[c] % 64) as i32).min(16383) as u16
                } else {
                    v[c]
                }
            }))
            .collect();
        let config = ThresholdConfig { accumulator_limit: limit, initial_pedestal, ..Default::default() };
        agree(&frames_of(&rows), &Setup::uniform(config, stage_algorithms()[algorithm]), &[1, 40]);
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
    let mut f = Setup::threshold(config).finder(Implementation::Scalar);
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
