//! `swdaq run` for a configuration with an `[evb]` section: the CMS-style event builder in
//! one process (emulated FEDs -> readout units -> event manager -> builder units -> files),
//! with a live line per second, Prometheus `/metrics` and a closing summary; or, with a
//! `[topology]` of `evm`, `ru` and `bu` applications, as processes over ZeroMQ
//! (`crate::models::evb::apps`) started by the chain's launcher, their reports merged into the same
//! summary with how each application ended.

pub mod apps;

use crate::models::evb::apps::EvbAppReport;
use crate::runtime::launch::{Launched, Plan, launch};
use crate::runtime::live_feed::{LiveSeries, snapshot_of};
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::{AppOutcome, StopReason};
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::{AppKind, TopologySection};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_evb::bu::WriterOutcome;
use swdaq_evb::check::FedCheckFailure;
use swdaq_evb::files::WriterError;
use swdaq_evb::metrics::builder_cpu_ticks;
use swdaq_evb::reconcile::ReadBack;
use swdaq_evb::{Drills, EvbConfig, EvbRun, EvbSummary};
use swdaq_format::run_files;
use swdaq_monitor::proc::USER_HZ;
use swdaq_monitor::{Snapshot, Value};

/// An event-builder run file: the builder's settings and how long to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvbRunConfig {
    /// Seconds of data taking (0: until Ctrl-C or `evb.max_events`).
    pub duration_s: f64,
    /// `/metrics` address, or "" for none.
    pub metrics_addr: String,
    pub evb: EvbConfig,
    /// Empty: one process. Otherwise the `evm`, `ru` and `bu` applications.
    pub topology: TopologySection,
}

impl Default for EvbRunConfig {
    fn default() -> Self {
        Self {
            duration_s: 10.0,
            metrics_addr: "127.0.0.1:9464".into(),
            evb: EvbConfig::default(),
            topology: TopologySection::default(),
        }
    }
}

/// Whether the TOML file at `path` describes an event-builder run (has an `[evb]` table).
pub fn is_evb_config(path: &Path) -> anyhow::Result<bool> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    is_evb_text(&text).with_context(|| format!("{} is not TOML", path.display()))
}

/// Whether a configuration's text describes an event-builder run.
pub fn is_evb_text(text: &str) -> anyhow::Result<bool> {
    let table: toml::Table = toml::from_str(text)?;
    Ok(table.contains_key("evb"))
}

pub fn load(path: &Path) -> anyhow::Result<EvbRunConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| format!("{}", path.display()))
}

/// Parses and checks an event-builder run's configuration.
pub fn parse(text: &str) -> anyhow::Result<EvbRunConfig> {
    let config: EvbRunConfig = toml::from_str(text)?;
    config.evb.validate()?;
    anyhow::ensure!(config.duration_s >= 0.0, "duration_s must not be negative");
    config
        .topology
        .validate_evb(config.evb.rus.len(), config.evb.builder_units as usize)?;
    anyhow::ensure!(
        !(config.topology.is_distributed() && config.evb.farm.consumers > 0),
        "evb.farm runs in one process only: not with a [topology]"
    );
    Ok(config)
}

/// The event builder as applications: launched, stopped event manager first, then builder
/// units (once they have built and written what they hold), then readout units.
pub fn run_apps(
    config: &EvbRunConfig,
    exe: &Path,
    stop: &StopRequest,
) -> anyhow::Result<AppsSummary> {
    let plan = Plan {
        topology: &config.topology,
        toml: toml::to_string_pretty(config).context("the configuration as TOML")?,
        run_number: config.evb.run,
        logs: config
            .evb
            .output
            .join(format!("run{:06}-logs", config.evb.run)),
        duration: (config.duration_s > 0.0).then(|| Duration::from_secs_f64(config.duration_s)),
        status_interval: Duration::from_secs(1),
        stop_order: &[AppKind::Evm, AppKind::Bu, AppKind::Ru],
        essential: &[AppKind::Evm],
        ends_with: (
            AppKind::Bu,
            StopReason::AppFailed("every builder unit ended".into()),
        ),
        live_line: Some(&|live: &[&[u8]]| {
            // An application's undecodable figures are left out of the line, not fatal.
            let parts = live
                .iter()
                .filter_map(|b| postcard::from_bytes::<Vec<LiveSeries>>(b).ok());
            live_line(&snapshot_of(parts))
        }),
        records_bursts: false,
    };
    Ok(AppsSummary::merge(launch(&plan, exe, stop, &())?, config))
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
}

impl AppsSummary {
    /// The applications' reports in one summary; builder units that died, or were declared
    /// gone, settled with what they left in `<evb.output>/<name>/`.
    fn merge(launched: Launched, config: &EvbRunConfig) -> Self {
        let mut evb = EvbSummary {
            elapsed: Duration::from_secs_f64(launched.seconds),
            ..Default::default()
        };
        let bu_names: Vec<&str> = config
            .topology
            .apps
            .iter()
            .filter(|a| a.kind == AppKind::Bu)
            .map(|a| a.name.as_str())
            .collect();
        let mut reported = vec![false; bu_names.len()];
        let mut apps = Vec::new();
        let mut refused_messages = std::collections::BTreeMap::new();
        let mut thread_cpu = Vec::new();
        let mut cpu_seconds = 0.0;
        let mut reports = Vec::new();
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
        evb.settle_with_disk(config.evb.run, &reported, |bu| {
            Ok(config.evb.output.join(bu_names[bu as usize]))
        });
        Self {
            evb,
            stop_reason: launched.stop_reason,
            apps,
            refused_messages,
            thread_cpu,
            cpu_seconds,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let mut j = summary_json(&self.evb, &self.stop_reason);
        j["refused_messages"] = serde_json::json!(self.refused_messages);
        j["apps"] = serde_json::to_value(&self.apps).unwrap_or_default();
        j["thread_cpu"] = serde_json::json!(self.thread_cpu);
        j["cpu_seconds"] = serde_json::json!(self.cpu_seconds);
        j
    }

    pub fn text(&self) -> String {
        let mut out = summary_text(&self.evb, &self.stop_reason);
        for a in &self.apps {
            out += &format!(
                "App       {:<12} {:<4} {}\n",
                a.name,
                a.kind,
                match &a.failure {
                    None => "stopped cleanly".to_string(),
                    Some(f) => format!("{f} (log {})", a.log.display()),
                }
            );
        }
        if !self.refused_messages.is_empty() {
            out += &format!("Refused   {:?}\n", self.refused_messages);
        }
        out
    }
}

/// Runs until the duration, `max_events`, Ctrl-C (`interrupt`) or a writer failure ends it;
/// the summary and which of them it was.
pub fn run(
    config: &EvbRunConfig,
    interrupt: &AtomicBool,
    json: bool,
) -> anyhow::Result<(EvbSummary, StopReason)> {
    let monitoring =
        Monitoring::with_interval(Duration::from_secs(1), &config.metrics_addr, "metrics_addr")?;
    let builder_ticks_before = builder_cpu_ticks();
    let evb = EvbRun::start(&config.evb, &monitoring.registry, &Drills::default())?;
    let started = Instant::now();
    let mut last_line = Instant::now();
    // The builder's threads vanish from /proc once joined: the last sample before is kept.
    let mut builder_ticks = builder_ticks_before;
    let mut stopped_by = None;
    while !evb.is_finished() {
        builder_ticks = builder_ticks.max(builder_cpu_ticks());
        if stopped_by.is_none() {
            if config.duration_s > 0.0 && started.elapsed().as_secs_f64() >= config.duration_s {
                stopped_by = Some(StopReason::Duration);
            } else if interrupt.load(Ordering::Relaxed) {
                stopped_by = Some(StopReason::Interrupted);
            }
            if stopped_by.is_some() {
                evb.stop();
            }
        }
        if !json && last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            eprintln!("{}", live_line(&monitoring.stats.latest()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut summary = evb.join()?;
    summary.builder_cpu_seconds =
        Some(builder_ticks.saturating_sub(builder_ticks_before) as f64 / USER_HZ);
    monitoring.stop();
    // A failed writer stops the run itself; it is the reason even if a stop came after.
    let failed = summary.writers.iter().enumerate().find_map(|(bu, w)| {
        let e = w.error.as_ref()?;
        Some(StopReason::StorageFailed(format!(
            "builder unit {bu}'s writer: {e}"
        )))
    });
    let stop_reason = failed.or(stopped_by).unwrap_or(StopReason::InputEnded);
    Ok((summary, stop_reason))
}

fn gauges(s: &Snapshot, name: &str, label: &str) -> String {
    s.families
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| &f.series)
        .filter_map(|series| match series.value {
            Value::Gauge { value } => {
                Some(format!("{}{}={value:.0}", label, series.labels.get(label)?))
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The values of every series of metric `name`.
fn values<'a>(s: &'a Snapshot, name: &'a str) -> impl Iterator<Item = &'a Value> {
    s.families
        .iter()
        .filter(move |f| f.name == name)
        .flat_map(|f| &f.series)
        .map(|series| &series.value)
}

/// Built events/s, GB/s, queues per readout and builder unit, FED errors/s; with the farm,
/// its verified events/s, bad events and backlog of closed files.
pub fn live_line(s: &Snapshot) -> String {
    let fed_errors: f64 = FedCheckFailure::ALL
        .iter()
        .map(|f| s.counter_rate(&format!("swdaq_evb_fed_{}_total", f.name())))
        .sum();
    let farm = if s
        .families
        .iter()
        .any(|f| f.name == "swdaq_evb_farm_files_total")
    {
        // Every consumer publishes the same backlog (the writers' queue of closed files).
        let backlog = values(s, "swdaq_evb_farm_backlog_files")
            .filter_map(|v| match v {
                Value::Gauge { value } => Some(*value),
                _ => None,
            })
            .fold(0.0, f64::max);
        let bad: u64 = values(s, "swdaq_evb_farm_bad_events_total")
            .map(|v| match v {
                Value::Counter { total, .. } => *total,
                _ => 0,
            })
            .sum();
        format!(
            "  farm verified {:.0}/s, bad {bad}, backlog {backlog:.0} files",
            s.counter_rate("swdaq_evb_farm_events_verified_total"),
        )
    } else {
        String::new()
    };
    format!(
        "built {:.0}/s {:.3} GB/s  incomplete {:.0}/s  FED errors {:.0}/s  RU buffered: {}  BU open: {}  writer queue: {}{farm}",
        s.counter_rate("swdaq_evb_events_built_total"),
        s.counter_rate("swdaq_evb_built_bytes_total") / 1e9,
        s.counter_rate("swdaq_evb_events_incomplete_total"),
        fed_errors,
        gauges(s, "swdaq_evb_ru_buffered", "ru"),
        gauges(s, "swdaq_evb_bu_open_events", "bu"),
        gauges(s, "swdaq_evb_bu_writer_queue", "bu"),
    )
}

/// Super-fragments that never came, per readout unit, over every builder unit.
fn missing_per_ru(s: &EvbSummary) -> Vec<u64> {
    let rus = s.bus.iter().map(|b| b.build.missing_per_ru.len());
    let mut out = vec![0; rus.max().unwrap_or(0)];
    for b in &s.bus {
        for (total, &n) in out.iter_mut().zip(&b.build.missing_per_ru) {
            *total += n;
        }
    }
    out
}

/// The closing summary as JSON: every count, and the latency quantiles.
pub fn summary_json(s: &EvbSummary, stop_reason: &StopReason) -> serde_json::Value {
    let seconds = s.elapsed.as_secs_f64();
    let fed_failures: serde_json::Map<String, serde_json::Value> = FedCheckFailure::ALL
        .iter()
        .map(|f| {
            (
                f.name().to_owned(),
                s.feds
                    .iter()
                    .map(|(_, _, c)| c.failed(*f))
                    .sum::<u64>()
                    .into(),
            )
        })
        .collect();
    serde_json::json!({
        "seconds": seconds,
        "stop_reason": stop_reason,
        "stop_reason_text": stop_reason.to_string(),
        "triggered": s.evm.assigned,
        "built": s.built(),
        "incomplete": s.incomplete(),
        "written": s.written(),
        "written_bytes": s.written_bytes(),
        "lost": s.lost(),
        "lost_with_dead_builder_units": s.evm.lost.len(),
        "assigned_not_built": s.assigned_not_built(),
        "lost_events": s.evm.lost,
        "builder_units_gone": s.evm.gone,
        "unwritten": s.unwritten(),
        "unaccounted": s.unaccounted(),
        "throttled": s.evm.throttled,
        "max_behind_trigger_ms": s.evm.max_behind.as_secs_f64() * 1e3,
        "built_per_second": s.built() as f64 / seconds,
        "gbps": s.written_bytes() as f64 / seconds / 1e9,
        "build_time_p50_us": s.build_time_us(0.5),
        "build_time_p99_us": s.build_time_us(0.99),
        "fed_failures": fed_failures,
        "feds": s.feds.iter().map(|(ru, fed, c)| serde_json::json!({
            "ru": ru,
            "fed": fed,
            "good": c.good,
            "failures": FedCheckFailure::ALL.iter().map(|f| (f.name().to_owned(), c.failed(*f).into())).collect::<serde_json::Map<_, _>>(),
            "ingest": c.ingest,
        })).collect::<Vec<_>>(),
        "missing_per_ru": missing_per_ru(s),
        "writer_errors": s.writers.iter().filter_map(|w| w.error.as_ref().map(|e| e.to_string())).collect::<Vec<_>>(),
        "read_back": s.read_back.iter().map(read_back_json).collect::<Vec<_>>(),
        "builder_cpu_seconds": s.builder_cpu_seconds,
        "farm": s.farm.as_ref().map(|f| serde_json::json!({
            "files": f.counts.files,
            "events_verified": f.counts.events,
            "bytes": f.counts.bytes,
            "bad_events": f.counts.bad_events,
            "bad_files": f.counts.bad_files,
            "cpu_seconds": f.cpu_seconds,
            "kept": f.kept.iter().map(|(p, why)| format!("{}: {why}", p.display())).collect::<Vec<_>>(),
            "errors": f.errors,
        })),
    })
}

/// What a dead builder unit left on disk, without its event numbers (the summary's
/// `lost_events` already holds those it did not write).
fn read_back_json(r: &ReadBack) -> serde_json::Value {
    let mut j = serde_json::json!({ "bu": r.bu, "reported": r.reported });
    match &r.left {
        Ok(l) => {
            j["events_in_closed_files"] = l.events.len().into();
            j["closed_files"] = l.files.into();
            j["duplicate_events"] = serde_json::json!(l.duplicates);
            j["partial_files"] = serde_json::json!(l.partial);
            j["unreadable_files"] = serde_json::json!(l.unreadable);
        }
        Err(e) => j["error"] = e.as_str().into(),
    }
    j
}

pub fn summary_text(s: &EvbSummary, stop_reason: &StopReason) -> String {
    let j = summary_json(s, stop_reason);
    let mut out = format!(
        "Run ended after {:.1} s ({stop_reason}).\n",
        s.elapsed.as_secs_f64()
    );
    out += &format!(
        "Events    {} triggered, {} built ({} incomplete), {} written ({:.3} GB), {} lost ({} with dead builder units, {} unwritten{}); {} throttled, at most {:.1} ms behind the trigger clock\n",
        s.evm.assigned,
        s.built(),
        s.incomplete(),
        s.written(),
        s.written_bytes() as f64 / 1e9,
        s.lost(),
        s.evm.lost.len(),
        s.unwritten(),
        match s.assigned_not_built() {
            Some(n) if n > 0 => format!(", {n} assigned and never built"),
            _ => String::new(),
        },
        s.evm.throttled,
        s.evm.max_behind.as_secs_f64() * 1e3,
    );
    if s.unaccounted() > 0 {
        out += &format!(
            "UNACCOUNTED {} events triggered are neither written nor counted lost: a bug, please report it\n",
            s.unaccounted()
        );
    }
    out += &format!(
        "Rate      {:.0} events/s, {:.3} GB/s; build time p50 {} us p99 {} us\n",
        j["built_per_second"].as_f64().unwrap_or(0.0),
        j["gbps"].as_f64().unwrap_or(0.0),
        s.build_time_us(0.5),
        s.build_time_us(0.99),
    );
    for (ru, fed, c) in &s.feds {
        let failed: Vec<String> = FedCheckFailure::ALL
            .iter()
            .filter(|f| c.failed(**f) > 0)
            .map(|f| format!("{} {}", c.failed(*f), f.name()))
            .collect();
        if !failed.is_empty() {
            out += &format!("FED {fed:>4} (RU {ru}): {}\n", failed.join(", "));
        }
    }
    if !s.evm.gone.is_empty() {
        out += &format!(
            "Lost      builder units {:?} gone; their events in no closed file, by number: {}\n",
            s.evm.gone,
            numbers(&s.evm.lost)
        );
    }
    for r in &s.read_back {
        out += &match &r.left {
            Ok(l) => format!(
                "Read back builder unit {}: {} events in {} closed files{}{}{}\n",
                r.bu,
                l.events.len(),
                l.files,
                listed("; left open, not counted written", &l.partial),
                listed("; unreadable", &l.unreadable),
                if l.duplicates.is_empty() {
                    String::new()
                } else {
                    format!("; in two files: {}", numbers(&l.duplicates))
                },
            ),
            Err(e) => format!(
                "Read back builder unit {}: cannot read its directory ({e}); its lost events are an upper bound\n",
                r.bu
            ),
        };
    }
    for w in s.writers.iter().filter_map(|w| w.error.as_ref()) {
        out += &format!("Writer    failed: {w}\n");
    }
    if let Some(cpu) = s.builder_cpu_seconds {
        out += &format!(
            "CPU       event builder {cpu:.1} s ({:.1} us per built event)\n",
            cpu * 1e6 / s.built().max(1) as f64
        );
    }
    if let Some(f) = &s.farm {
        let c = &f.counts;
        out += &format!(
            "Farm      {} files read back and deleted or kept, {} events verified ({:.3} GB), {} bad events, {} files kept as .bad; {:.1} CPU s ({:.1} us per event)\n",
            c.files,
            c.events,
            c.bytes as f64 / 1e9,
            c.bad_events,
            c.bad_files,
            f.cpu_seconds,
            f.cpu_seconds * 1e6 / (c.events + c.bad_events).max(1) as f64,
        );
        for (path, why) in &f.kept {
            out += &format!("Farm      kept {}: {why}\n", path.display());
        }
        for e in &f.errors {
            out += &format!("Farm      {e}\n");
        }
    }
    out
}

/// `"; what: a, b"`, or nothing for none.
fn listed(what: &str, names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("{what}: {}", names.join(", "))
    }
}

/// Event numbers, runs of consecutive ones as `a-b`.
fn numbers(events: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &e in events {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == e => *last = e,
            _ => runs.push((e, e)),
        }
    }
    runs.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `swdaq run` with an event-builder configuration.
pub fn main(path: &Path, duration: Option<f64>, json: bool) -> anyhow::Result<()> {
    let mut config = load(path)?;
    if let Some(d) = duration {
        config.duration_s = d;
    }
    config.evb.run = run_files::claim_run(&[&config.evb.output], config.evb.run, None)?;
    if config.topology.is_distributed() {
        return main_apps(&config, json);
    }
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupt);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("cannot install the Ctrl-C handler")?;
    eprintln!(
        "swdaq run {} (event builder): {} readout units, {} builder units, {} Hz{}, writing to {}",
        config.evb.run,
        config.evb.rus.len(),
        config.evb.builder_units,
        config.evb.trigger_rate_hz,
        if config.evb.paced {
            ""
        } else {
            " (not paced: as fast as it builds)"
        },
        config.evb.output.display()
    );
    if let Some(warning) = swdaq_evb::ramdisk::advice(&config.evb.output) {
        eprintln!("{warning}");
    }
    let (summary, stop_reason) = run(&config, &interrupt, json)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary_json(&summary, &stop_reason))?
        );
    } else {
        print!("{}", summary_text(&summary, &stop_reason));
    }
    if let Some(e) = summary.writers.iter().find_map(|w| w.error.as_ref()) {
        anyhow::bail!("{e}");
    }
    Ok(())
}

/// `swdaq run` with an event-builder configuration that has a topology.
fn main_apps(config: &EvbRunConfig, json: bool) -> anyhow::Result<()> {
    let stop = Arc::new(StopRequest::default());
    crate::runtime::stop::install(Arc::clone(&stop))?;
    let exe = crate::runtime::launch::current_exe()?;
    let summary = run_apps(config, &exe, &stop)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary.json())?);
    } else {
        print!("{}", summary.text());
    }
    if let Some(e) = summary.evb.writers.iter().find_map(|w| w.error.as_ref()) {
        anyhow::bail!("{e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_applications_config_is_a_valid_event_builder_topology() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-apps.toml");
        let config = load(&path).unwrap();
        let kinds: Vec<AppKind> = config.topology.apps.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, [AppKind::Evm, AppKind::Ru, AppKind::Bu, AppKind::Bu]);
        assert_eq!(
            (
                config.evb.rus.len(),
                config.evb.rus[0].len(),
                config.evb.builder_units
            ),
            (2, 4, 2)
        );
        // What the applications read back from the launcher is the same configuration.
        assert_eq!(
            parse(&toml::to_string_pretty(&config).unwrap()).unwrap(),
            config
        );
        let mut wrong = config.clone();
        wrong.evb.builder_units = 3;
        assert!(parse(&toml::to_string_pretty(&wrong).unwrap()).is_err());
        // The farm stand-in reads the files in the builder's process: not with applications.
        let mut farm = config.clone();
        farm.evb.farm.consumers = 1;
        let err = parse(&toml::to_string_pretty(&farm).unwrap()).unwrap_err();
        assert!(err.to_string().contains("evb.farm"), "{err}");
    }

    #[test]
    fn shipped_files_config_reads_generated_fed_files_to_their_end() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-files.toml");
        let mut config = load(&path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let feds = config.evb.rus.concat();
        let fed_sim = swdaq_sim::fed::FedSimConfig {
            feds,
            ..config.evb.fed_sim(0)
        };
        swdaq_sim::fed::write_fed_files(fed_sim, 300, 1, dir.path()).unwrap();
        config.evb.input.directory = dir.path().to_owned();
        config.evb.output = dir.path().join("out");
        let (summary, _) = run(&config, &AtomicBool::new(false), true).unwrap();
        assert_eq!(
            (summary.built(), summary.written(), summary.incomplete()),
            (300, 300, 0)
        );
    }

    /// The shipped UDP configuration on free ports, fed by the FED sender: every event the
    /// FEDs send is built, and the run ends at `max_events`.
    #[test]
    fn shipped_udp_config_builds_what_the_feds_send() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-udp.toml");
        let mut config = load(&path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let feds = config.evb.rus.concat();
        let base = loop {
            let first = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = first.local_addr().unwrap().port();
            let free = |k: usize| std::net::UdpSocket::bind(("127.0.0.1", port + k as u16));
            if port < 60_000 && (1..feds.len()).all(|k| free(k).is_ok()) {
                break first.local_addr().unwrap();
            }
        };
        config.evb.input.udp_address = Some(base);
        config.evb.output = dir.path().join("out");
        config.evb.max_events = Some(300);
        let fed_sim = swdaq_sim::fed::FedSimConfig {
            feds,
            ..config.evb.fed_sim(0)
        };
        let sender = std::thread::spawn(move || {
            // Send once every FED's port is bound (`/proc/net/udp`).
            let bound = |k: u16| {
                let local = format!("0100007F:{:04X}", base.port() + k);
                std::fs::read_to_string("/proc/net/udp")
                    .unwrap()
                    .lines()
                    .any(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !(0..8).all(bound) {
                assert!(Instant::now() < deadline, "the run never bound its ports");
                std::thread::sleep(Duration::from_millis(10));
            }
            swdaq_evb::fed_udp::send(fed_sim, 300, base, true).unwrap()
        });
        let (summary, _) = run(&config, &AtomicBool::new(false), true).unwrap();
        let sent = sender.join().unwrap();
        assert_eq!(sent.datagrams, 8 * 300);
        let dropped: u64 = summary.feds.iter().map(|f| f.2.ingest.kernel_dropped).sum();
        assert_eq!(
            (summary.built(), summary.written(), summary.incomplete()),
            (300, 300, 0)
        );
        let good: u64 = summary.feds.iter().map(|f| f.2.good).sum();
        assert_eq!(good + dropped, sent.datagrams);
    }

    #[test]
    fn lost_events_print_as_runs_of_numbers() {
        assert_eq!(numbers(&[1, 2, 3, 7, 9, 10]), "1-3, 7, 9-10");
        assert_eq!(numbers(&[]), "");
    }

    #[test]
    fn shipped_example_config_loads_and_runs() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb.toml");
        assert!(is_evb_config(&path).unwrap());
        let mut config = load(&path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        config.evb.output = dir.path().to_owned();
        config.evb.max_events = Some(2000);
        config.evb.paced = false;
        config.metrics_addr = "127.0.0.1:0".into();
        let (summary, stop_reason) = run(&config, &AtomicBool::new(false), true).unwrap();
        assert_eq!(
            (summary.built(), summary.written(), summary.lost()),
            (2000, 2000, 0)
        );
        assert_eq!(stop_reason, StopReason::InputEnded);
        let text = summary_text(&summary, &stop_reason);
        assert!(text.contains("(the input ended"), "{text}");
        assert!(text.contains("2000 built (0 incomplete)"), "{text}");
    }
}
