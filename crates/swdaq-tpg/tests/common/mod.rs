//! Helpers shared by the test files: frames, finders, and running both implementations
//! (and both input paths) to check they agree.

#![allow(dead_code)] // each test file uses its own subset

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use swdaq_format::TriggerPrimitive;
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::protowib::{self, ProtoWibFrame};
use swdaq_format::wibeth::{self, WibEthAdcs, WibEthFrame, WibEthHeader};
use swdaq_tpg::{
    AbsRunSumConfig, Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ProtoDuneConfig,
    ThresholdConfig, TpOrderer,
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

/// ProtoDUNE WIB frames, one per row of 256 channels, 25 ticks apart from `T0`.
pub fn protowib_frames(rows: &[u16]) -> Vec<Vec<u8>> {
    rows.chunks_exact(protowib::NUM_CHANNELS)
        .enumerate()
        .map(|(i, row)| {
            let header = protowib::WibHeader {
                timestamp: T0 + i as u64 * protowib::TICKS_PER_SAMPLE,
                z: 1,
                ..Default::default()
            };
            let mut b = vec![0u8; protowib::FRAME_SIZE];
            protowib::encode(&header, row.try_into().expect("256 channels"), &mut b);
            b
        })
        .collect()
}

/// The frame format a [`Setup`] reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Format {
    /// 64 channels, 64 samples per frame, 14-bit ADCs.
    WibEth,
    /// 256 channels, one sample per frame, 12-bit ADCs.
    ProtoWib,
}

/// What a finder runs: the common settings, each plane's algorithm, each channel's plane
/// (one per channel of the format).
#[derive(Debug, Clone)]
pub struct Setup {
    pub config: ThresholdConfig,
    pub algorithms: PlaneAlgorithms,
    pub planes: Vec<Plane>,
    pub format: Format,
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
            format: Format::WibEth,
        }
    }

    /// The same setup on ProtoDUNE WIB frames: 256 channels, the 64 planes repeated.
    pub fn on_protowib(self) -> Self {
        let planes = (0..protowib::NUM_CHANNELS)
            .map(|c| self.planes[c % self.planes.len()])
            .collect();
        Self {
            planes,
            format: Format::ProtoWib,
            ..self
        }
    }

    pub fn channels(&self) -> usize {
        self.planes.len()
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
            format: Format::WibEth,
        }
    }

    pub fn finder(&self, implementation: Implementation) -> HitFinder {
        let (ticks_per_sample, adc_bits) = match self.format {
            Format::WibEth => (32, 14),
            Format::ProtoWib => (protowib::TICKS_PER_SAMPLE, protowib::BITS_PER_ADC),
        };
        HitFinder::with_algorithms(
            self.config,
            &self.algorithms,
            &self.planes,
            (100..100 + self.channels() as u32).collect(),
            ticks_per_sample,
            3,
            implementation,
        )
        .and_then(|f| f.with_adc_bits(adc_bits))
        .unwrap()
    }
}

/// The other algorithms at settings that reach their edges: defaults, hair triggers, taps
/// and factors whose 32-bit sums must saturate to 16 bits, thresholds nothing passes.
pub fn stage_algorithms() -> Vec<Algorithm> {
    let protodune = ProtoDuneConfig::default();
    let running_sum = AbsRunSumConfig::default();
    vec![
        Algorithm::ProtoDune(protodune),
        Algorithm::ProtoDune(ProtoDuneConfig {
            threshold_sigmas: 0.5,
            min_threshold: 0.0,
            initial_sigma: 0.0,
            taps: [-4, 8, 24, 8, -4, 0, 0, 0],
        }),
        Algorithm::ProtoDune(ProtoDuneConfig {
            threshold_sigmas: 169.0,
            taps: [1, 0, 0, 0, 0, 0, 0, 0],
            ..protodune
        }),
        Algorithm::ProtoDune(ProtoDuneConfig {
            taps: [16384, 16384, 0, 0, 0, 0, 0, 0],
            ..protodune
        }),
        Algorithm::AbsRunningSum(running_sum),
        Algorithm::AbsRunningSum(AbsRunSumConfig {
            threshold: 1,
            memory_factor: 10,
            memory_divisor: 1,
            scale_factor: 10,
            scale_divisor: 1,
        }),
        Algorithm::AbsRunningSum(AbsRunSumConfig {
            threshold: i16::MAX,
            memory_factor: 0,
            ..running_sum
        }),
    ]
}

/// How frames reach the finder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Path {
    /// `process_wibeth` or `process_protowib` (unpacking fused in on AVX2).
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
        match setup.format {
            Format::WibEth => {
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
            Format::ProtoWib => {
                let frame = ProtoWibFrame::parse(bytes).unwrap();
                match path {
                    Path::Frames => f.process_protowib(&frame, &mut tps),
                    Path::Rows => {
                        let mut row = [0u16; protowib::NUM_CHANNELS];
                        frame.unpack(&mut row);
                        f.process_rows(frame.timestamp(), &row, &mut tps);
                    }
                }
            }
        }
    }
    f.flush(&mut tps);
    // Hits close in an order that depends on the loop order; TPs are compared time-ordered.
    let mut orderer = TpOrderer::default();
    orderer.push(tps);
    let mut ordered = Vec::new();
    orderer.drain(&mut ordered);
    (ordered, (0..f.channels()).map(|c| f.pedestal(c)).collect())
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

/// [`agree`] without masks (TPs must come out unless the algorithm's threshold cannot be
/// passed), with the channel indices `masked` masked (none of their TPs come out), and with
/// a whole group of 16 masked.
pub fn agree_with_and_without_masks(
    frames: &[Vec<u8>],
    setup: &Setup,
    masked: &[usize],
    whole_group: &[usize],
) {
    let tps = agree(frames, setup, &[]);
    let algorithm = setup.algorithms.collection;
    let passable = !matches!(algorithm, Algorithm::AbsRunningSum(c) if c.threshold == i16::MAX);
    assert_eq!(!tps.is_empty(), passable, "{algorithm:?}");
    let masked_ids: Vec<u32> = masked.iter().map(|&c| 100 + c as u32).collect();
    let with_masks = agree(frames, setup, masked);
    assert!(
        with_masks
            .iter()
            .all(|tp| !masked_ids.contains(&tp.channel))
    );
    agree(frames, setup, whole_group);
}

/// Noisy pedestals with pulses, steps and extremes, from a seed, `samples` rows of
/// `channels` ADCs up to `full_scale`: pedestal steps, short pulses, a saturated hit longer
/// than a WIBEth frame (channel 5), single-sample hits every 64th sample (6), a rail-to-rail
/// channel (7), bipolar pulses (8) and a channel stuck at 0 (9).
pub fn adversarial_rows(seed: u64, samples: usize, channels: usize, full_scale: i32) -> Vec<u16> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    // Pedestals as a fraction of full scale: low (900 of 16383) and mid (2350).
    let base: Vec<i32> = (0..channels)
        .map(|c| {
            if c % 3 == 0 {
                full_scale * 900 / 16383
            } else {
                full_scale * 2350 / 16383
            }
        })
        .collect();
    let mut step = vec![0i32; channels];
    let mut rows = vec![0u16; samples * channels];
    for (t, row) in rows.chunks_exact_mut(channels).enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            if rng.random_ratio(1, 2000) {
                step[c] += rng.random_range(-300..300); // pedestal step
            }
            let mut x = base[c] + step[c] + rng.random_range(-6..=6);
            if (t + 7 * c) % 97 < 6 {
                x += 40 * ((t + 7 * c) % 97) as i32; // short pulses
            }
            if c == 5 && (60..200).contains(&t) {
                x = full_scale; // saturated hit longer than a frame
            }
            if c == 6 && t % 64 == 63 {
                x += 500; // single-sample hits at WIBEth frame boundaries
            }
            if c == 7 {
                x = if rng.random_ratio(1, 3) {
                    0
                } else {
                    full_scale
                }; // rail to rail
            }
            if c == 8 && t % 150 < 20 {
                x += if t % 150 < 10 { 300 } else { -300 }; // bipolar
            }
            if c == 9 {
                x = 0;
            }
            *v = x.clamp(0, full_scale) as u16;
        }
    }
    rows
}

/// [`adversarial_rows`] as `count` WIBEth frames.
pub fn adversarial_frames(seed: u64, count: u64) -> Vec<Vec<u8>> {
    let rows = adversarial_rows(seed, count as usize * 64, N, 16383);
    let rows: Vec<[u16; N]> = rows
        .chunks_exact(N)
        .map(|r| r.try_into().expect("64 channels"))
        .collect();
    frames_of(&rows)
}
