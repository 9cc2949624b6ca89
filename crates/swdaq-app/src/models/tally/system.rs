//! The tally's runs: its counters as threads of one process, or as the `counter`
//! applications of a `[topology]`, their reports merged into one summary.

use super::apps::{COUNTER, CounterReport};
use super::config::TallyConfig;
use super::counter::{COUNTED, count};
use super::summary::{CounterSummary, TallySummary};
use crate::live::{Figure, Live, Series, SourceCounts, by_label, idle_by_label};
use crate::runtime::launch::{Plan, Stages, launch};
use crate::runtime::model::{Model, RunHooks};
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::StopReason;
use crate::runtime::steering::Steering;
use crate::runtime::stop::StopRequest;
use crate::runtime::supervise::{Supervised, supervise};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_monitor::{Snapshot, StatsThread};

/// The counters as threads of this process, until the duration or a stop.
pub fn run_one_process(
    config: &TallyConfig,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<TallySummary> {
    let monitoring = Monitoring::start(&config.run.metrics_addr, "run.metrics_addr")?;
    let halt = std::sync::Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads = (0..config.tally.counters)
        .map(|i| {
            let name = format!("counter-{i}");
            let (halt, registry) = (halt.clone(), monitoring.registry.clone());
            let (counter, rate_hz) = (name.clone(), config.tally.rate_hz);
            let thread = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || count(&counter, rate_hz, &halt, &registry, |_| {}))?;
            Ok((name, thread))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    hooks.started(Steering {
        trigger: None,
        bursts: None,
    });
    let mut watch = Watch {
        threads: &threads,
        halt: &halt,
        stats: &monitoring.stats,
    };
    let stop_reason = supervise(&mut watch, config.run.duration(), stop, hooks);
    let seconds = started.elapsed().as_secs_f64();
    let mut counters = Vec::new();
    for (name, thread) in threads {
        let counted = thread
            .join()
            .map_err(|_| anyhow::anyhow!("{name} panicked"))??;
        counters.push(CounterSummary::alone(name, counted));
    }
    monitoring.stop();
    Ok(TallySummary::new(counters, seconds, stop_reason))
}

/// What the counters in one process show the supervision loop: they never end by
/// themselves; stopped, they end at their next tick.
struct Watch<'a> {
    threads: &'a [(String, JoinHandle<anyhow::Result<u64>>)],
    halt: &'a AtomicBool,
    stats: &'a StatsThread,
}

impl Supervised for Watch<'_> {
    fn ended(&mut self) -> Option<StopReason> {
        None
    }

    fn live(&self, elapsed: Duration) -> Live {
        live(&self.stats.latest(), elapsed)
    }

    fn begin_stop(&mut self, _stop: &StopRequest) {
        self.halt.store(true, Ordering::Release);
    }

    fn drained(&mut self) -> bool {
        self.threads.iter().all(|(_, t)| t.is_finished())
    }
}

/// The counters as applications, all stopped together.
pub fn run_apps(
    config: &TallyConfig,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<TallySummary> {
    let stages = Stages {
        stop_order: &[COUNTER],
        essential: &[],
        ends_with: (COUNTER, StopReason::AppFailed("every counter ended".into())),
        live: &live,
        trigger_at: None,
        bursts_to: None,
        clock_followers: &[],
    };
    let launched = launch(&Plan::of(config, stages), exe, stop, hooks)?;
    let mut apps = Vec::new();
    let mut reports = Vec::new();
    for (_, mut outcome, bytes) in launched.apps {
        let report = match bytes.map(|b| postcard::from_bytes::<CounterReport>(&b)) {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                outcome.failure = Some(format!("report: not a counter's report: {e}"));
                None
            }
            None => None,
        };
        reports.push((outcome.name.clone(), report));
        apps.push(outcome);
    }
    let mut summary = TallySummary::new(
        CounterSummary::ring(&reports),
        launched.seconds,
        launched.stop_reason,
    );
    summary.add_apps(apps, reports.into_iter().filter_map(|(_, r)| r));
    Ok(summary)
}

/// The tally's live figures: counts per second, each counter a source.
pub fn live(s: &Snapshot, elapsed: Duration) -> Live {
    let per_counter = by_label(s, COUNTED, "counter");
    let idle = idle_by_label(s, COUNTED, "counter");
    let per_s: f64 = per_counter.values().map(|(_, r)| r).sum();
    let sources = per_counter
        .into_iter()
        .map(|(name, items)| {
            let idle_s = idle.get(&name).copied().unwrap_or(0.0);
            SourceCounts {
                name,
                items,
                idle_s,
                elapsed_s: elapsed.as_secs_f64(),
                mb_s: None,
                errors: (0, 0.0),
                drops: (0, 0.0),
            }
            .row(None)
        })
        .collect();
    Live {
        model: super::TALLY.name(),
        elapsed_s: elapsed.as_secs_f64(),
        figures: vec![Figure::new("counted_per_s", "counted", per_s, "/s")],
        series: Series {
            event_hz: Some(per_s),
            ..Default::default()
        },
        sources: crate::live::bad_first(sources),
        apps: Vec::new(),
    }
}
