//! Helpers shared by the test files: frames, finders, and running both implementations
//! (and both input paths) to check they agree.

#![allow(dead_code)] // each test file uses its own subset

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::TriggerPrimitive;
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::wibeth::{self, WibEthAdcs, WibEthFrame, WibEthHeader};
use swdaq_tpg::{
    Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ThresholdConfig, TpOrderer,
};

pub const N: usize = wibeth::NUM_CHANNELS;
pub const T0: u64 = 1_000_000;

pub fn frame_bytes(index: u64, adcs: &WibEthAdcs) -> Vec<u8> {
    let mut b = vec![0u8; wibeth::FRAME_SIZE];
    let daq = DaqEthHeader {
        timestamp: T0 + index * 2048,
        seq_id: index as u16 & 0xfff,
        ..Default::default()
    };
    wibeth::encode(&daq, &WibEthHeader::healthy(), adcs, &mut b);
    b
}

/// Frames of consecutive rows (`rows.len()` a multiple of 64).
pub fn frames_of(rows: &[[u16; N]]) -> Vec<Vec<u8>> {
    rows.chunks_exact(wibeth::SAMPLES_PER_FRAME)
        .enumerate()
        .map(|(i, r)| frame_bytes(i as u64, &r.try_into().expect("64 rows")))
        .collect()
}

/// What a finder runs: the common settings, each plane's algorithm, each channel's plane.
#[derive(Debug, Clone)]
pub struct Setup {
    pub config: ThresholdConfig,
    pub algorithms: PlaneAlgorithms,
    pub planes: Vec<Plane>,
}

impl Setup {
    pub fn threshold(config: ThresholdConfig) -> Self {
        Self::uniform(config, Algorithm::Threshold)
    }

    pub fn uniform(config: ThresholdConfig, algorithm: Algorithm) -> Self {
        Self {
            config,
            algorithms: PlaneAlgorithms::uniform(algorithm),
            planes: vec![Plane::Collection; N],
        }
    }

    /// Channels 0..32 on the collection plane, 32..64 on the induction plane.
    pub fn mixed(config: ThresholdConfig, collection: Algorithm, induction: Algorithm) -> Self {
        Self {
            config,
            algorithms: PlaneAlgorithms {
                collection,
                induction,
            },
            planes: (0..N)
                .map(|c| {
                    if c < 32 {
                        Plane::Collection
                    } else {
                        Plane::Induction
                    }
                })
                .collect(),
        }
    }

    pub fn finder(&self, implementation: Implementation) -> HitFinder {
        HitFinder::with_algorithms(
            self.config,
            &self.algorithms,
            &self.planes,
            (100..100 + N as u32).collect(),
            32,
            3,
            implementation,
        )
        .unwrap()
    }
}

/// How frames reach the finder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Path {
    /// `process_wibeth` (unpacking fused in on AVX2).
    Frames,
    /// `process_rows` on unpacked rows.
    Rows,
}

/// Time-ordered TPs and final pedestals of running `frames` through one implementation, with
/// `masked` channels.
pub fn run(
    frames: &[Vec<u8>],
    setup: &Setup,
    implementation: Implementation,
    path: Path,
    masked: &[usize],
) -> (Vec<TriggerPrimitive>, Vec<i16>) {
    let mut f = setup.finder(implementation);
    let mut tps = Vec::new();
    for &c in masked {
        f.set_masked(c, true, &mut tps);
    }
    for bytes in frames {
        let frame = WibEthFrame::parse(bytes).unwrap();
        match path {
            Path::Frames => f.process_wibeth(&frame, &mut tps),
            Path::Rows => {
                let mut rows = vec![0u16; N * wibeth::SAMPLES_PER_FRAME];
                for (s, row) in rows.chunks_exact_mut(N).enumerate() {
                    wibeth::unpack_row(frame.row(s), row.try_into().unwrap());
                }
                f.process_rows(frame.timestamp(), &rows, &mut tps);
            }
        }
    }
    f.flush(&mut tps);
    // Hits close in an order that depends on the loop order; TPs are compared time-ordered.
    let mut orderer = TpOrderer::default();
    orderer.push(tps);
    let mut ordered = Vec::new();
    orderer.drain(&mut ordered);
    (ordered, (0..N).map(|c| f.pedestal(c)).collect())
}

/// The scalar reference's TPs, after checking that AVX2 (where available) and the row path
/// give the same TPs and pedestals.
pub fn agree(frames: &[Vec<u8>], setup: &Setup, masked: &[usize]) -> Vec<TriggerPrimitive> {
    let scalar = run(frames, setup, Implementation::Scalar, Path::Frames, masked);
    let mut others = vec![run(
        frames,
        setup,
        Implementation::Scalar,
        Path::Rows,
        masked,
    )];
    if swdaq_tpg::avx2::available() {
        others.push(run(
            frames,
            setup,
            Implementation::Avx2,
            Path::Frames,
            masked,
        ));
        others.push(run(frames, setup, Implementation::Avx2, Path::Rows, masked));
    }
    for other in others {
        assert_eq!(other.1, scalar.1, "pedestals differ");
        assert_eq!(other.0, scalar.0, "TPs differ");
    }
    scalar.0
}

/// Noisy pedestals with pulses, steps and extremes, from a seed: pedestal steps, short
/// pulses, a saturated hit longer than a frame (channel 5), single-sample hits at frame
/// boundaries (6), a rail-to-rail channel (7), bipolar pulses (8) and a channel stuck at
/// 0 (9).
pub fn adversarial_frames(seed: u64, count: u64) -> Vec<Vec<u8>> {
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
                    if c == 8 && t % 150 < 20 {
                        x += if t % 150 < 10 { 300 } else { -300 }; // bipolar
                    }
                    if c == 9 {
                        x = 0;
                    }
                    *v = x.clamp(0, 16383) as u16;
                }
            }
            frame_bytes(i, &adcs)
        })
        .collect()
}
