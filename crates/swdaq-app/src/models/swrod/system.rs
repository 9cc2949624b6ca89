//! The SW ROD's runs. In one process: emulated FELIX cards (one thread each, paced at the
//! L1 accept rate) hand each ROB its e-links' blocks; one SW ROD thread per ROB decodes and
//! aggregates them into ROB fragments and passes them down its consumer chain: the ROB's
//! request server and the monitoring sampler. The HLT asks every ROB's server for each L1
//! ID, builds the full event and stores one in `hlt_accept_every` in raw files (`threads`).
//! As the applications of a `[topology]` (`apps`): started by the launcher, stopped HLT
//! supervisor first, then the HLT applications, then the `swrod` applications, their
//! reports merged into the same report.

use super::apps::merge::merge;
use super::apps::{EVENT_STREAMS, HLT, HLTSV, SWROD};
use super::cards::Progress;
use super::config::SwrodRunConfig;
use super::report::SwrodReport;
use super::threads;
use crate::live::Live;
use crate::runtime::dqm_stream::StreamedDqm;
use crate::runtime::launch::{Plan, Stages, launch};
use crate::runtime::model::RunHooks;
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::StopReason;
use crate::runtime::steering::{Steering, TriggerSteer};
use crate::runtime::stop::StopRequest;
use crate::runtime::supervise::{Supervised, supervise};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use swdaq_monitor::StatsThread;
use swdaq_trigger::TriggerControl;

/// Runs until the duration, `max_l1as`, a stop request or a storage failure ends it; `hooks` hear when data
/// taking has begun (the cards' L1 accepts can then be held: run control's pause), the live
/// figures every live interval, and the stop. The report and why it ended.
pub fn run(
    config: &SwrodRunConfig,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<(SwrodReport, StopReason)> {
    let monitoring = Monitoring::start(&config.run.metrics_addr, "run.metrics_addr")?;
    let hold = Arc::new(AtomicBool::new(false));
    let mut stopped_by = StopReason::InputEnded;
    let report = threads::run_threads(
        config,
        &monitoring.registry,
        Arc::clone(&hold),
        |view| hooks.dqm(view),
        |progress| {
            hooks.started(Steering {
                trigger: Some(Box::new(CardHold(Arc::clone(&hold)))),
                bursts: None,
            });
            let mut watch = SwrodWatch {
                progress,
                config,
                stats: &monitoring.stats,
            };
            let duration = config.run.duration();
            stopped_by = supervise(&mut watch, duration, stop, hooks);
        },
    )?;
    monitoring.stop();
    let stop_reason = stopped_by.unless_storage_failed(report.storage_error.clone());
    Ok((report, stop_reason))
}

/// What the SW ROD in one process shows the supervision loop: it ends by itself when its
/// cards do (`max_l1as`, the files' or servers' end) or its storage fails; stopped, the cards
/// end at a common L1 accept count and the HLT finishes its events (live figures go on).
struct SwrodWatch<'p, 'a> {
    progress: &'p mut Progress<'a>,
    config: &'p SwrodRunConfig,
    stats: &'p StatsThread,
}

impl Supervised for SwrodWatch<'_, '_> {
    fn ended(&mut self) -> Option<StopReason> {
        if self.progress.storage_failed() {
            // The report's storage error names it (see `run`).
            Some(StopReason::StorageFailed("the storage failed".into()))
        } else {
            self.progress.cards_done().then_some(StopReason::InputEnded)
        }
    }

    fn live(&self, elapsed: Duration) -> Live {
        super::live::live(
            &self.stats.latest(),
            elapsed,
            self.config.swrod.ring_slots,
            self.config.swrod.block_size(),
        )
    }

    fn begin_stop(&mut self, stop: &StopRequest) {
        stop.waiting_for(
            "the cards to send their last L1 accepts and the HLT to finish its events",
        );
        self.progress.stop();
    }

    fn drained(&mut self) -> bool {
        self.progress.cards_done()
    }
}

/// The SW ROD as applications (`exe` is the `swdaq` program to start them with): run
/// control's pause and resume go to the HLT supervisor, which holds the L1 accepts (and so
/// the cards); the report and why the run ended. With `[dqm]`, this process monitors the
/// events the HLT applications publish.
pub fn run_apps(
    config: &SwrodRunConfig,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<(SwrodReport, StopReason)> {
    config.validate()?;
    // Subscribed before the applications start, so that the first events are taken.
    let dqm = StreamedDqm::start_for_topology(
        &config.dqm,
        &config.run,
        &config.topology,
        &EVENT_STREAMS,
        threads::fill_published,
        hooks,
    )?;
    let s = &config.swrod;
    let stages = Stages {
        stop_order: &[HLTSV, HLT, SWROD],
        essential: &[HLTSV],
        ends_with: (
            HLT,
            StopReason::AppFailed("every HLT application ended".into()),
        ),
        live: &|snapshot, elapsed| {
            super::live::live(snapshot, elapsed, s.ring_slots, s.block_size())
        },
        trigger_at: Some(HLTSV),
        bursts_to: None,
        clock_followers: &[],
    };
    let launched = launch(&Plan::of(config, stages), exe, stop, hooks)?;
    let stop_reason = launched.stop_reason.clone();
    let mut report = merge(launched, config);
    if let Some(dqm) = dqm {
        let published = report.apps.as_ref().map(|a| &a.events_published);
        report.dqm = Some(dqm.finish_stopped(stop, &config.run, |app| {
            published.and_then(|p| p.get(app)).copied()
        }));
    }
    let stop_reason = stop_reason.unless_storage_failed(report.storage_error.clone());
    Ok((report, stop_reason))
}

/// Run control's pause of a SW ROD run: the cards hold their L1 accepts, as a busy from the
/// central trigger would; readout and the HLT finish what they have.
struct CardHold(Arc<AtomicBool>);

impl TriggerSteer for CardHold {
    fn send(&self, control: TriggerControl) -> Result<(), String> {
        match control {
            TriggerControl::Pause => self.0.store(true, Ordering::Relaxed),
            TriggerControl::Resume => self.0.store(false, Ordering::Relaxed),
            TriggerControl::Change(_) => {
                return Err("the SW ROD's L1 accepts have no trigger sources to change".into());
            }
        }
        Ok(())
    }
}
