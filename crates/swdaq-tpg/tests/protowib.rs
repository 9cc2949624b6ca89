//! ProtoDUNE WIB (12-bit, 256 channels, one sample per frame): the AVX2 path's fused
//! unpacking gives the format's reference values, and every algorithm gives the scalar
//! reference's TPs bit for bit through both input paths, on random and adversarial input.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::protowib::{self, ProtoWibFrame};
use swdaq_format::tp::tp_flags;
use swdaq_tpg::finder::PROTOWIB_BLOCK;
use swdaq_tpg::{Algorithm, HitFinder, Implementation, ThresholdConfig};

mod common;

use common::{
    Setup, adversarial_rows, agree, agree_with_and_without_masks, protowib_frames, stage_algorithms,
};

const CHANNELS: usize = protowib::NUM_CHANNELS;
const FULL_SCALE: u16 = protowib::ADC_MAX;

fn all_algorithms() -> Vec<Algorithm> {
    let mut all = vec![Algorithm::Threshold];
    all.extend(stage_algorithms());
    all
}

fn on_protowib(config: ThresholdConfig, algorithm: Algorithm) -> Setup {
    Setup::uniform(config, algorithm).on_protowib()
}

#[test]
fn simd_unpacking_equals_the_reference() {
    if !swdaq_tpg::avx2::available() {
        return;
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(12);
    let extremes = [[0; CHANNELS], [FULL_SCALE; CHANNELS]];
    let random = (0..300).map(|_| std::array::from_fn(|_| rng.random_range(0..=FULL_SCALE)));
    // Each channel alone at full scale, so a value bleeding into a neighbour shows.
    let single =
        (0..CHANNELS).map(|c| std::array::from_fn(|k| if k == c { FULL_SCALE } else { 0 }));
    for adcs in extremes.into_iter().chain(random).chain(single) {
        let bytes = protowib_frames(&adcs).remove(0);
        let frame = ProtoWibFrame::parse(&bytes).unwrap();
        // SAFETY: AVX2 checked above.
        let groups = unsafe { swdaq_tpg::avx2::unpack_protowib(frame.as_bytes()) };
        let got: Vec<u16> = groups
            .iter()
            // SAFETY: a 256-bit register is 16 u16 lanes; every bit pattern is a valid u16.
            .flat_map(|g| unsafe { std::mem::transmute::<_, [u16; 16]>(*g) })
            .collect();
        assert_eq!(got, adcs);
    }
}

#[test]
fn every_algorithm_agrees_on_adversarial_input() {
    let configs = [
        ThresholdConfig::default(),
        ThresholdConfig {
            threshold: 5,
            accumulator_limit: 1,
            initial_pedestal: Some(0),
            max_hit_samples: 50,
        },
    ];
    let whole_group: Vec<usize> = (32..48).collect();
    for seed in 0..2 {
        let mut frames = protowib_frames(&adversarial_rows(seed, 600, CHANNELS, FULL_SCALE as i32));
        if seed == 1 {
            // Gaps (a frame, then several, then one at a block's end) end blocks early; the
            // row path dates every sample from its own frame, so wrong times would show.
            for gone in [510, 300, 299, 298, 127, 100] {
                frames.remove(gone);
            }
        }
        for algorithm in all_algorithms() {
            for config in configs {
                let setup = on_protowib(config, algorithm);
                agree_with_and_without_masks(&frames, &setup, &[0, 5, 17, 255], &whole_group);
            }
        }
    }
}

#[test]
fn a_sample_at_12_bit_full_scale_flags_its_hit() {
    // Channel 5 sits at full scale for samples 60..200 of the adversarial rows.
    let frames = protowib_frames(&adversarial_rows(1, 300, CHANNELS, FULL_SCALE as i32));
    let tps = agree(
        &frames,
        &on_protowib(ThresholdConfig::default(), Algorithm::Threshold),
        &[],
    );
    let saturated: Vec<_> = tps.iter().filter(|tp| tp.channel == 105).collect();
    assert!(!saturated.is_empty());
    assert!(
        saturated
            .iter()
            .any(|tp| tp.flags & tp_flags::SATURATED != 0)
    );
    // Channel 2's pulses stay below full scale: never flagged.
    assert!(
        tps.iter()
            .filter(|tp| tp.channel == 102)
            .all(|tp| tp.flags & tp_flags::SATURATED == 0)
    );
}

#[test]
fn frames_are_processed_in_blocks_of_consecutive_samples() {
    let mut finder = on_protowib(ThresholdConfig::default(), Algorithm::Threshold)
        .finder(Implementation::best());
    let frames = protowib_frames(&adversarial_rows(3, 200, CHANNELS, FULL_SCALE as i32));
    let mut tps = Vec::new();
    let mut feed = |finder: &mut HitFinder, n: usize| {
        finder
            .process_frame(swdaq_format::FrameFormat::ProtoWib, &frames[n], &mut tps)
            .unwrap()
    };
    let tick = protowib::TICKS_PER_SAMPLE;
    let (t0, block) = (common::T0, PROTOWIB_BLOCK);
    for n in 0..block - 1 {
        assert_eq!(feed(&mut finder, n), 0, "frame {n} is only staged");
    }
    let full = t0 + block as u64 * tick;
    assert_eq!(
        feed(&mut finder, block - 1),
        full,
        "a full block is processed"
    );
    for n in block..block + 6 {
        assert_eq!(feed(&mut finder, n), full);
    }
    // The next frame is lost: the one after does not follow on, so the 6 staged frames
    // are processed first.
    assert_eq!(feed(&mut finder, block + 7), full + 6 * tick);
    finder.flush(&mut tps);
    assert_eq!(finder.processed_until(), full + 8 * tick);
}

#[test]
fn adc_bits_are_checked_and_a_14_bit_finder_refuses_protowib_frames() {
    let finder = || {
        HitFinder::new(
            ThresholdConfig::default(),
            (0..CHANNELS as u32).collect(),
            protowib::TICKS_PER_SAMPLE,
            3,
            Implementation::Scalar,
        )
        .unwrap()
    };
    for bits in [0, 15, 16] {
        assert_eq!(
            finder().with_adc_bits(bits).err().map(|e| e.field),
            Some("adc_bits")
        );
    }
    let frame = protowib_frames(&[0; CHANNELS]).remove(0);
    let refused = std::panic::catch_unwind(|| {
        finder().process_protowib(&ProtoWibFrame::parse(&frame).unwrap(), &mut Vec::new())
    });
    assert!(
        refused.is_err(),
        "a 14-bit finder must not read 12-bit frames"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_algorithm_agrees_on_random_frames(
        values in proptest::collection::vec(0u16..=FULL_SCALE, CHANNELS * 40),
        smooth in proptest::bool::ANY,
        algorithm in 0usize..8,
        limit in 1i16..20,
        threshold in 0i16..100,
        initial_pedestal in proptest::option::of(0i16..=FULL_SCALE as i16),
    ) {
        // Smooth samples (a random walk per channel) keep the trackers near the signal, so
        // hits open and close.
        let mut level = vec![2000i32; CHANNELS];
        let rows: Vec<u16> = values
            .chunks_exact(CHANNELS)
            .flat_map(|v| {
                let row: Vec<u16> = (0..CHANNELS).map(|c| {
                    if smooth {
                        level[c] = (level[c] + (v[c] as i32 - 2047) / 128).clamp(0, FULL_SCALE as i32);
                        (level[c] + (v[c] % 32) as i32).min(FULL_SCALE as i32) as u16
                    } else {
                        v[c]
                    }
                }).collect();
                row
            })
            .collect();
        let config = ThresholdConfig { threshold, accumulator_limit: limit, initial_pedestal, ..Default::default() };
        agree(&protowib_frames(&rows), &on_protowib(config, all_algorithms()[algorithm]), &[1, 200]);
    }
}
