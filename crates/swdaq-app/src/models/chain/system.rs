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
use super::inputs::{prepare, truth_at_end};
use super::metrics::{BuilderMetrics, TriggerMetrics};
use super::readout::{LinkReport, ReadoutControl, ReadoutSet, start_readout};
use super::recording::{self, RecordOnTrigger, RecordingReport};
use super::roi_score::{RoiCoverage, RoiScorer};
use super::sink::StorageSink;
use crate::live::Live;
use crate::runtime::dqm::DqmReport;
use crate::runtime::dqm_stream::Published;
use crate::runtime::model::RunHooks;
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::{AppOutcome, StopReason, cpu_shares};
use crate::runtime::steering::Steering;
use crate::runtime::stop::StopRequest;
use crate::runtime::supervise::{Supervised, supervise};
use anyhow::anyhow;
use crossbeam_channel::Sender;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::nodes::{BuilderPorts, run_builder, run_trigger};
use swdaq_dataflow::orchestrator::OrchestratorReport;
use swdaq_dataflow::transport::{Inbox, Outbox, local};
use swdaq_dataflow::{
    BuildOutcome, BuilderConfig, BuilderReport, CreditsToTrigger, RecordBuilder, RecordDone,
    RecordSink, StorageFailurePolicy, TriggerInput, TriggerReport,
};
use swdaq_dqm::HistSet;
use swdaq_format::{SourceId, TriggerRecord};
use swdaq_monitor::proc::read_threads;
use swdaq_monitor::{Registry, StatsThread};
use swdaq_readout::request::{DataRequest, RequestPolicy};
use swdaq_readout::server::ServerMetrics;
use swdaq_readout::server::{DataResponse, ServerConfig, ServerCounts, serve};
use swdaq_store::StoreReport;
use swdaq_tpg::quality::Score;
use swdaq_trigger::{Trigger, TriggerDecision};

/// Why a run stops when its storage fails (the writer's report adds its error).
pub const STORAGE_STOPPED: &str = "storage stopped writing (storage.on_failure = \"stop\")";

/// Poll period of the trigger, builder and request server loops.
pub const NODE_POLL: Duration = Duration::from_millis(1);

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    pub seconds: f64,
    pub stop_reason: StopReason,
    pub links: Vec<LinkReport>,
    pub trigger: TriggerReport,
    pub builder: BuilderReport,
    pub server: ServerCounts,
    /// With ROI readout and truth: how many strong true pulses the regions hold.
    pub roi_coverage: Option<RoiCoverage>,
    pub storage: Option<StoreReport>,
    /// Hit finding against the truth (the emulator's, or `source.truth`), over every replay
    /// pass; `None` without truth.
    pub hit_finding: Option<Score>,
    /// Share of one core each thread used while data was taken (from /proc), by name.
    pub thread_cpu: Vec<(String, f64)>,
    /// With several builder applications: how decisions were handed out.
    pub dataflow: Option<OrchestratorReport>,
    /// With applications in several processes: how each one ended.
    pub apps: Vec<AppOutcome>,
    /// Messages the applications' inboxes refused, by reason (garbage, version, malformed).
    pub refused_messages: std::collections::BTreeMap<String, u64>,
    /// Raw bursts recorded (`None`: `[recording]` is off).
    pub recording: Option<RecordingReport>,
    /// Online data-quality monitoring (`None`: `[dqm]` is off). Made by the process that
    /// runs it (one process, or the one supervising a topology), so it never crosses between
    /// applications.
    #[serde(skip)]
    pub dqm: Option<DqmReport>,
    /// Records a builder application published on its `record_stream` and dropped (none
    /// without one): what the supervisor's subscriber did not receive of them it counts
    /// dropped.
    pub records_published: Published,
}

/// Runs the chain until the configured duration, a stop request, storage failure (by
/// policy) or the end of every link; `hooks` hear when data taking has begun (with the
/// trigger's input and the raw recorder to steer), each status interval's live figures, and
/// when the stop begins.
pub fn run_chain(
    config: &RunConfig,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<RunReport> {
    config.validate()?;
    check_pin_cores(config)?;
    let monitoring = Monitoring::start(&config.run.metrics_addr, "run.metrics_addr")?;
    let registry = &monitoring.registry;
    let mut sink = StorageSink::start(config, "swdaq", "swdaq run", registry)?;
    let storage_failed = sink.failure_flag();
    // Sampled where the builder hands each record on: the records as stored.
    let dqm = config
        .dqm
        .start(&config.run.output_dir, fill_dqm, registry)?;
    if let Some(dqm) = &dqm {
        sink.sampled_by(dqm.tap().sampler(registry, "record-builder")?);
        hooks.dqm(dqm.view());
    }
    let all_links: Vec<u32> = (0..config.emulator.links).collect();
    let inputs = prepare(config, &all_links)?;
    let n = inputs.len();
    let sources = sources_of(n);

    let (tp_tx, tp_rx) = local::<TriggerInput>(TP_QUEUE);
    let (decision_tx, decision_rx) = local(1024);
    let (request_tx, request_rx) = local::<DataRequest>(1 << 14);
    let (response_tx, response_rx) = local::<DataResponse>(1 << 14);
    let control = ReadoutControl::default();
    let credits = config.dataflow.max_records_in_flight as u64;
    let trigger = Trigger::new(
        config.trigger.clone(),
        config.source.frame_format().clock_hz(),
        n,
        sources.clone(),
        credits,
        Instant::now(),
    )?;
    let mut trigger_metrics = TriggerMetrics::register(registry)?;
    let builder_metrics = BuilderMetrics::register(registry)?;
    let builder = RecordBuilder::new(builder_config(config, 0));

    let result = std::thread::scope(|s| -> anyhow::Result<RunReport> {
        let mut readout = start_readout(s, config, &inputs, &control, registry, tp_tx.clone())?;
        let server =
            spawn_request_server(s, config, registry, &mut readout, request_rx, response_tx)?;
        let recordings = recording::Recordings::start(config, readout.links(), registry)?;
        let decision_tx = RecordOnTrigger::new(decision_tx, recordings.as_ref());
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
                let report = build_records(
                    builder,
                    BuilderPorts {
                        decisions: decision_rx,
                        routes,
                        responses: response_rx,
                        credits: CreditsToTrigger(credit_tx),
                    },
                    &mut sink,
                    &builder_metrics,
                );
                (report, sink)
            })?;

        control.go();
        hooks.started(Steering {
            trigger: Some(Box::new(stop_tx.clone())),
            bursts: recordings
                .clone()
                .map(|r| r as Arc<dyn crate::runtime::steering::BurstRequests>),
        });
        let started = Instant::now();
        let threads_at_start = read_threads();
        let mut watch = ChainWatch {
            config,
            stats: &monitoring.stats,
            storage_failed: &storage_failed,
            readout_ended: &|| readout.all_ended(),
        };
        let duration = crate::runtime::model::seconds(config.run.duration_s);
        let stop_reason = supervise(&mut watch, duration, stop, hooks);
        let thread_cpu = cpu_shares(&threads_at_start, started.elapsed());
        // Stop in data-flow order: the trigger first (its open decision still goes out once
        // its data is in), then the builder finishes every record, then readout stops.
        let _ = stop_tx.send(TriggerInput::Stop);
        drop(stop_tx);
        stop.waiting_for("the trigger to issue its last decision");
        let trigger = trigger_thread
            .join()
            .map_err(|_| anyhow!("the trigger thread panicked"))?;
        stop.waiting_for("the record builder to finish its records");
        let (builder, sink) = builder_thread
            .join()
            .map_err(|_| anyhow!("the record builder panicked"))?;
        stop.waiting_for("readout to stop");
        control.stop();
        let readout = readout.join(truth_at_end(config).as_ref())?;
        let (server, roi_coverage) = server
            .join()
            .map_err(|_| anyhow!("the request server panicked"))?;
        let recording = recordings.map(|r| r.finish());
        stop.waiting_for("storage to write what is queued and close its files");
        let samples = sink.sample_counts();
        let storage = sink.finish();
        let stop_reason = stop_reason.with_storage_error(storage.as_ref());
        stop.waiting_for("data-quality monitoring to judge and save its histograms");
        let dqm = dqm.map(|d| d.finish(&config.run, samples));
        Ok(RunReport {
            seconds: started.elapsed().as_secs_f64(),
            stop_reason,
            links: readout.links,
            trigger,
            builder,
            server,
            roi_coverage,
            storage,
            hit_finding: readout.hit_finding,
            thread_cpu,
            recording,
            dqm,
            ..Default::default()
        })
    });
    monitoring.stop();
    result
}

/// One sampled record into the run's histograms, as `swdaq dqm` fills them from HDF5 files;
/// a record with a fragment it could not read counts as unreadable (its others are filled).
pub(super) fn fill_dqm(set: &mut HistSet, record: TriggerRecord) -> Result<(), String> {
    let problems = swdaq_dqm::chain::fill_record(set, &record);
    match problems.as_slice() {
        [] => Ok(()),
        [first, rest @ ..] => Err(format!(
            "record {}: {first}{}",
            record.header.trigger_number,
            if rest.is_empty() {
                String::new()
            } else {
                format!(" (and {} more)", rest.len())
            }
        )),
    }
}

/// Capacity of the readout-to-trigger queue, in TP batches (and link ends, credits).
pub const TP_QUEUE: usize = 1 << 16;

/// Each link is read out twice per decision: its raw frames and its TPs.
pub fn sources_of(links: usize) -> Vec<SourceId> {
    (0..links as u32)
        .map(SourceId::readout)
        .chain((0..links as u32).map(SourceId::trigger))
        .collect()
}

pub fn builder_config(config: &RunConfig, element: u32) -> BuilderConfig {
    BuilderConfig {
        run_number: config.run.number,
        timeout: Duration::from_millis(config.dataflow.record_timeout_ms),
        element,
    }
}

/// Refuses cores this machine does not have, before anything starts.
pub fn check_pin_cores(config: &RunConfig) -> anyhow::Result<()> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    for &core in &config.readout.pin_cores {
        if !cores.iter().any(|c| c.id == core) {
            return Err(anyhow!(
                "invalid configuration: readout.pin_cores: core {core} is not available (this machine offers {:?})",
                cores.iter().map(|c| c.id).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// The request server of `readout`'s links, on its own thread; it takes the ROI scorer.
pub fn spawn_request_server<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    config: &RunConfig,
    registry: &Registry,
    readout: &mut ReadoutSet<'scope>,
    requests: crossbeam_channel::Receiver<DataRequest>,
    responses: Sender<DataResponse>,
) -> anyhow::Result<ServerThread<'scope>> {
    let server_config = ServerConfig {
        policy: RequestPolicy {
            max_window_ticks: config.trigger.window_before_ticks
                + config.trigger.window_after_ticks,
        },
        timeout: Duration::from_millis(config.readout.request_timeout_ms),
        poll: NODE_POLL,
    };
    let metrics = ServerMetrics::register(registry, "request-server")?;
    let (raw, tps, roi) = (
        readout.raw.clone(),
        readout.tps.clone(),
        Arc::clone(&readout.roi),
    );
    let mut scorer = readout
        .roi_scorer
        .take()
        .map(|s| s.with_metrics(registry, "request-server"))
        .transpose()?;
    Ok(std::thread::Builder::new()
        .name("request-server".into())
        .spawn_scoped(s, move || {
            let counts = serve(
                &raw,
                &tps,
                &roi,
                requests,
                responses,
                server_config,
                Some(metrics),
                |answer| {
                    if let Some(scorer) = &mut scorer {
                        scorer.score(&answer.fragment);
                    }
                },
            );
            (counts, scorer.map(RoiScorer::finish))
        })?)
}

/// The request server's thread: its counts and, with ROI readout and truth, the coverage.
pub type ServerThread<'scope> =
    std::thread::ScopedJoinHandle<'scope, (ServerCounts, Option<RoiCoverage>)>;

/// Builds records from `ports` into `sink`, counting them in `metrics` and saying why the
/// first few incomplete ones are incomplete.
pub fn build_records<D, Q, R, C>(
    builder: RecordBuilder,
    ports: BuilderPorts<D, Q, R, C>,
    sink: &mut impl RecordSink,
    metrics: &BuilderMetrics,
) -> BuilderReport
where
    D: Inbox<TriggerDecision>,
    Q: Outbox<DataRequest>,
    R: Inbox<DataResponse>,
    C: Outbox<RecordDone>,
{
    let mut incomplete_logged = 0;
    run_builder(
        builder,
        ports,
        sink,
        NODE_POLL,
        Duration::from_secs(10),
        |built| {
            metrics.record(built);
            if built.outcome != BuildOutcome::Complete && incomplete_logged < 10 {
                incomplete_logged += 1;
                eprintln!("swdaq: {}", describe_incomplete(built));
            }
        },
    )
}

/// What the chain in one process shows the supervision loop: its own end is every link's, or
/// a storage failure when `storage.on_failure` stops the run; it stops in stages after the
/// loop (trigger, builder, readout), so there is nothing to drain meanwhile.
struct ChainWatch<'a> {
    config: &'a RunConfig,
    stats: &'a StatsThread,
    storage_failed: &'a Arc<AtomicBool>,
    readout_ended: &'a dyn Fn() -> bool,
}

impl Supervised for ChainWatch<'_> {
    fn ended(&mut self) -> Option<StopReason> {
        if self.storage_failed.load(Ordering::Relaxed)
            && self.config.storage.on_failure == StorageFailurePolicy::Stop
        {
            Some(StopReason::StorageFailed(STORAGE_STOPPED.into()))
        } else {
            (self.readout_ended)().then_some(StopReason::AllLinksEnded)
        }
    }

    fn live(&self, elapsed: Duration) -> Live {
        super::live::live(&self.stats.latest(), elapsed, self.config.emulator.links)
    }

    fn begin_stop(&mut self, _: &StopRequest) {}

    fn drained(&mut self) -> bool {
        true
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
