//! The emulated front end of `swdaq run`: each link's data is generated once at start (by
//! `swdaq-sim`, with its truth) and replayed in a loop by the readout's emulator source.

use super::config::EmulatorSection;
use std::collections::BTreeMap;
use std::sync::Arc;
use swdaq_format::FrameFormat;
use swdaq_format::wibeth;
use swdaq_readout::replay::ReplayTemplate;
use swdaq_sim::{Detector, TruePulse};

/// Data time of the first frame: one second in, so windows before early triggers exist.
pub const START_TIMESTAMP: u64 = 62_500_000;

/// What the emulator knows about one link's first pass, for judging the hit finding.
pub struct LinkTruth {
    pub pulses: Vec<TruePulse>,
    /// Expected noise sigma and whether it is a collection channel, per channel index.
    pub sigma: Vec<f64>,
    pub collection: Vec<bool>,
    /// The first pass covers `[START_TIMESTAMP, START_TIMESTAMP + span_ticks)`.
    pub span_ticks: u64,
}

pub struct EmulatedLink {
    pub template: Arc<ReplayTemplate>,
    /// Offline channel number of each of the frame's channels.
    pub channel_ids: Vec<u32>,
    pub truth: LinkTruth,
}

/// Emulated links by link number.
pub type Emulated = BTreeMap<usize, EmulatedLink>;

/// Generates the templates of `links` (each link's data depends only on the configuration
/// and its number, so applications that share the configuration agree on every link),
/// spreading links over the machine's cores.
pub fn emulate(config: &EmulatorSection, links: &[u32]) -> anyhow::Result<Emulated> {
    let detector = Detector::new(config.sim.clone())?;
    let frames = (config.template_s * 62.5e6 / wibeth::TICKS_PER_FRAME as f64).ceil() as usize;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = Emulated::new();
    if links.is_empty() {
        return Ok(out);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = links
            .chunks(links.len().div_ceil(workers))
            .map(|chunk| {
                let detector = &detector;
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&link| (link, emulate_link(detector, link, frames)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (link, emulated) in h.join().expect("emulator thread") {
                out.insert(link as usize, emulated);
            }
        }
    });
    Ok(out)
}

fn emulate_link(detector: &Detector, link: u32, frames: usize) -> EmulatedLink {
    let mut sim = detector.link(link, FrameFormat::WibEth, START_TIMESTAMP);
    let mut bytes = vec![0u8; frames * wibeth::FRAME_SIZE];
    for f in bytes.chunks_exact_mut(wibeth::FRAME_SIZE) {
        sim.next_frame(f);
    }
    let channels = wibeth::NUM_CHANNELS;
    EmulatedLink {
        template: Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            bytes.chunks_exact(wibeth::FRAME_SIZE),
        )),
        channel_ids: (0..channels).map(|c| sim.channel_info(c).0).collect(),
        truth: LinkTruth {
            pulses: sim.drain_truth(),
            sigma: (0..channels).map(|c| sim.expected_noise_sigma(c)).collect(),
            collection: (0..channels)
                .map(|c| sim.channel_info(c).1.is_collection())
                .collect(),
            span_ticks: frames as u64 * wibeth::TICKS_PER_FRAME,
        },
    }
}
