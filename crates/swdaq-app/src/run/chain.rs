//! The whole chain on one machine, wired from the library crates:
//!
//! ```text
//! emulated links ─▶ readout threads (latency buffers + hit finding) ─TPs─▶ trigger
//!                        ▲                                                   │ decisions
//!                        └── request server ◀─requests── record builder ◀───┘
//!                                   └──────fragments──────▶ │ records ──▶ storage (HDF5)
//!                                           credits ◀───────┘
//! ```
//!
//! Every stage is a thread; they talk through bounded channels (the dataflow transport).
//! Shutdown runs down the chain: readout stops and reports its links ended, the trigger
//! issues what is left and closes, the builder finishes every record (complete or flagged)
//! and storage closes its files.

use super::config::RunConfig;
use super::emulator::{EmulatedLink, START_TIMESTAMP, emulate};
use super::metrics::{BuilderMetrics, TriggerMetrics};
use super::sink::StorageSink;
use crate::truth_match::Score;
use anyhow::{Context, anyhow};
use crossbeam_channel::{Sender, TrySendError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::nodes::{BuilderPorts, run_builder, run_trigger};
use swdaq_dataflow::transport::local;
use swdaq_dataflow::{
    BuildOutcome, BuilderConfig, BuilderReport, CreditsToTrigger, RecordBuilder,
    StorageFailurePolicy, TriggerInput, TriggerReport,
};
use swdaq_format::FrameFormat;
use swdaq_format::{SourceId, TriggerPrimitive, wibeth};
use swdaq_monitor::proc::{ThreadStat, USER_HZ, read_threads};
use swdaq_monitor::{MetricsServer, Registry, Snapshot, StatsThread};
use swdaq_readout::checks::CheckCounts;
use swdaq_readout::hit_finding::HitFindingObserver;
use swdaq_readout::link::{FrameObserver, Ingest, LinkShared};
use swdaq_readout::metrics::{LinkMetrics, ServerMetrics};
use swdaq_readout::replay::ReplaySource;
use swdaq_readout::request::{DataRequest, RequestPolicy};
use swdaq_readout::server::{DataResponse, ServerConfig, ServerCounts, serve};
use swdaq_readout::thread::{LinkState, pin_current_thread, run_links};
use swdaq_readout::tp_buffer::TpBuffer;
use swdaq_store::StoreReport;
use swdaq_tpg::{HitFinder, Implementation, Plane};
use swdaq_trigger::config::TICKS_PER_SECOND;
use swdaq_trigger::{TpBatch, Trigger};

/// A link's TPs go to the trigger at least this often in data time (about 1 ms).
const TP_BATCH_TICKS: u64 = 65_536;
/// Poll period of the trigger, builder and request server loops.
const NODE_POLL: Duration = Duration::from_millis(1);

/// Why the run ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum StopReason {
    Duration,
    Interrupted,
    AllLinksEnded,
    StorageFailed(String),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LinkReport {
    pub source_id: u32,
    pub frames: u64,
    pub bytes: u64,
    pub dropped: u64,
    #[serde(skip)]
    pub checks: CheckCounts,
    pub trigger_primitives: u64,
    /// TP batches the trigger's queue could not take (counted, never silent).
    pub tp_batches_dropped: u64,
    pub noisy_channels: Vec<u32>,
    /// The source ended before the run did (a stopped link), or failed (the error).
    pub ended_early: bool,
    pub error: Option<String>,
}

#[derive(Debug)]
pub struct RunReport {
    pub seconds: f64,
    pub stop_reason: StopReason,
    pub links: Vec<LinkReport>,
    pub trigger: TriggerReport,
    pub builder: BuilderReport,
    pub server: ServerCounts,
    pub storage: Option<StoreReport>,
    /// Hit finding against the emulator's truth, over each link's first replay pass.
    pub hit_finding: Score,
    /// Share of one core each thread used while data was taken (from /proc), by name.
    pub thread_cpu: Vec<(String, f64)>,
}

/// What the status view shows, read from the monitoring snapshot.
pub struct Status<'a> {
    pub elapsed: Duration,
    pub snapshot: &'a Snapshot,
    pub links: usize,
}

/// A link's two buffers: raw frames and trigger primitives.
type LinkBuffers = (Arc<LinkShared>, Arc<TpBuffer>);

/// Start gate for the readout threads: all links start their clocks together, or none run.
const WAIT: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

/// Runs the chain until the configured duration, `interrupt`, storage failure (by policy) or
/// the end of every link; `on_status` is called every status interval.
pub fn run_chain(
    config: &RunConfig,
    interrupt: &AtomicBool,
    mut on_status: impl FnMut(&Status<'_>),
) -> anyhow::Result<RunReport> {
    config.validate()?;
    for &core in &config.readout.pin_cores {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        if !cores.iter().any(|c| c.id == core) {
            return Err(anyhow!(
                "invalid configuration: readout.pin_cores: core {core} is not available (this machine offers {:?})",
                cores.iter().map(|c| c.id).collect::<Vec<_>>()
            ));
        }
    }
    // Snapshots at least every second, so a status line is never more than 1 s stale.
    let interval = Duration::from_secs_f64(config.run.status_interval_s.min(1.0));
    let registry = Registry::new();
    let stats = StatsThread::spawn(registry.clone(), interval)?;
    let metrics_server =
        match config.run.metrics_addr.as_str() {
            "" => None,
            addr => {
                let addr = addr.parse().expect("validated");
                Some(MetricsServer::start(addr, stats.cell()).with_context(|| {
                    format!("run.metrics_addr = {addr:?}: cannot serve /metrics")
                })?)
            }
        };
    let mut sink = StorageSink::start(config)?;
    let storage_failed = sink.failure_flag();
    let emulated = emulate(&config.emulator)?;
    let n = emulated.len();
    // Each link is read out twice per decision: its raw frames and its TPs.
    let sources: Vec<SourceId> = (0..n as u32)
        .map(SourceId::readout)
        .chain((0..n as u32).map(SourceId::trigger))
        .collect();

    let (tp_tx, tp_rx) = local::<TriggerInput>(1 << 16);
    let (decision_tx, decision_rx) = local(1024);
    let (request_tx, request_rx) = local::<DataRequest>(1 << 14);
    let (response_tx, response_rx) = local::<DataResponse>(1 << 14);
    let (setup_tx, setup_rx) = crossbeam_channel::unbounded::<(usize, LinkBuffers)>();
    let gate = AtomicU8::new(WAIT);
    let readout_running = AtomicBool::new(true);
    let credits = config.dataflow.max_records_in_flight as u64;
    let trigger = Trigger::new(
        config.trigger.clone(),
        n,
        sources.clone(),
        credits,
        Instant::now(),
    )?;
    let mut trigger_metrics = TriggerMetrics::register(&registry)?;
    let builder_metrics = BuilderMetrics::register(&registry)?;
    let builder = RecordBuilder::new(BuilderConfig {
        run_number: config.run.number,
        timeout: Duration::from_millis(config.dataflow.record_timeout_ms),
        element: 0,
    });

    let result = std::thread::scope(|s| -> anyhow::Result<RunReport> {
        let groups: Vec<Vec<usize>> = (0..n)
            .collect::<Vec<_>>()
            .chunks(config.readout.links_per_thread as usize)
            .map(<[usize]>::to_vec)
            .collect();
        let mut readout = Vec::new();
        for (k, group) in groups.into_iter().enumerate() {
            let ctx = ReadoutThread {
                config,
                emulated: &emulated,
                links: group,
                core: config.readout.pin_cores.get(k).copied(),
                registry: &registry,
                name: format!("readout-{k}"),
                setup: setup_tx.clone(),
                gate: &gate,
                running: &readout_running,
                tps: tp_tx.clone(),
            };
            readout.push(
                std::thread::Builder::new()
                    .name(ctx.name.clone())
                    .spawn_scoped(s, move || ctx.run())?,
            );
        }
        drop(setup_tx);
        let mut shared: Vec<Option<LinkBuffers>> = vec![None; n];
        for (i, buffers) in setup_rx.iter().take(n) {
            shared[i] = Some(buffers);
        }
        if shared.iter().any(Option::is_none) {
            gate.store(ABORT, Ordering::Release);
            let errors: Vec<String> = readout
                .into_iter()
                .filter_map(|h| h.join().ok()?.err().map(|e| format!("{e:#}")))
                .collect();
            return Err(anyhow!("readout did not start: {}", errors.join("; ")));
        }
        let (raw, tps): (Vec<_>, Vec<_>) = shared.into_iter().flatten().unzip();

        let server_config = ServerConfig {
            policy: RequestPolicy {
                max_window_ticks: config.trigger.window_before_ticks
                    + config.trigger.window_after_ticks,
            },
            timeout: Duration::from_millis(config.readout.request_timeout_ms),
            poll: NODE_POLL,
        };
        let server_metrics = ServerMetrics::register(&registry, "request-server")?;
        let server = std::thread::Builder::new()
            .name("request-server".into())
            .spawn_scoped(s, move || {
                serve(
                    &raw,
                    &tps,
                    request_rx,
                    response_tx,
                    server_config,
                    Some(server_metrics),
                )
            })?;
        let drain_wait = Duration::from_millis(config.dataflow.record_timeout_ms) * 2;
        let trigger_thread = std::thread::Builder::new()
            .name("trigger".into())
            .spawn_scoped(s, move || {
                run_trigger(
                    trigger,
                    n,
                    tp_rx,
                    decision_tx,
                    NODE_POLL,
                    drain_wait,
                    |t, last| trigger_metrics.publish(t, last),
                )
            })?;
        let routes: HashMap<SourceId, Sender<DataRequest>> =
            sources.iter().map(|&s| (s, request_tx.clone())).collect();
        drop(request_tx);
        let credit_tx = tp_tx.clone();
        let stop_tx = tp_tx;
        let builder_thread = std::thread::Builder::new()
            .name("record-builder".into())
            .spawn_scoped(s, move || {
                let mut incomplete_logged = 0;
                let report = run_builder(
                    builder,
                    BuilderPorts {
                        decisions: decision_rx,
                        routes,
                        responses: response_rx,
                        credits: CreditsToTrigger(credit_tx),
                    },
                    &mut sink,
                    NODE_POLL,
                    Duration::from_secs(10),
                    |built| {
                        builder_metrics.record(built);
                        if built.outcome != BuildOutcome::Complete && incomplete_logged < 10 {
                            incomplete_logged += 1;
                            eprintln!("swdaq: {}", describe_incomplete(built));
                        }
                    },
                );
                (report, sink)
            })?;

        gate.store(GO, Ordering::Release);
        let started = Instant::now();
        let threads_at_start = read_threads();
        let watch = Supervisor {
            config,
            interrupt,
            stats: &stats,
            storage_failed: &storage_failed,
            started,
            links: n,
        };
        let stop_reason = watch.run(&readout, &mut on_status);
        let thread_cpu = cpu_shares(&threads_at_start, started.elapsed());
        // Stop in data-flow order: the trigger first (its open decision still goes out once
        // its data is in), then the builder finishes every record, then readout stops.
        let _ = stop_tx.send(TriggerInput::Stop);
        drop(stop_tx);
        let trigger = trigger_thread
            .join()
            .map_err(|_| anyhow!("the trigger thread panicked"))?;
        let (builder, sink) = builder_thread
            .join()
            .map_err(|_| anyhow!("the record builder panicked"))?;
        readout_running.store(false, Ordering::Release);
        let mut links: Vec<Option<LinkReport>> = vec![None; n];
        let mut first_pass: Vec<(usize, Vec<TriggerPrimitive>, u64)> = Vec::new();
        for h in readout {
            let out = h
                .join()
                .map_err(|_| anyhow!("a readout thread panicked"))??;
            for (i, report, tps, horizon) in out {
                links[i] = Some(report);
                first_pass.push((i, tps, horizon));
            }
        }
        let server = server
            .join()
            .map_err(|_| anyhow!("the request server panicked"))?;
        let storage = sink.finish();
        Ok(RunReport {
            seconds: started.elapsed().as_secs_f64(),
            stop_reason,
            links: links.into_iter().flatten().collect(),
            trigger,
            builder,
            server,
            storage,
            hit_finding: score(&emulated, &first_pass),
            thread_cpu,
        })
    });
    if let Some(m) = metrics_server {
        m.stop();
    }
    stats.stop();
    result
}

/// One readout thread: its links' buffers, sources, hit finders and TP forwarding.
struct ReadoutThread<'a> {
    config: &'a RunConfig,
    emulated: &'a [EmulatedLink],
    links: Vec<usize>,
    core: Option<usize>,
    registry: &'a Registry,
    name: String,
    setup: Sender<(usize, LinkBuffers)>,
    gate: &'a AtomicU8,
    running: &'a AtomicBool,
    tps: Sender<TriggerInput>,
}

/// Per link: the link's report, its first-pass TPs and how far its data got.
type LinkOutput = (usize, LinkReport, Vec<TriggerPrimitive>, u64);

impl ReadoutThread<'_> {
    fn run(self) -> anyhow::Result<Vec<LinkOutput>> {
        if let Some(core) = self.core {
            pin_current_thread(core)
                .with_context(|| format!("readout.pin_cores: {}", self.name))?;
        }
        // Created here, after pinning, so the buffers' pages are first touched (and placed)
        // on this core's NUMA node.
        let mut shared = Vec::new();
        for &i in &self.links {
            let link = LinkShared::new(
                SourceId::readout(i as u32),
                FrameFormat::WibEth,
                self.config.readout.buffer_s,
            )
            .with_context(|| format!("allocating the latency buffer of link {i}"))?;
            let tps = TpBuffer::new(
                SourceId::trigger(i as u32),
                (self.config.readout.buffer_s * TICKS_PER_SECOND) as u64,
                START_TIMESTAMP,
            );
            shared.push((Arc::new(link), Arc::new(tps)));
        }
        for (&i, buffers) in self.links.iter().zip(&shared) {
            self.setup.send((i, buffers.clone()))?;
        }
        loop {
            match self.gate.load(Ordering::Acquire) {
                GO => break,
                ABORT => return Ok(Vec::new()),
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let mut ingests = Vec::new();
        let mut taps = Vec::new();
        for (&i, (link, tp_buffer)) in self.links.iter().zip(&shared) {
            let emulated = &self.emulated[i];
            let ingest = Ingest::new(link, self.source(i), self.hit_finder(emulated)?)
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
                first_pass: Vec::new(),
                first_pass_end: START_TIMESTAMP + emulated.truth.span_ticks,
                batches_dropped: 0,
                ended: false,
            });
        }
        let idle = Duration::from_micros(self.config.readout.idle_sleep_us);
        let results = run_links(
            &mut ingests,
            || self.running.load(Ordering::Acquire),
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

    fn source(&self, link: usize) -> ReplaySource {
        let rate = FrameFormat::WibEth.frame_rate_hz();
        let limit = self
            .config
            .emulator
            .stop_links
            .iter()
            .find(|s| s.link as usize == link)
            .map(|s| (s.after_s * rate).round() as u64);
        let pace = self.config.emulator.real_time.then_some(rate);
        // Frames land in memory as a front-end card's DMA would put them (not in cache).
        ReplaySource::new(Arc::clone(&self.emulated[link].template), pace, limit)
            .with_streaming_stores()
    }

    fn hit_finder(&self, emulated: &EmulatedLink) -> anyhow::Result<HitFindingObserver> {
        let hf = &self.config.hit_finding;
        let planes: Vec<Plane> = emulated
            .truth
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
            emulated.channel_ids.clone(),
            wibeth::TICKS_PER_SAMPLE,
            swdaq_format::DETECTOR_ID_HD_TPC as u8,
            Implementation::best(),
        )?;
        for &channel in &hf.masked_channels {
            if let Some(c) = finder.index_of(channel) {
                finder.set_masked(c, true, &mut Vec::new());
            }
        }
        let observer = HitFindingObserver::new(finder, FrameFormat::WibEth);
        Ok(if hf.detect_noisy_channels {
            observer.with_noisy_channel_detection(hf.noisy)
        } else {
            observer
        })
    }
}

/// Hands one link's TPs to the trigger, keeping the first replay pass's for the summary.
struct TpTap {
    link: usize,
    /// The link's requestable TP buffer.
    buffer: Arc<TpBuffer>,
    sent_horizon: u64,
    first_pass: Vec<TriggerPrimitive>,
    first_pass_end: u64,
    batches_dropped: u64,
    ended: bool,
}

impl TpTap {
    fn forward(
        &mut self,
        observer: &mut HitFindingObserver,
        state: LinkState,
        trigger: &Sender<TriggerInput>,
    ) {
        if self.ended {
            return;
        }
        let ending = state == LinkState::Ended;
        if ending {
            observer.finish();
        }
        let horizon = observer.horizon();
        if !ending && horizon < self.sent_horizon + TP_BATCH_TICKS {
            return;
        }
        let mut tps = Vec::new();
        observer.take_tps(&mut tps);
        self.buffer.push(&tps, horizon);
        let end = self.first_pass_end;
        self.first_pass
            .extend(tps.iter().filter(|tp| tp.time_start < end));
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
        ingest: Ingest<'_, ReplaySource, HitFindingObserver>,
        result: std::io::Result<()>,
        ended_early: bool,
    ) -> LinkOutput {
        let observer = ingest.observer();
        let report = LinkReport {
            source_id: self.link as u32,
            frames: ingest.counts.frames,
            bytes: ingest.counts.bytes,
            dropped: ingest.counts.dropped,
            checks: ingest.checker.counts,
            trigger_primitives: observer.tps_found(),
            tp_batches_dropped: self.batches_dropped,
            noisy_channels: observer
                .noisy_channels()
                .iter()
                .map(|n| n.channel)
                .collect(),
            ended_early,
            error: result.err().map(|e| e.to_string()),
        };
        (self.link, report, self.first_pass, observer.horizon())
    }
}

/// Watches the run from the main thread and decides when it ends.
struct Supervisor<'a> {
    config: &'a RunConfig,
    interrupt: &'a AtomicBool,
    stats: &'a StatsThread,
    storage_failed: &'a Arc<AtomicBool>,
    started: Instant,
    links: usize,
}

impl Supervisor<'_> {
    fn run<T>(
        &self,
        readout: &[std::thread::ScopedJoinHandle<'_, T>],
        on_status: &mut impl FnMut(&Status<'_>),
    ) -> StopReason {
        let interval = Duration::from_secs_f64(self.config.run.status_interval_s);
        let duration = (self.config.run.duration_s > 0.0)
            .then(|| Duration::from_secs_f64(self.config.run.duration_s));
        let mut next_status = self.started + interval;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let now = Instant::now();
            let elapsed = now - self.started;
            if now >= next_status {
                while next_status <= now {
                    next_status += interval;
                }
                on_status(&Status {
                    elapsed,
                    snapshot: &self.stats.latest(),
                    links: self.links,
                });
            }
            if self.interrupt.load(Ordering::Relaxed) {
                return StopReason::Interrupted;
            }
            if duration.is_some_and(|d| elapsed >= d) {
                return StopReason::Duration;
            }
            if self.storage_failed.load(Ordering::Relaxed)
                && self.config.storage.on_failure == StorageFailurePolicy::Stop
            {
                return StopReason::StorageFailed(
                    "storage stopped writing (storage.on_failure = \"stop\")".into(),
                );
            }
            if readout.iter().all(|h| h.is_finished()) {
                return StopReason::AllLinksEnded;
            }
        }
    }
}

/// One line on a record that is not complete, naming the sources concerned.
fn describe_incomplete(built: &swdaq_dataflow::BuiltRecord) -> String {
    use swdaq_dataflow::builder::source_list;
    let n = built.record.header.trigger_number;
    match built.outcome {
        BuildOutcome::TimedOut => format!(
            "record {n} incomplete: no fragment from {} before the time-out",
            source_list(&built.missing)
        ),
        _ => format!(
            "record {n} incomplete: data missing from {}",
            source_list(&built.lacking_data)
        ),
    }
}

/// Hit finding against truth over each link's first pass (as far as the run got).
fn score(emulated: &[EmulatedLink], first_pass: &[(usize, Vec<TriggerPrimitive>, u64)]) -> Score {
    let mut total = Score::default();
    for (link, tps, horizon) in first_pass {
        let e = &emulated[*link];
        let end = (*horizon).min(START_TIMESTAMP + e.truth.span_ticks);
        if end <= START_TIMESTAMP {
            continue;
        }
        // Pulses too close to where the data stopped may not have closed their hits.
        let margin = 64 * wibeth::TICKS_PER_SAMPLE;
        let pulses: Vec<_> = e
            .truth
            .pulses
            .iter()
            .filter(|p| p.peak_tick + margin < end)
            .copied()
            .collect();
        let index: HashMap<u32, u32> = e
            .channel_ids
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        let local: Vec<TriggerPrimitive> = tps
            .iter()
            .filter(|tp| tp.time_start + margin < end)
            .filter_map(|tp| {
                Some(TriggerPrimitive {
                    channel: *index.get(&tp.channel)?,
                    ..*tp
                })
            })
            .collect();
        let seconds = (end - margin - START_TIMESTAMP) as f64 / 62.5e6;
        total.add(&Score::of(
            &pulses,
            &local,
            &e.truth.sigma,
            &e.truth.collection,
            seconds,
        ));
    }
    total
}

/// Each thread's CPU use since `before` was read, as a share of one core over `elapsed`.
fn cpu_shares(before: &[ThreadStat], elapsed: Duration) -> Vec<(String, f64)> {
    read_threads()
        .into_iter()
        .map(|t| {
            let start = before
                .iter()
                .find(|b| b.tid == t.tid)
                .map_or(0, |b| b.cpu_ticks);
            let seconds = t.cpu_ticks.saturating_sub(start) as f64 / USER_HZ;
            (t.name, seconds / elapsed.as_secs_f64())
        })
        .collect()
}
