//! Hit-finding benchmark (library side of `swdaq bench tpg`): ns per channel-sample on one
//! core, each algorithm and implementation on the same frames in the same run.

use crate::{
    Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ThresholdConfig, TpOrderer,
};
use serde::Serialize;
use std::time::Instant;
use swdaq_format::wibeth::{self, WibEthFrame};

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub algorithm: &'static str,
    pub format: &'static str,
    pub implementation: Implementation,
    pub ns_per_channel_sample: f64,
    pub channel_samples_per_second: f64,
    /// WIBEth links (64 channels at 1.953 MHz) one core keeps up with.
    pub links_per_core_realtime: f64,
    pub tps: u64,
    /// The AVX2 result's speed-up over the same algorithm's scalar one in this run (scalar rows: 1).
    pub speedup_vs_scalar: f64,
}

/// Channel-samples per second of one WIBEth link.
pub const WIBETH_LINK_RATE: f64 = 64.0 * 62.5e6 / 32.0;

/// Runs each algorithm (defaults, on every channel; `config` for the pedestal and
/// `threshold`) over `frames` (concatenated WIBEth frames of one link) `passes` times with
/// each available implementation.
pub fn run(frames: &[u8], config: ThresholdConfig, passes: usize) -> Vec<BenchResult> {
    Algorithm::all()
        .iter()
        .flat_map(|algorithm| run_algorithm(frames, config, algorithm, passes))
        .collect()
}

/// One algorithm, each available implementation.
pub fn run_algorithm(
    frames: &[u8],
    config: ThresholdConfig,
    algorithm: &Algorithm,
    passes: usize,
) -> Vec<BenchResult> {
    let mut impls = vec![Implementation::Scalar];
    if crate::avx2::available() {
        impls.push(Implementation::Avx2);
    }
    let channel_ids: Vec<u32> = (0..wibeth::NUM_CHANNELS as u32).collect();
    let planes = [Plane::Collection; wibeth::NUM_CHANNELS];
    let frame_count = frames.len() / wibeth::FRAME_SIZE;
    let mut results: Vec<BenchResult> = impls
        .into_iter()
        .map(|implementation| {
            let mut finder = HitFinder::with_algorithms(
                config,
                &PlaneAlgorithms::uniform(*algorithm),
                &planes,
                channel_ids.clone(),
                wibeth::TICKS_PER_SAMPLE,
                3,
                implementation,
            )
            .expect("valid bench configuration");
            let mut orderer = TpOrderer::default();
            let (mut closed, mut ordered) = (Vec::new(), Vec::new());
            let mut tps = 0u64;
            let start = Instant::now();
            for pass in 0..passes {
                for (n, bytes) in frames.chunks_exact(wibeth::FRAME_SIZE).enumerate() {
                    let frame = WibEthFrame::parse(bytes).expect("benchmark frames are whole");
                    finder.process_wibeth(&frame, &mut closed);
                    orderer.push(closed.drain(..));
                    let now = frame.timestamp() + wibeth::TICKS_PER_FRAME;
                    orderer.release(finder.release_horizon(now), &mut ordered);
                    tps += ordered.len() as u64;
                    ordered.clear();
                    std::hint::black_box((pass, n));
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            let channel_samples =
                (passes * frame_count * wibeth::NUM_CHANNELS * wibeth::SAMPLES_PER_FRAME) as f64;
            let rate = channel_samples / seconds;
            BenchResult {
                algorithm: algorithm.name(),
                format: "wibeth",
                implementation,
                ns_per_channel_sample: 1e9 / rate,
                channel_samples_per_second: rate,
                links_per_core_realtime: rate / WIBETH_LINK_RATE,
                tps,
                speedup_vs_scalar: 1.0,
            }
        })
        .collect();
    let scalar = results[0].ns_per_channel_sample;
    for r in &mut results {
        r.speedup_vs_scalar = scalar / r.ns_per_channel_sample;
    }
    results
}
