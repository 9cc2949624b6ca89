//! The emulated front end of `swdaq run`: each link's data is generated once at start (by
//! `swdaq-sim`, with its truth) and replayed in a loop by the readout's emulator source.

use super::config::EmulatorSection;
use super::inputs::{Feed, Inputs, LinkInput, SourceLabel, channel_map};
use std::sync::Arc;
use swdaq_format::FrameFormat;
use swdaq_readout::replay::ReplayTemplate;
use swdaq_sim::Detector;

/// Data time of the first frame: one second in, so windows before early triggers exist.
pub const START_TIMESTAMP: u64 = 62_500_000;

/// Generates the templates of `links` in `format` (each link's data depends only on the
/// configuration and its number, so applications that share the configuration agree on
/// every link), spreading links over the machine's cores.
pub fn emulate(
    config: &EmulatorSection,
    format: FrameFormat,
    links: &[u32],
) -> anyhow::Result<Inputs> {
    let detector = Detector::new(config.sim.clone())?;
    let frames =
        (config.template_s * format.clock_hz() / format.ticks_per_frame() as f64).ceil() as usize;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = Inputs::new();
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
                        .map(|&link| (link, emulate_link(config, detector, format, link, frames)))
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

fn emulate_link(
    config: &EmulatorSection,
    detector: &Detector,
    format: FrameFormat,
    link: u32,
    frames: usize,
) -> LinkInput {
    let mut sim = detector.link(link, format, START_TIMESTAMP);
    let size = format.frame_size();
    let mut bytes = vec![0u8; frames * size];
    for f in bytes.chunks_exact_mut(size) {
        sim.next_frame(f);
    }
    let (channel_ids, collection, sigma) = channel_map(&sim, format);
    let limit = config
        .stop_links
        .iter()
        .find(|s| s.link == link)
        .map(|s| (s.after_s * format.frame_rate_hz()).round() as u64);
    LinkInput {
        format,
        feed: Feed::Replay {
            template: Arc::new(ReplayTemplate::new(format, bytes.chunks_exact(size))),
            real_time: config.real_time,
            limit,
        },
        channel_ids,
        collection,
        sigma,
        first_timestamp: START_TIMESTAMP,
        span_ticks: Some(frames as u64 * format.ticks_per_frame()),
        truth: Some(sim.drain_truth()),
        label: SourceLabel::Emulator,
    }
}
