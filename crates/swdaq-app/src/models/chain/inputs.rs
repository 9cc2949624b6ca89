//! What each link of `swdaq run` reads (`[source]`), and what is known about its data: the
//! emulator's template, a raw file read into memory, or a UDP address; the channel map the
//! hit finder needs; the truth to score hit finding against, when there is one.

use super::config::{EmulatorSection, RunConfig, SourceKind};
use anyhow::{Context, ensure};
use std::collections::BTreeMap;
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use swdaq_format::FrameFormat;
use swdaq_format::rawfile::{RawFileReader, link_path};
use swdaq_readout::replay::ReplayTemplate;
use swdaq_sim::{Detector, LinkSimulator, TruePulse};

/// Where a link's frames come from.
pub enum Feed {
    /// Frames held in memory (emulated, or read from a file), replayed in a loop with
    /// timestamps continuing; `limit`: stop after this many frames.
    Replay {
        template: Arc<ReplayTemplate>,
        real_time: bool,
        limit: Option<u64>,
    },
    /// Datagrams received at this address.
    Udp(SocketAddr),
}

/// True pulses by link, from `swdaq gen`'s `truth_pulses.csv`.
pub type TruthByLink = BTreeMap<u32, Vec<TruePulse>>;

pub struct LinkInput {
    pub format: FrameFormat,
    pub feed: Feed,
    /// Offline channel number of each of the frame's channels, and whether it collects.
    pub channel_ids: Vec<u32>,
    pub collection: Vec<bool>,
    /// Expected noise sigma per channel index.
    pub sigma: Vec<f64>,
    /// Data time of the link's first frame.
    pub first_timestamp: u64,
    /// The data's first pass covers `[first_timestamp, first_timestamp + span)`; `None`: as
    /// far as the data goes.
    pub span_ticks: Option<u64>,
    /// What its hit finding is scored against; `None`: no truth (or, for UDP, not yet).
    pub truth: Option<Vec<TruePulse>>,
    pub label: SourceLabel,
}

/// Which source a link read, as the summary names it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceLabel {
    #[default]
    Emulator,
    File(PathBuf),
    Udp(SocketAddr),
}

impl std::fmt::Display for SourceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Emulator => write!(f, "emulator"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Udp(addr) => write!(f, "udp {addr}"),
        }
    }
}

/// Inputs by link number.
pub type Inputs = BTreeMap<usize, LinkInput>;

/// Prepares the inputs of `links` as `config.source` says; every error names its key.
pub fn prepare(config: &RunConfig, links: &[u32]) -> anyhow::Result<Inputs> {
    let source = &config.source;
    let format = source.frame_format();
    if source.kind == SourceKind::Emulator {
        return emulate(&config.emulator, format, links);
    }
    let detector = Detector::new(config.emulator.sim.clone())?;
    let mut inputs = Inputs::new();
    for &link in links {
        let (channel_ids, collection, sigma) = if let FrameFormat::Board(_) = format {
            // A detector's own board: its channels are its processor plugin's business.
            (Vec::new(), Vec::new(), Vec::new())
        } else {
            // The simulator only lends its channel map and noise model; it generates nothing.
            channel_map(&detector.link(link, format, 0), format)
        };
        let (feed, first_timestamp, span_ticks, label) = if source.kind == SourceKind::File {
            let (template, first) = read_file(config, format, link)?;
            let span = template.len() as u64 * format.ticks_per_frame();
            let label = SourceLabel::File(link_path(&source.directory, link));
            let limit = (!source.loop_files).then_some(template.len() as u64);
            let feed = Feed::Replay {
                template: Arc::new(template),
                real_time: source.real_time,
                limit,
            };
            (feed, first, Some(span), label)
        } else {
            let addr = udp_address(&source.udp_address, link)?;
            (
                Feed::Udp(addr),
                source.first_timestamp,
                None,
                SourceLabel::Udp(addr),
            )
        };
        inputs.insert(
            link as usize,
            LinkInput {
                format,
                feed,
                channel_ids,
                collection,
                sigma,
                first_timestamp,
                span_ticks,
                truth: None,
                label,
            },
        );
    }
    // A UDP run's truth is read when it ends: the generator writes it once it has sent all.
    if source.kind == SourceKind::File
        && let Some(mut by_link) = read_truth(config)?
    {
        for (&link, input) in &mut inputs {
            input.truth = Some(by_link.remove(&(link as u32)).unwrap_or_default());
        }
    }
    Ok(inputs)
}

/// A UDP run's truth (`source.truth`), read as the run ends; `None` for other sources, or
/// when it cannot be read (said on stderr: the run's data is not at fault).
pub fn truth_at_end(config: &RunConfig) -> Option<TruthByLink> {
    if config.source.kind != SourceKind::Udp {
        return None;
    }
    read_truth(config).unwrap_or_else(|e| {
        eprintln!("hit finding not scored: {e:#}");
        None
    })
}

/// Offline channel numbers, collection flags and expected noise sigmas of a link's channels.
pub fn channel_map(sim: &LinkSimulator, format: FrameFormat) -> (Vec<u32>, Vec<bool>, Vec<f64>) {
    let channels = 0..format.channels();
    (
        channels.clone().map(|c| sim.channel_info(c).0).collect(),
        channels
            .clone()
            .map(|c| sim.channel_info(c).1.is_collection())
            .collect(),
        channels.map(|c| sim.expected_noise_sigma(c)).collect(),
    )
}

/// Link `link`'s address: `source.udp_address` with its port + `link`.
fn udp_address(base: &str, link: u32) -> anyhow::Result<SocketAddr> {
    let addr: SocketAddr = base
        .parse()
        .with_context(|| format!("source.udp_address: {base:?}"))?;
    swdaq_readout::udp::port_offset(addr, link as usize)
        .with_context(|| format!("source.udp_address: link {link}"))
}

/// Link `link`'s raw file, all of it, as a template; and the timestamp of its first frame.
fn read_file(
    config: &RunConfig,
    format: FrameFormat,
    link: u32,
) -> anyhow::Result<(ReplayTemplate, u64)> {
    let path = link_path(&config.source.directory, link);
    let file = swdaq_format::input_file::open_regular(&path)
        .with_context(|| format!("source.directory: cannot open {}", path.display()))?;
    let mut reader = RawFileReader::new(BufReader::new(file))
        .with_context(|| format!("{} is not a swdaq raw file", path.display()))?;
    let header = *reader.header();
    ensure!(
        header.frame_type == format.fragment_type()
            && header.frame_size as usize == format.frame_size(),
        "source.format = {:?}: {} holds frames of type {} and {} bytes, not {} ({} bytes)",
        format.name(),
        path.display(),
        header.frame_type.0,
        header.frame_size,
        format.name(),
        format.frame_size()
    );
    let mut frames = Vec::new();
    let mut frame = Vec::new();
    while reader
        .next_frame(&mut frame)
        .with_context(|| format!("reading {}", path.display()))?
    {
        // A copy of the record's length, not the reused buffer: a damaged file's short
        // records must cost their own size, not a whole frame's capacity each.
        frames.push(frame.clone());
    }
    ensure!(!frames.is_empty(), "{} holds no frames", path.display());
    let first = frames
        .iter()
        .find_map(|f| format.header(f))
        .map_or(header.first_timestamp, |h| h.timestamp);
    let template = ReplayTemplate::new(format, frames.iter().map(Vec::as_slice));
    Ok((template, first))
}

/// `source.truth`'s pulses by link, or `None` when there is no truth file.
fn read_truth(config: &RunConfig) -> anyhow::Result<Option<TruthByLink>> {
    let path = &config.source.truth;
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let pulses: Vec<TruePulse> = swdaq_sim::truth::read_csv(path)
        .with_context(|| format!("source.truth: cannot read {}", path.display()))?;
    let mut by_link = TruthByLink::new();
    for p in pulses {
        by_link.entry(p.link).or_default().push(p);
    }
    Ok(Some(by_link))
}

/// Truth scoring's tests: a link of known shape whose truth they choose.
/// The emulated front end: each link's data is generated once at start (by `swdaq-sim`,
/// with its truth) and replayed in a loop by the readout's emulator source.
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

#[cfg(test)]
pub(crate) mod test_link {
    use super::{Feed, LinkInput, SourceLabel};
    use swdaq_format::FrameFormat;
    use swdaq_sim::TruePulse;

    /// Data time of the first frame.
    pub const START: u64 = 1_000;
    /// Ticks of one replay pass.
    pub const SPAN: u64 = 100_000;

    /// A WIBEth link of 64 collection channels (offline 100..164, noise 1 ADC) replayed in
    /// passes of `SPAN` ticks from `START`, with `truth` as its first pass's pulses.
    pub fn with_truth(truth: Vec<TruePulse>) -> LinkInput {
        LinkInput {
            format: FrameFormat::WibEth,
            feed: Feed::Udp("127.0.0.1:9".parse().unwrap()),
            channel_ids: (100..164).collect(),
            collection: vec![true; 64],
            sigma: vec![1.0; 64],
            first_timestamp: START,
            span_ticks: Some(SPAN),
            truth: Some(truth),
            label: SourceLabel::Emulator,
        }
    }
}
