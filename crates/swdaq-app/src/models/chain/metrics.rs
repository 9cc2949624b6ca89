//! The trigger's, the dataflow orchestrator's and the record builder's counters in the
//! monitoring registry (the readout links register their own: `swdaq_readout::link::LinkMetrics`).

use std::time::{Duration, Instant};
use swdaq_dataflow::orchestrator::{Orchestrator, OrchestratorReport};
use swdaq_dataflow::{BuildOutcome, BuiltRecord};
use swdaq_monitor::{Counter, Gauge, Histogram, MonitorError, Registry};
use swdaq_trigger::{Trigger, TriggerCounts};

/// Latency buckets in seconds: 100 µs to 10 s.
const LATENCY_BOUNDS: [f64; 11] = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0];

/// How often the trigger node's counters are copied to the registry.
const TRIGGER_PUBLISH_EVERY: Duration = Duration::from_millis(100);

pub struct TriggerMetrics {
    decisions: Counter,
    dropped_busy: Counter,
    late_tps: Counter,
    latency: Histogram,
    published: TriggerCounts,
    latencies_seen: usize,
    last: Instant,
}

impl TriggerMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MonitorError> {
        let mut b = registry.block("trigger", &[]);
        Ok(Self {
            decisions: b.counter("swdaq_trigger_decisions_total", "Trigger decisions issued")?,
            dropped_busy: b.counter(
                "swdaq_trigger_dropped_busy_total",
                "Decisions dropped while dataflow was busy (inhibit)",
            )?,
            late_tps: b.counter(
                "swdaq_trigger_late_tps_total",
                "TPs that reached the trigger after their time had passed (late link)",
            )?,
            latency: b.histogram(
                "swdaq_trigger_latency_seconds",
                "Data time to trigger decision",
                &LATENCY_BOUNDS,
            )?,
            published: TriggerCounts::default(),
            latencies_seen: 0,
            last: Instant::now(),
        })
    }

    /// Copies what changed since the last call, at most every 100 ms unless `force`.
    pub fn publish(&mut self, trigger: &Trigger, force: bool) {
        if !force && self.last.elapsed() < TRIGGER_PUBLISH_EVERY {
            return;
        }
        self.last = Instant::now();
        let c = trigger.counts();
        self.decisions.add(c.issued - self.published.issued);
        self.dropped_busy
            .add(c.dropped_busy - self.published.dropped_busy);
        self.late_tps
            .add(c.merge.late_tps - self.published.merge.late_tps);
        for l in &trigger.latencies()[self.latencies_seen..] {
            self.latency.observe(l.as_secs_f64());
        }
        self.latencies_seen = trigger.latencies().len();
        self.published = c;
    }
}

/// The dataflow orchestrator application's counters: decisions taken, given to another
/// builder after theirs went, lost; and the decisions waiting for a builder's credit.
pub struct DfoMetrics {
    decisions: Counter,
    reassigned: Counter,
    lost: Counter,
    waiting: Gauge,
    published: (u64, usize, usize),
}

impl DfoMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MonitorError> {
        let mut b = registry.block("dfo", &[]);
        Ok(Self {
            decisions: b.counter(
                "swdaq_dfo_decisions_total",
                "Trigger decisions the orchestrator took",
            )?,
            reassigned: b.counter(
                "swdaq_dfo_reassigned_total",
                "Decisions given to another builder after theirs went",
            )?,
            lost: b.counter("swdaq_dfo_lost_total", "Decisions no builder could finish")?,
            waiting: b.gauge(
                "swdaq_dfo_waiting",
                "Decisions waiting for a builder's credit",
            )?,
            published: (0, 0, 0),
        })
    }

    /// Copies what changed since the last call.
    pub fn publish(&mut self, orchestrator: &Orchestrator) {
        let OrchestratorReport {
            decisions,
            reassigned,
            lost,
            ..
        } = orchestrator.report();
        let (d, r, l) = self.published;
        self.decisions.add(decisions - d);
        self.reassigned.add((reassigned.len() - r) as u64);
        self.lost.add((lost.len() - l) as u64);
        self.published = (*decisions, reassigned.len(), lost.len());
        self.waiting.set(orchestrator.waiting() as f64);
    }
}

pub struct BuilderMetrics {
    complete: Counter,
    incomplete: Counter,
    bytes: Counter,
    latency: Histogram,
}

impl BuilderMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MonitorError> {
        let done = |outcome: &str| {
            registry.block("dataflow", &[("outcome", outcome)]).counter(
                "swdaq_dataflow_records_total",
                "Trigger records built, by outcome",
            )
        };
        let (complete, incomplete) = (done("complete")?, done("incomplete")?);
        let mut b = registry.block("dataflow", &[]);
        Ok(Self {
            complete,
            incomplete,
            bytes: b.counter(
                "swdaq_dataflow_record_bytes_total",
                "Bytes of trigger records built",
            )?,
            latency: b.histogram(
                "swdaq_dataflow_build_latency_seconds",
                "Decision received to record built",
                &LATENCY_BOUNDS,
            )?,
        })
    }

    pub fn record(&self, built: &BuiltRecord) {
        match built.outcome {
            BuildOutcome::Complete => self.complete.inc(),
            _ => self.incomplete.inc(),
        }
        self.bytes.add(built.record.size_bytes() as u64);
        self.latency.observe(built.started.elapsed().as_secs_f64());
    }
}
