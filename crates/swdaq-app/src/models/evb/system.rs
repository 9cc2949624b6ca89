//! The event builder's runs: in one process (`swdaq_evb::EvbRun`: emulated FEDs -> readout
//! units -> event manager -> builder units -> files), or as the applications of a
//! `[topology]` (`apps`), started by the launcher, their reports merged into the same
//! summary with how each application ended.

use super::apps::EVENT_STREAMS;
use super::apps::EvbAppReport;
use super::apps::{BU, EVM, RU};
use super::config::EvbRunConfig;
use super::summary::{summary_json, summary_text};
use crate::live::Live;
use crate::runtime::dqm::{DqmReport, OnlineDqm};
use crate::runtime::dqm_stream::{Published, StreamMessage, StreamedDqm};
use crate::runtime::launch::{Launched, Plan, Stages, launch};
use crate::runtime::model::RunHooks;
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::{AppOutcome, StopReason, apps_text};
use crate::runtime::steering::{Steering, TriggerSteer};
use crate::runtime::stop::StopRequest;
use crate::runtime::supervise::{Supervised, supervise};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use swdaq_dqm::HistSet;
use swdaq_dqm::sample::SampleCounts;
use swdaq_evb::bu::WriterOutcome;
use swdaq_evb::files::WriterError;
use swdaq_evb::metrics::builder_cpu_ticks;
use swdaq_evb::pause::TriggerClock;
use swdaq_evb::{Drills, EvbRun, EvbSummary};
use swdaq_format::FormatError;
use swdaq_monitor::StatsThread;
use swdaq_monitor::proc::USER_HZ;
use swdaq_trigger::TriggerControl;

/// The event builder as applications: launched, stopped event manager first, then builder
/// units (once they have built and written what they hold), then readout units. With
/// `[dqm]`, this process monitors the events the builder units publish.
pub fn run_apps(
    config: &EvbRunConfig,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<AppsSummary> {
    config.validate()?;
    // Subscribed before the applications start, so that the first events are taken.
    let dqm = StreamedDqm::start_for_topology(
        &config.dqm,
        &config.run,
        &config.topology,
        &EVENT_STREAMS,
        fill_published,
        hooks,
    )?;
    let stages = Stages {
        stop_order: &[EVM, BU, RU],
        essential: &[EVM],
        ends_with: (BU, StopReason::AppFailed("every builder unit ended".into())),
        live: &|snapshot, elapsed| super::live::live(snapshot, elapsed, &config.evb),
        trigger_at: Some(EVM),
        bursts_to: None,
        clock_followers: &[RU],
    };
    let plan = Plan::of(config, stages);
    let (mut summary, published) = AppsSummary::merge(launch(&plan, exe, stop, hooks)?, config);
    if let Some(dqm) = dqm {
        summary.dqm =
            Some(dqm.finish_stopped(stop, &config.run, |app| published.get(app).copied()));
    }
    Ok(summary)
}

/// The event builder's summary from its applications' reports, and how each ended.
#[derive(Debug)]
pub struct AppsSummary {
    pub evb: EvbSummary,
    pub stop_reason: StopReason,
    pub apps: Vec<AppOutcome>,
    /// Messages refused by the applications' inboxes, by reason.
    pub refused_messages: std::collections::BTreeMap<String, u64>,
    /// Each application's threads' CPU shares, named `app/thread`.
    pub thread_cpu: Vec<(String, f64)>,
    /// CPU seconds of every reporting application's threads.
    pub cpu_seconds: f64,
    /// Online data-quality monitoring (`[dqm]`: in one process, or from the builder units'
    /// event streams).
    pub dqm: Option<DqmReport>,
}

impl AppsSummary {
    /// The applications' reports in one summary; builder units that died, or were declared
    /// gone, settled with what they left in `<run.output_dir>/<name>/`. Beside it, what each
    /// builder unit published on its event stream, by name.
    fn merge(launched: Launched, config: &EvbRunConfig) -> (Self, BTreeMap<String, Published>) {
        let mut evb = EvbSummary {
            elapsed: Duration::from_secs_f64(launched.seconds),
            ..Default::default()
        };
        let bu_names: Vec<&str> = config
            .topology
            .apps
            .iter()
            .filter(|a| a.kind == BU)
            .map(|a| a.name.as_str())
            .collect();
        let mut reported = vec![false; bu_names.len()];
        let mut apps = Vec::new();
        let mut refused_messages = std::collections::BTreeMap::new();
        let mut thread_cpu = Vec::new();
        let mut cpu_seconds = 0.0;
        let mut reports = Vec::new();
        let mut published = BTreeMap::new();
        for (_, mut outcome, bytes) in launched.apps {
            match bytes.map(|b| postcard::from_bytes::<EvbAppReport>(&b)) {
                Some(Ok(mut r)) => {
                    if let Some(e) = r.evm.take() {
                        evb.evm = e;
                    }
                    reports.push((outcome.name.clone(), r));
                }
                Some(Err(e)) => {
                    outcome.failure = Some(format!("report: not an event-builder report: {e}"))
                }
                None => {}
            }
            apps.push(outcome);
        }
        for (name, mut r) in reports {
            if let Some(p) = r.events_published {
                published.insert(name.clone(), p);
            }
            let bu = bu_names.iter().position(|&n| n == name);
            if let Some(bu) = bu
                && evb.evm.gone.contains(&(bu as u16))
            {
                // A unit the event manager declared gone had its unsettled events listed
                // lost by number; the ones it counted unwritten are among them (never
                // settled), so they are counted there only.
                if let Some(b) = r.bu.as_mut() {
                    b.unwritten = 0;
                }
                if let Some((counts, _)) = r.writer.as_mut() {
                    counts.unwritten = 0;
                }
            }
            evb.rus.extend(r.ru);
            evb.bus.extend(r.bu);
            if let (Some(_), Some(bu)) = (&r.writer, bu) {
                reported[bu] = true;
            }
            evb.writers
                .extend(r.writer.map(|(counts, error)| WriterOutcome {
                    counts,
                    error: error.map(WriterError::Reported),
                }));
            evb.feds.extend(r.feds);
            if let Some(farm) = r.farm {
                evb.farm.get_or_insert_default().merge(farm);
            }
            for (k, n) in r.injected {
                *evb.injected.entry(k).or_insert(0) += n;
            }
            for (reason, n) in r.refused_messages {
                *refused_messages.entry(reason).or_insert(0) += n;
            }
            cpu_seconds += r.seconds * r.thread_cpu.iter().map(|(_, s)| s).sum::<f64>();
            thread_cpu.extend(r.thread_cpu);
        }
        evb.feds.sort_by_key(|&(ru, fed, _)| (ru, fed));
        // As in one process: a farm deletes the files it verified, so a dead unit's
        // directory no longer says what it wrote.
        let farmed = evb.farm.is_some();
        evb.settle_with_disk(config.run.number, &reported, |bu| {
            if farmed {
                Err("the filter farm consumed its files: lost is an upper bound".into())
            } else {
                Ok(config.run.output_dir.join(bu_names[bu as usize]))
            }
        });
        let summary = Self {
            evb,
            stop_reason: launched.stop_reason,
            apps,
            refused_messages,
            thread_cpu,
            cpu_seconds,
            dqm: None,
        };
        (summary, published)
    }

    /// The summary of a run in one process.
    pub fn one_process(evb: EvbSummary, stop_reason: StopReason, dqm: Option<DqmReport>) -> Self {
        Self {
            evb,
            stop_reason,
            apps: Vec::new(),
            refused_messages: Default::default(),
            thread_cpu: Vec::new(),
            cpu_seconds: 0.0,
            dqm,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let mut j = summary_json(&self.evb);
        if let Some(dqm) = &self.dqm {
            j["dqm"] = dqm.json();
        }
        if self.apps.is_empty() {
            return j;
        }
        j["refused_messages"] = serde_json::json!(self.refused_messages);
        j["apps"] = serde_json::to_value(&self.apps).unwrap_or_default();
        j["thread_cpu"] = serde_json::json!(self.thread_cpu);
        j["cpu_seconds"] = serde_json::json!(self.cpu_seconds);
        j
    }

    pub fn text(&self) -> String {
        let mut out = summary_text(&self.evb, &self.stop_reason);
        if let Some(dqm) = &self.dqm {
            out += &dqm.text();
        }
        out += &apps_text(&self.apps, &self.refused_messages);
        out
    }
}

/// Run control's pause of a one-process event builder: the event manager holds from its next
/// event and every readout unit with it (`swdaq_evb::pause`).
impl TriggerSteer for TriggerClock {
    fn send(&self, control: TriggerControl) -> Result<(), String> {
        match control {
            TriggerControl::Pause => self.pause().request(),
            TriggerControl::Resume => self.pause().resume(),
            TriggerControl::Change(_) => return Err(NO_TRIGGER_SOURCES.into()),
        }
        Ok(())
    }
}

/// Why the event builder takes no prescale or rate change.
pub const NO_TRIGGER_SOURCES: &str =
    "the event builder has no trigger sources to change (its rate is evb.trigger_rate_hz)";

/// Runs in one process until the duration, `max_events` (or the end of its input files), a
/// stop request or a writer failure ends it; `hooks` hear when data taking has begun, the
/// live figures every live interval and the stop. The summary, which of them it was, and
/// what online data-quality monitoring made of the events its builder units sampled.
pub fn run_one_process(
    config: &EvbRunConfig,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<(EvbSummary, StopReason, Option<DqmReport>)> {
    let monitoring = Monitoring::start(&config.run.metrics_addr, "run.metrics_addr")?;
    let builder_ticks_before = builder_cpu_ticks();
    let dqm = config
        .dqm
        .start(&config.run.output_dir, fill_dqm, &monitoring.registry)?;
    if let Some(dqm) = &dqm {
        hooks.dqm(dqm.view());
    }
    let evb = EvbRun::start(
        &config.builder(),
        &monitoring.registry,
        &Drills::default(),
        dqm.as_ref().map(OnlineDqm::tap),
    )?;
    hooks.started(Steering {
        trigger: Some(Box::new(evb.clock().clone())),
        bursts: None,
    });
    let mut watch = EvbWatch {
        evb: &evb,
        config,
        stats: &monitoring.stats,
        builder_ticks: builder_ticks_before,
    };
    let stopped_by = supervise(&mut watch, config.run.duration(), stop, hooks);
    let builder_ticks = watch.builder_ticks;
    let mut summary = evb.join()?;
    summary.builder_cpu_seconds =
        Some(builder_ticks.saturating_sub(builder_ticks_before) as f64 / USER_HZ);
    let mut samples = SampleCounts::default();
    summary
        .bus
        .iter()
        .for_each(|bu| samples.add(bu.dqm_samples));
    let dqm = dqm.map(|d| d.finish(&config.run, samples));
    monitoring.stop();
    // A failed writer stops the run itself; it is the reason even if a stop came after.
    let failed = (summary.writers.iter().enumerate())
        .find_map(|(bu, w)| Some(format!("builder unit {bu}'s writer: {}", w.error.as_ref()?)));
    Ok((summary, stopped_by.unless_storage_failed(failed), dqm))
}

/// One sampled event into the run's histograms, as `swdaq dqm` fills them from FRD files.
fn fill_dqm(set: &mut HistSet, event: Vec<u8>) -> Result<(), FormatError> {
    swdaq_dqm::frd::fill_sample(set, &event)
}

/// One message of a builder unit's event stream into the run's histograms, as an event
/// sampled in one process is filled; a message that is not one event is refused with why
/// (counted unreadable).
fn fill_published(set: &mut HistSet, message: StreamMessage) -> Result<(), String> {
    (message.fill_sample(set, fill_dqm)).map_err(|e| format!("event stream message: {e}"))
}

/// What the event builder in one process shows the supervision loop: it ends by itself at
/// `max_events` or its files' end, or when a writer fails; stopped, its builder units build
/// and write what they hold (live figures go on meanwhile).
struct EvbWatch<'a> {
    evb: &'a EvbRun,
    config: &'a EvbRunConfig,
    stats: &'a StatsThread,
    /// The builder's threads vanish from /proc once joined: the last sample before is kept.
    builder_ticks: u64,
}

impl Supervised for EvbWatch<'_> {
    fn ended(&mut self) -> Option<StopReason> {
        self.evb.is_finished().then_some(StopReason::InputEnded)
    }

    fn live(&self, elapsed: Duration) -> Live {
        super::live::live(&self.stats.latest(), elapsed, &self.config.evb)
    }

    fn begin_stop(&mut self, stop: &StopRequest) {
        stop.waiting_for("the builder units to build and write what they hold");
        self.evb.stop();
    }

    fn drained(&mut self) -> bool {
        self.evb.is_finished()
    }

    fn wait(&mut self, tick: Duration) {
        self.builder_ticks = self.builder_ticks.max(builder_cpu_ticks());
        std::thread::sleep(tick);
    }
}
