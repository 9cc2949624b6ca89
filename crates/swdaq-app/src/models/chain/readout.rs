//! The readout side of `swdaq run`, shared by the one-process chain and the readout
//! application: one thread per group of links (latency buffer, source as `[source]` says,
//! hit finding), each link's TPs handed to the trigger in batches with a horizon, and the
//! link reports and hit-finding score at the end.

use super::config::RunConfig;
use super::inputs::{Feed, Inputs, LinkInput, SourceLabel, TruthByLink};
use super::pass_score::PassScorer;
use super::roi_score::RoiScorer;
use anyhow::{Context, anyhow};
use crossbeam_channel::{Sender, TrySendError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};
use swdaq_dataflow::TriggerInput;
use swdaq_format::FrameFormat;
use swdaq_format::SourceId;
use swdaq_monitor::Registry;
use swdaq_readout::board::{BoardFraming, BoardProcessor, ProcessCounts, board_source};
use swdaq_readout::checks::CheckCounts;
use swdaq_readout::decoded::DecodedSource;
use swdaq_readout::hit_finding::HitFindingObserver;
use swdaq_readout::link::LinkMetrics;
use swdaq_readout::link::{FrameObserver, Ingest, LinkShared};
use swdaq_readout::replay::ReplaySource;
use swdaq_readout::ring::{SlotMeta, SlotRun};
use swdaq_readout::roi::RoiLink;
use swdaq_readout::source::{Batch, FrameSource, Poll};
use swdaq_readout::thread::{LinkState, pin_current_thread, run_links};
use swdaq_readout::tp_buffer::TpBuffer;
use swdaq_readout::udp::UdpSource;
use swdaq_tpg::quality::Score;
use swdaq_tpg::{HitFinder, Implementation, Plane};
use swdaq_trigger::TpBatch;

/// A link's TPs go to the trigger at least this often in data time.
const TP_BATCH_SECONDS: f64 = 1e-3;

/// The largest datagram a board link takes (the most UDP carries).
const MAX_BOARD_DATAGRAM: usize = 65_536;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LinkReport {
    pub source_id: u32,
    /// Where the frames came from.
    pub source: SourceLabel,
    pub frames: u64,
    pub bytes: u64,
    pub dropped: u64,
    /// Kept in the report so a readout application's counts reach the summary.
    pub checks: CheckCounts,
    pub trigger_primitives: u64,
    /// TP batches the trigger's queue could not take (counted, never silent).
    pub tp_batches_dropped: u64,
    pub noisy_channels: Vec<u32>,
    /// What the link's decoder could not make a good frame of (a board link; 0 otherwise).
    pub decode_errors: u64,
    /// A board link's processing by its plugin.
    pub processing: Option<ProcessCounts>,
    /// The source ended before the run did (a stopped link), or failed (the error).
    pub ended_early: bool,
    pub error: Option<String>,
}

/// A link's two buffers: raw frames and trigger primitives.
type LinkBuffers = (Arc<LinkShared>, Arc<TpBuffer>);

/// Start gate for the readout threads: all links start their clocks together, or none run;
/// and the stop flag.
pub struct ReadoutControl {
    gate: AtomicU8,
    running: AtomicBool,
}

const WAIT: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

impl Default for ReadoutControl {
    fn default() -> Self {
        Self {
            gate: AtomicU8::new(WAIT),
            running: AtomicBool::new(true),
        }
    }
}

impl ReadoutControl {
    /// Every link starts taking data.
    pub fn go(&self) {
        self.gate.store(GO, Ordering::Release);
    }

    /// Every link stops (after `go`), or never starts (before it).
    pub fn stop(&self) {
        self.running.store(false, Ordering::Release);
        let _ = self
            .gate
            .compare_exchange(WAIT, ABORT, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The readout threads of a set of links, started and waiting at the gate.
pub struct ReadoutSet<'scope> {
    threads: Vec<ScopedJoinHandle<'scope, anyhow::Result<Vec<LinkOutput<'scope>>>>>,
    /// Each link's latency buffer and TP buffer, for the request server.
    pub raw: Vec<Arc<LinkShared>>,
    pub tps: Vec<Arc<TpBuffer>>,
    /// With `readout.roi.enabled`: every link, answered in regions of interest.
    pub roi: Arc<Vec<RoiLink>>,
    /// With ROI readout and truth: the request server scores the regions it sends.
    pub roi_scorer: Option<RoiScorer>,
}

/// What the readout reports at the end.
pub struct ReadoutOutcome {
    pub links: Vec<LinkReport>,
    /// `None` when no link has truth to score against.
    pub hit_finding: Option<Score>,
}

/// Starts the readout threads of the links in `inputs` (`readout.links_per_thread` each),
/// whose TPs go to `tps`; they create their buffers and wait for `control.go()`.
pub fn start_readout<'scope, 'env>(
    s: &'scope Scope<'scope, 'env>,
    config: &'env RunConfig,
    inputs: &'env Inputs,
    control: &'env ReadoutControl,
    registry: &'env Registry,
    tps: Sender<TriggerInput>,
) -> anyhow::Result<ReadoutSet<'scope>> {
    let links: Vec<usize> = inputs.keys().copied().collect();
    let (setup_tx, setup_rx) = crossbeam_channel::unbounded::<(usize, LinkBuffers)>();
    let mut threads = Vec::new();
    for (k, group) in links
        .chunks(config.readout.links_per_thread as usize)
        .enumerate()
    {
        let ctx = ReadoutThread {
            config,
            inputs,
            links: group.to_vec(),
            core: config.readout.pin_cores.get(k).copied(),
            registry,
            name: format!("readout-{k}"),
            setup: setup_tx.clone(),
            control,
            tps: tps.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name(ctx.name.clone())
                .spawn_scoped(s, move || ctx.run())?,
        );
    }
    drop(setup_tx);
    let mut shared: HashMap<usize, LinkBuffers> = setup_rx.iter().take(links.len()).collect();
    if shared.len() < links.len() {
        control.stop();
        let errors: Vec<String> = threads
            .into_iter()
            .filter_map(|h| h.join().ok()?.err().map(|e| format!("{e:#}")))
            .collect();
        return Err(anyhow!("readout did not start: {}", errors.join("; ")));
    }
    let (raw, tps): (Vec<_>, Vec<_>) = links
        .iter()
        .map(|i| shared.remove(i).expect("every link reported"))
        .unzip();
    let roi = Arc::new(roi_links(config, inputs, &tps)?);
    let roi_scorer = config
        .readout
        .roi
        .enabled
        .then(|| RoiScorer::new(inputs))
        .flatten();
    Ok(ReadoutSet {
        threads,
        raw,
        tps,
        roi,
        roi_scorer,
    })
}

/// The links' ROI readout when `readout.roi` enables it (`tps` in `inputs`' order).
fn roi_links(
    config: &RunConfig,
    inputs: &Inputs,
    tps: &[Arc<TpBuffer>],
) -> anyhow::Result<Vec<RoiLink>> {
    if !config.readout.roi.enabled {
        return Ok(Vec::new());
    }
    inputs
        .iter()
        .zip(tps)
        .map(|((&i, input), tps)| {
            RoiLink::new(
                SourceId::readout(i as u32),
                config.readout.roi.regions(),
                input.format,
                &input.channel_ids,
                Arc::clone(tps),
            )
            .map_err(|e| anyhow!("invalid configuration: readout.roi: {e}"))
        })
        .collect()
}

impl ReadoutSet<'_> {
    /// Each link's number and latency buffer.
    pub fn links(&self) -> Vec<(u32, Arc<LinkShared>)> {
        self.raw
            .iter()
            .map(|l| (l.source_id.id, Arc::clone(l)))
            .collect()
    }

    /// Every link has ended (sources finished or failed).
    pub fn all_ended(&self) -> bool {
        self.threads.iter().all(|h| h.is_finished())
    }

    /// Waits for the threads (after `control.stop()`) and completes their hit-finding score
    /// against the inputs' truth, or `truth_at_end` (see [`super::inputs::truth_at_end`]).
    pub fn join(self, truth_at_end: Option<&TruthByLink>) -> anyhow::Result<ReadoutOutcome> {
        let mut links = Vec::new();
        let mut hit_finding: Option<Score> = None;
        for h in self.threads {
            let out = h
                .join()
                .map_err(|_| anyhow!("a readout thread panicked"))??;
            for (i, report, scorer, horizon) in out {
                links.push((i, report));
                let at_end =
                    truth_at_end.map(|t| t.get(&(i as u32)).map_or(&[][..], Vec::as_slice));
                if let Some(score) = scorer.finish(horizon, at_end) {
                    hit_finding.get_or_insert_default().add(&score);
                }
            }
        }
        links.sort_by_key(|(i, _)| *i);
        Ok(ReadoutOutcome {
            links: links.into_iter().map(|(_, r)| r).collect(),
            hit_finding,
        })
    }
}

/// One readout thread: its links' buffers, sources, hit finders and TP forwarding.
struct ReadoutThread<'a> {
    config: &'a RunConfig,
    inputs: &'a Inputs,
    links: Vec<usize>,
    core: Option<usize>,
    registry: &'a Registry,
    name: String,
    setup: Sender<(usize, LinkBuffers)>,
    control: &'a ReadoutControl,
    tps: Sender<TriggerInput>,
}

/// Per link: the link's report, its hit-finding score so far and how far its data got.
type LinkOutput<'a> = (usize, LinkReport, PassScorer<'a>, u64);

impl<'a> ReadoutThread<'a> {
    fn run(self) -> anyhow::Result<Vec<LinkOutput<'a>>> {
        if let Some(core) = self.core {
            pin_current_thread(core)
                .with_context(|| format!("readout.pin_cores: {}", self.name))?;
        }
        // Created here, after pinning, so the buffers' pages are first touched (and placed)
        // on this core's NUMA node.
        let mut shared = Vec::new();
        let mut sources = Vec::new();
        for &i in &self.links {
            let input = &self.inputs[&i];
            let link = LinkShared::new(
                SourceId::readout(i as u32),
                input.format,
                self.config.readout.buffer_s,
            )
            .with_context(|| format!("allocating the latency buffer of link {i}"))?;
            let tps = TpBuffer::new(
                SourceId::trigger(i as u32),
                (self.config.readout.buffer_s * input.format.clock_hz()) as u64,
                input.first_timestamp,
            );
            shared.push((Arc::new(link), Arc::new(tps)));
            // Before the run is ready: a UDP address taken fails the start, and datagrams
            // sent once it is ready wait in the socket.
            sources.push(
                LinkSource::open(self.config, input, i).with_context(|| format!("link {i}"))?,
            );
        }
        for (&i, buffers) in self.links.iter().zip(&shared) {
            self.setup.send((i, buffers.clone()))?;
        }
        loop {
            match self.control.gate.load(Ordering::Acquire) {
                GO => break,
                ABORT => return Ok(Vec::new()),
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let mut ingests = Vec::new();
        let mut taps = Vec::new();
        for ((&i, (link, tp_buffer)), mut source) in self.links.iter().zip(&shared).zip(sources) {
            let input = &self.inputs[&i];
            source.start_clock();
            let ingest = Ingest::new(link, source, self.observer(input, i)?)
                .expect("one ingest loop per link")
                .with_metrics(LinkMetrics::register(
                    self.registry,
                    &self.name,
                    i as u32,
                    link.source_id,
                )?);
            ingests.push(ingest);
            taps.push(TpTap {
                link: i,
                buffer: Arc::clone(tp_buffer),
                sent_horizon: 0,
                scorer: PassScorer::new(input),
                source: input.label.clone(),
                batches_dropped: 0,
                batch_ticks: (input.format.clock_hz() * TP_BATCH_SECONDS) as u64,
                ended: false,
            });
        }
        let idle = Duration::from_micros(self.config.readout.idle_sleep_us);
        let results = run_links(
            &mut ingests,
            || self.control.running.load(Ordering::Acquire),
            idle,
            |k, ingest, state| taps[k].forward(ingest.observer_mut(), state, &self.tps),
        );
        let mut out = Vec::new();
        for ((mut ingest, mut tap), result) in ingests.into_iter().zip(taps).zip(results) {
            // A link that ended inside the loop did so before the run was told to stop.
            let ended_early = tap.ended;
            if !ended_early {
                tap.forward(ingest.observer_mut(), LinkState::Ended, &self.tps);
            }
            out.push(tap.report(ingest, result, ended_early));
        }
        Ok(out)
    }

    /// What reads the link's frames in place: the hit finder, or a board's processor plugin.
    fn observer(&self, input: &LinkInput, link: usize) -> anyhow::Result<LinkObserver> {
        let FrameFormat::Board(frames) = input.format else {
            return Ok(LinkObserver::Hits(self.hit_finder(input)?));
        };
        let board = &self.config.source.board;
        let processor = board
            .processor
            .as_ref()
            .map(|p| p.make())
            .transpose()
            .map_err(|e| anyhow!("source.board.processor: {e}"))?;
        Ok(LinkObserver::Board(BoardProcessor::new(
            format!("chain: link {link}"),
            processor,
            frames,
            board.hit_ticks(),
        )))
    }

    fn hit_finder(&self, input: &LinkInput) -> anyhow::Result<HitFindingObserver> {
        let hf = &self.config.hit_finding;
        let planes: Vec<Plane> = input
            .collection
            .iter()
            .map(|&c| {
                if c {
                    Plane::Collection
                } else {
                    Plane::Induction
                }
            })
            .collect();
        let mut finder = HitFinder::with_algorithms(
            hf.threshold,
            &hf.algorithms,
            &planes,
            input.channel_ids.clone(),
            input.format.ticks_per_sample(),
            swdaq_format::DETECTOR_ID_HD_TPC as u8,
            Implementation::best(),
        )
        .and_then(|f| f.with_adc_bits(input.format.adc_bits()))?;
        for &channel in &hf.masked_channels {
            if let Some(c) = finder.index_of(channel) {
                finder.set_masked(c, true, &mut Vec::new());
            }
        }
        let observer = HitFindingObserver::new(finder, input.format);
        Ok(if hf.detect_noisy_channels {
            observer.with_noisy_channel_detection(hf.noisy)
        } else {
            observer
        })
    }
}

/// Hands one link's TPs to the trigger, and to the hit-finding score.
struct TpTap<'a> {
    link: usize,
    /// The link's requestable TP buffer.
    buffer: Arc<TpBuffer>,
    sent_horizon: u64,
    scorer: PassScorer<'a>,
    source: SourceLabel,
    batches_dropped: u64,
    /// Data time between two batches to the trigger (about a millisecond).
    batch_ticks: u64,
    ended: bool,
}

impl<'a> TpTap<'a> {
    fn forward(
        &mut self,
        observer: &mut LinkObserver,
        state: LinkState,
        trigger: &Sender<TriggerInput>,
    ) {
        if self.ended {
            return;
        }
        let ending = state == LinkState::Ended;
        if ending {
            observer.finish();
        } else {
            observer.end_of_burst();
        }
        let horizon = observer.horizon();
        if !ending && horizon < self.sent_horizon + self.batch_ticks {
            return;
        }
        let mut tps = Vec::new();
        observer.take_tps(&mut tps);
        self.buffer.push(&tps, horizon);
        self.scorer.add(&tps, horizon);
        let batch = TpBatch {
            link: self.link,
            tps,
            horizon,
            released_at: Instant::now(),
        };
        // Never block ingest on the trigger: a full queue costs the batch, counted. (Once the
        // trigger has ended at run stop, nobody listens: nothing is lost.)
        if let Err(TrySendError::Full(_)) = trigger.try_send(TriggerInput::Tps(batch)) {
            self.batches_dropped += 1;
        }
        self.sent_horizon = horizon;
        if ending {
            self.ended = true;
            // The end must arrive (the trigger waits for it); the trigger always drains.
            let _ = trigger.send(TriggerInput::LinkEnded(self.link));
        }
    }

    fn report(
        self,
        ingest: Ingest<'_, LinkSource, LinkObserver>,
        result: std::io::Result<()>,
        ended_early: bool,
    ) -> LinkOutput<'a> {
        let observer = ingest.observer();
        let report = LinkReport {
            source_id: self.link as u32,
            source: self.source,
            frames: ingest.counts.frames,
            bytes: ingest.counts.bytes,
            dropped: ingest.counts.dropped,
            checks: ingest.checker.counts,
            trigger_primitives: observer.tps_found(),
            tp_batches_dropped: self.batches_dropped,
            noisy_channels: observer.noisy_channels(),
            decode_errors: ingest.source().decode_errors(),
            processing: observer.processing(),
            ended_early,
            error: result.err().map(|e| e.to_string()),
        };
        (self.link, report, self.scorer, observer.horizon())
    }
}

/// A link's source as `[source]` chose it.
pub enum LinkSource {
    Replay(ReplaySource),
    Udp(UdpSource),
    /// A detector's own board: its datagrams decoded into board frames.
    Board(Box<DecodedSource<BoardFraming>>),
}

impl LinkSource {
    fn open(config: &RunConfig, input: &LinkInput, link: usize) -> anyhow::Result<Self> {
        Ok(match &input.feed {
            Feed::Replay {
                template,
                real_time,
                limit,
            } => {
                let pace = real_time.then_some(input.format.frame_rate_hz());
                // Frames land in memory as a front-end card's DMA would put them (not in cache).
                Self::Replay(
                    ReplaySource::new(Arc::clone(template), pace, *limit).with_streaming_stores(),
                )
            }
            Feed::Udp(addr) => {
                let socket = UdpSource::bind(*addr)
                    .with_context(|| format!("source.udp_address: cannot bind {addr}"))?;
                let FrameFormat::Board(frames) = input.format else {
                    return Ok(Self::Udp(socket));
                };
                let board = board_source(
                    format!("chain: link {link}"),
                    Box::new(socket),
                    MAX_BOARD_DATAGRAM,
                    &config.source.board.decoder,
                    frames,
                )
                .map_err(|e| anyhow!("source.board.decoder: {e}"))?;
                Self::Board(Box::new(board))
            }
        })
    }

    /// Paced replay counts its deadlines from now (the run's start), not from set-up.
    fn start_clock(&mut self) {
        if let Self::Replay(replay) = self {
            replay.start_clock();
        }
    }

    fn source(&self) -> &dyn FrameSource {
        match self {
            Self::Replay(s) => s,
            Self::Udp(s) => s,
            Self::Board(s) => s.as_ref(),
        }
    }

    fn source_mut(&mut self) -> &mut dyn FrameSource {
        match self {
            Self::Replay(s) => s,
            Self::Udp(s) => s,
            Self::Board(s) => s.as_mut(),
        }
    }
}

impl FrameSource for LinkSource {
    fn next_frame(&mut self, slot: &mut [u8]) -> std::io::Result<Poll> {
        self.source_mut().next_frame(slot)
    }

    fn batch_size(&self) -> usize {
        self.source().batch_size()
    }

    fn next_frames(&mut self, run: &mut SlotRun<'_>, lens: &mut [usize]) -> std::io::Result<Batch> {
        self.source_mut().next_frames(run, lens)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.source().kernel_drops()
    }

    fn decode_errors(&self) -> u64 {
        self.source().decode_errors()
    }
}

/// What reads a link's frames in place on its thread.
// One per link, made once and never moved while frames flow: its size costs nothing, and
// boxing the hit finder would add a pointer chase per frame.
#[allow(clippy::large_enum_variant)]
pub enum LinkObserver {
    Hits(HitFindingObserver),
    Board(BoardProcessor),
}

impl LinkObserver {
    fn horizon(&self) -> u64 {
        match self {
            Self::Hits(h) => h.horizon(),
            Self::Board(b) => b.horizon(),
        }
    }

    fn take_tps(&mut self, out: &mut Vec<swdaq_format::TriggerPrimitive>) {
        match self {
            Self::Hits(h) => h.take_tps(out),
            Self::Board(b) => b.take_tps(out),
        }
    }

    /// A burst of the link's frames was read: a board's plugin gets them in one call.
    fn end_of_burst(&mut self) {
        if let Self::Board(b) = self {
            b.process_pending();
        }
    }

    fn finish(&mut self) {
        match self {
            Self::Hits(h) => h.finish(),
            Self::Board(b) => b.finish(),
        }
    }

    fn noisy_channels(&self) -> Vec<u32> {
        match self {
            Self::Hits(h) => h.noisy_channels().iter().map(|n| n.channel).collect(),
            Self::Board(_) => Vec::new(),
        }
    }

    fn processing(&self) -> Option<ProcessCounts> {
        match self {
            Self::Hits(_) => None,
            Self::Board(b) => Some(b.counts()),
        }
    }
}

impl FrameObserver for LinkObserver {
    fn observe(&mut self, meta: &SlotMeta, frame: &[u8]) {
        match self {
            Self::Hits(h) => h.observe(meta, frame),
            Self::Board(b) => b.observe(meta, frame),
        }
    }

    fn tps_found(&self) -> u64 {
        match self {
            Self::Hits(h) => h.tps_found(),
            Self::Board(b) => b.tps_found(),
        }
    }
}
