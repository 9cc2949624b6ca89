//! Hit-finding benchmark (library side of `swdaq bench tpg`): ns per channel-sample on one
//! core, each algorithm, frame format and implementation on the same frames in the same run.

use crate::{
    Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ThresholdConfig, TpOrderer,
};
use serde::Serialize;
use std::time::Instant;
use swdaq_format::FrameFormat;

/// Concatenated frames of one link.
#[derive(Debug, Clone, Copy)]
pub struct LinkFrames<'a> {
    pub format: FrameFormat,
    pub bytes: &'a [u8],
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub algorithm: &'static str,
    pub format: &'static str,
    pub implementation: Implementation,
    pub ns_per_channel_sample: f64,
    pub channel_samples_per_second: f64,
    /// Channels one core keeps up with at the format's sample rate.
    pub channels_per_core_realtime: f64,
    /// Links of this format (64 WIBEth or 256 ProtoDUNE WIB channels) one core keeps up with.
    pub links_per_core_realtime: f64,
    pub tps: u64,
    /// The AVX2 result's speed-up over the same algorithm's scalar one on the same format in
    /// this run (scalar rows: 1).
    pub speedup_vs_scalar: f64,
}

/// Runs each algorithm (defaults, on every channel; `config` for the pedestal and
/// `threshold`) over each link's frames `passes` times with each available implementation.
pub fn run(links: &[LinkFrames<'_>], config: ThresholdConfig, passes: usize) -> Vec<BenchResult> {
    Algorithm::all()
        .iter()
        .flat_map(|algorithm| {
            links
                .iter()
                .flat_map(move |link| run_algorithm(*link, config, algorithm, passes))
        })
        .collect()
}

/// One algorithm on one link's frames, each available implementation.
pub fn run_algorithm(
    link: LinkFrames<'_>,
    config: ThresholdConfig,
    algorithm: &Algorithm,
    passes: usize,
) -> Vec<BenchResult> {
    let mut impls = vec![Implementation::Scalar];
    if crate::avx2::available() {
        impls.push(Implementation::Avx2);
    }
    let format = link.format;
    let channels = format.channels();
    let frame_count = link.bytes.len() / format.frame_size();
    let mut results: Vec<BenchResult> = impls
        .into_iter()
        .map(|implementation| {
            let mut finder = HitFinder::with_algorithms(
                config,
                &PlaneAlgorithms::uniform(*algorithm),
                &vec![Plane::Collection; channels],
                (0..channels as u32).collect(),
                format.ticks_per_sample(),
                3,
                implementation,
            )
            .and_then(|f| f.with_adc_bits(format.adc_bits()))
            .expect("valid bench configuration");
            let mut orderer = TpOrderer::default();
            let (mut closed, mut ordered) = (Vec::new(), Vec::new());
            let mut tps = 0u64;
            let start = Instant::now();
            for pass in 0..passes {
                for (n, bytes) in link.bytes.chunks_exact(format.frame_size()).enumerate() {
                    let now = finder
                        .process_frame(format, bytes, &mut closed)
                        .expect("benchmark frames are whole");
                    orderer.push(closed.drain(..));
                    orderer.release(finder.release_horizon(now), &mut ordered);
                    tps += ordered.len() as u64;
                    ordered.clear();
                    std::hint::black_box((pass, n));
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            let channel_samples =
                (passes * frame_count * channels * format.samples_per_frame()) as f64;
            let rate = channel_samples / seconds;
            let channels_per_core = rate / format.sample_rate_hz();
            BenchResult {
                algorithm: algorithm.name(),
                format: format.name(),
                implementation,
                ns_per_channel_sample: 1e9 / rate,
                channel_samples_per_second: rate,
                channels_per_core_realtime: channels_per_core,
                links_per_core_realtime: channels_per_core / channels as f64,
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
