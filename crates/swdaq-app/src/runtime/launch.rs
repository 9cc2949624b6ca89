//! `swdaq run` with a topology: starts every application as a child process (through its
//! host's launcher prefix), hands each the run's configuration, waits until all are ready,
//! starts them together, and at the end stops them in data-flow order — trigger, then the
//! orchestrator (once it has placed every decision), then the builders (once they have
//! stored every record), then readout — and merges their reports into one summary.
//!
//! An application that dies during the run is logged and named in the summary; the others
//! go on (the orchestrator re-assigns a dead builder's records, records lacking a dead
//! readout's links come out Incomplete naming them). The launcher only ever signals the
//! processes it started, and kills one only when it outlives the stop time-out.
//!
//! Every model's applications are launched the same way: its [`Plan`] says their stop order,
//! which ones the run cannot go on without, which one holds the trigger, and how the model
//! turns the applications' figures into its `Live`.

use super::child::{Running, spawn, stop_all, stop_stage, take_event};
use super::live_feed::{halted, snapshot_of};
use super::stdio::{self as control, Event};
use crate::live::{AppRow, Live};
use crate::runtime::model::{Configured, RunHooks};
use crate::runtime::outcome::{AppOutcome, StopReason};
use crate::runtime::steering::{
    BurstReason, BurstRequests, BurstStarted, RecordError, Steering, check_seconds,
};
use crate::runtime::stop::StopRequest;
use crate::runtime::supervise::{Supervised, supervise};
use crate::runtime::topology::TopologySection;
use anyhow::{Context, anyhow, bail};
use crossbeam_channel::{Receiver, Sender};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_dataflow::TriggerInput;
use swdaq_monitor::Snapshot;
use swdaq_trigger::TriggerControl;

/// What [`launch`] needs to know of a run: its applications, what it hands them, and how
/// it ends and stops.
pub struct Plan<'a> {
    pub topology: &'a TopologySection,
    /// The configuration every application reads on stdin.
    pub toml: String,
    pub run_number: u32,
    pub logs: PathBuf,
    /// `None`: until interrupted.
    pub duration: Option<Duration>,
    pub stages: Stages<'a>,
}

impl<'a> Plan<'a> {
    /// The run of `config` as its topology's applications: its text, number, log directory
    /// and duration as its `[run]` gives them.
    pub fn of(config: &'a dyn Configured, stages: Stages<'a>) -> Self {
        let run = config.run_section();
        Self {
            topology: config.topology(),
            toml: config.to_toml(),
            run_number: run.number,
            logs: logs_dir(&run.output_dir, run.number),
            duration: run.duration(),
            stages,
        }
    }
}

/// What a model's applications are to the launcher.
pub struct Stages<'a> {
    /// Stage by stage, in data-flow order.
    pub stop_order: &'a [&'a str],
    /// The run cannot go on once one of these has ended.
    pub essential: &'a [&'a str],
    /// The run ends once every application of this kind has ended, for this reason.
    pub ends_with: (&'a str, StopReason),
    /// The model's live figures from the applications' merged snapshot, `elapsed` into the run.
    pub live: &'a LiveFigures<'a>,
    /// The applications that take run control's trigger requests (pause, resume, changes).
    pub trigger_at: Option<&'a str>,
    /// The applications whose data follow the trigger's clock: told the point a pause
    /// begins at, as the trigger fixed it, and the resume.
    pub clock_followers: &'a [&'a str],
    /// The applications that take run control's raw-burst requests.
    pub bursts_to: Option<&'a str>,
}

/// Where a run's application logs go, for every model: `<output_dir>/run<NNNNNN>-logs/`.
pub fn logs_dir(output_dir: &Path, run_number: u32) -> PathBuf {
    output_dir.join(format!("run{run_number:06}-logs"))
}

/// Makes a model's `Live` from its applications' merged snapshot.
pub type LiveFigures<'a> = dyn Fn(&Snapshot, Duration) -> Live + Sync + 'a;

/// The trigger's pauses as the launcher passed them on, so that the point of a pause already
/// resumed (its answer crossed the resume) is never passed on.
#[derive(Default)]
struct PauseRelay {
    /// Pause requests sent to the trigger.
    sent: u64,
    paused: bool,
}

impl PauseRelay {
    fn note(&mut self, control: &TriggerControl) {
        match control {
            TriggerControl::Pause => {
                self.sent += 1;
                self.paused = true;
            }
            TriggerControl::Resume => self.paused = false,
            TriggerControl::Change(_) => {}
        }
    }

    /// The event to pass on from the trigger's answer `(event, pause number)`, if it answers
    /// the pause in force.
    fn point(&self, (event, pause): (u64, u64)) -> Option<u64> {
        (self.paused && pause == self.sent).then_some(event)
    }
}

/// An application whose figures are this old has stopped sending them: its sources' rates
/// count as zero (five live intervals: a loaded host's late figures are not taken for it).
const HALTED_AFTER: Duration = Duration::from_secs(1);

/// Run-control requests waiting to be passed to the applications.
const CONTROL_QUEUE: usize = 64;

/// How the applications ran: each one's kind, outcome and report bytes, in topology order.
pub struct Launched {
    /// From the start to the last application stopped: the span the applications took data
    /// in (a stage slow to stop keeps the ones after it reading), so rates over it are true.
    pub seconds: f64,
    pub stop_reason: StopReason,
    pub apps: Vec<(String, AppOutcome, Option<Vec<u8>>)>,
}

/// Starts the plan's applications, waits until all are ready, starts them, supervises the
/// run and stops them stage by stage; `hooks` hear when it started (run-control requests
/// then go to the trigger application, if there is one) and when the stop begins.
pub fn launch(
    plan: &Plan,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<Launched> {
    ignore_sigpipe();
    let logs = &plan.logs;
    std::fs::create_dir_all(logs)
        .with_context(|| format!("cannot create the log directory {}", logs.display()))?;
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let mut apps: Vec<Running> = Vec::new();
    for (index, app) in plan.topology.apps.iter().enumerate() {
        let launcher = match app.host.as_str() {
            "" => &[][..],
            host => &plan.topology.host(host).expect("validated").launcher[..],
        };
        let files = (plan.toml.as_str(), plan.logs.as_path());
        match spawn(app, launcher, exe, files, index, events_tx.clone()) {
            Ok(r) => apps.push(r),
            Err(e) => {
                stop_all(&mut apps, Duration::from_secs(5));
                return Err(e.context(format!("starting {}", app.name)));
            }
        }
    }
    drop(events_tx);
    let t = plan.topology;
    if let Err(e) = wait_ready(
        &mut apps,
        &events_rx,
        Duration::from_secs_f64(t.start_timeout_s),
    ) {
        stop_all(&mut apps, Duration::from_secs(5));
        return Err(e);
    }
    for a in &mut apps {
        a.command("start");
    }
    let started = Instant::now();
    eprintln!(
        "swdaq run {}: {} applications started; logs in {}",
        plan.run_number,
        apps.len(),
        logs.display()
    );
    let (controls_tx, controls) = crossbeam_channel::bounded(CONTROL_QUEUE);
    let (bursts_tx, bursts) = crossbeam_channel::bounded(CONTROL_QUEUE);
    hooks.started(Steering {
        trigger: plan
            .stages
            .trigger_at
            .map(|_| Box::new(controls_tx) as Box<dyn crate::runtime::steering::TriggerSteer>),
        bursts: plan
            .stages
            .bursts_to
            .map(|_| Arc::new(ForwardBursts(bursts_tx)) as Arc<dyn BurstRequests>),
    });
    let inputs = Inputs {
        controls: &controls,
        bursts: &bursts,
    };
    let mut watch = Watch {
        plan,
        apps: &mut apps,
        events: &events_rx,
        inputs,
        pause: PauseRelay::default(),
    };
    let stop_reason = supervise(&mut watch, plan.duration, stop, hooks);
    let stop_timeout = Duration::from_secs_f64(t.stop_timeout_s);
    for &stage in plan.stages.stop_order {
        stop_stage(&mut apps, stage, &events_rx, stop_timeout, stop);
    }
    Ok(Launched {
        seconds: started.elapsed().as_secs_f64(),
        stop_reason,
        apps: apps
            .into_iter()
            .map(|a| (a.kind, a.outcome, a.report))
            .collect(),
    })
}

fn wait_ready(
    apps: &mut [Running],
    events: &Receiver<(usize, anyhow::Result<Event>)>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !apps.iter().all(|a| a.ready) {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(50)) {
            take_event(apps, e);
        }
        for a in apps.iter_mut().filter(|a| !a.ready) {
            if a.poll_exit() {
                bail!(
                    "{} ended before it was ready ({}); see {}",
                    a.outcome.name,
                    a.outcome.failure.as_deref().unwrap_or("exited"),
                    a.outcome.log.display()
                );
            }
        }
        if Instant::now() >= deadline {
            let late: Vec<&str> = apps
                .iter()
                .filter(|a| !a.ready)
                .map(|a| a.outcome.name.as_str())
                .collect();
            bail!("not ready after {timeout:?}: {}", late.join(", "));
        }
    }
    Ok(())
}

/// Burst requests (run control) passed to every readout application as `record` lines; each
/// application records its own links and counts its refusals.
struct ForwardBursts(Sender<f64>);

impl BurstRequests for ForwardBursts {
    fn record(&self, seconds_after: f64, _: BurstReason) -> Result<BurstStarted, RecordError> {
        check_seconds(seconds_after)?;
        self.0.try_send(seconds_after).map_err(|e| {
            RecordError::NotPassedOn(match e {
                crossbeam_channel::TrySendError::Full(_) => "too many requests waiting",
                crossbeam_channel::TrySendError::Disconnected(_) => "the run is stopping",
            })
        })?;
        Ok(BurstStarted {
            burst: None,
            directory: None,
            seconds_after,
        })
    }
}

/// What run control passes on to the applications while the run goes on.
struct Inputs<'a> {
    controls: &'a Receiver<TriggerInput>,
    bursts: &'a Receiver<f64>,
}

/// The applications as the supervision loop sees them: between its checks it waits for the
/// applications' events, passing run control's requests on; the run ends by itself when an
/// application's storage fails, the input ends, an essential application dies or every one
/// of the plan's `ends_with` kind has ended. The stages are stopped after the loop.
struct Watch<'a, 'p> {
    plan: &'a Plan<'p>,
    apps: &'a mut [Running],
    events: &'a Receiver<(usize, anyhow::Result<Event>)>,
    inputs: Inputs<'a>,
    pause: PauseRelay,
}

impl Supervised for Watch<'_, '_> {
    fn wait(&mut self, tick: Duration) {
        if let Ok(e) = self.events.recv_timeout(tick) {
            take_event(self.apps, e);
        }
        self.pass_on_requests();
        for a in self.apps.iter_mut().filter(|a| !a.died) {
            if a.poll_exit() {
                a.died = true;
                a.outcome.failure.get_or_insert_with(|| "exited".into());
                eprintln!(
                    "swdaq run: {} ended during the run ({}); see {}",
                    a.outcome.name,
                    a.outcome.failure.as_deref().unwrap_or_default(),
                    a.outcome.log.display()
                );
            }
        }
    }

    fn ended(&mut self) -> Option<StopReason> {
        let apps = &*self.apps;
        if let Some(a) = apps.iter().find(|a| a.storage_failed.is_some()) {
            let why = a.storage_failed.as_deref().unwrap_or_default();
            return Some(StopReason::StorageFailed(format!(
                "{}: {why}",
                a.outcome.name
            )));
        }
        if apps.iter().any(|a| a.input_ended) {
            return Some(StopReason::InputEnded);
        }
        if let Some(a) = apps
            .iter()
            .find(|a| a.died && self.plan.stages.essential.contains(&a.kind.as_str()))
        {
            return Some(StopReason::AppFailed(format!(
                "{} ({}) ended during the run",
                a.outcome.name, a.kind
            )));
        }
        let (kind, reason) = &self.plan.stages.ends_with;
        apps.iter()
            .filter(|a| a.kind == *kind)
            .all(|a| a.died)
            .then(|| reason.clone())
    }

    fn live(&self, elapsed: Duration) -> Live {
        live_of(self.plan, self.apps, elapsed)
    }

    fn begin_stop(&mut self, _: &StopRequest) {}

    fn drained(&mut self) -> bool {
        true
    }
}

impl Watch<'_, '_> {
    /// Run control's trigger requests to the trigger's applications (a resume to the clock
    /// followers too), a pause's point to the clock followers, bursts to the readouts.
    fn pass_on_requests(&mut self) {
        let plan = self.plan;
        for input in self.inputs.controls.try_iter() {
            if let TriggerInput::Control(c) = input {
                self.pause.note(&c);
                let line = control::trigger_control_line(&c);
                let resumed = c == TriggerControl::Resume;
                for a in self.apps.iter_mut().filter(|a| {
                    Some(a.kind.as_str()) == plan.stages.trigger_at
                        || (resumed && plan.stages.clock_followers.contains(&a.kind.as_str()))
                }) {
                    a.command(&line);
                }
            }
        }
        let answers: Vec<_> = self
            .apps
            .iter_mut()
            .filter_map(|a| a.paused_from.take())
            .collect();
        for answer in answers {
            if let Some(event) = self.pause.point(answer) {
                let line = control::pause_from_line(event);
                for a in self
                    .apps
                    .iter_mut()
                    .filter(|a| plan.stages.clock_followers.contains(&a.kind.as_str()))
                {
                    a.command(&line);
                }
            }
        }
        for seconds in self.inputs.bursts.try_iter() {
            for readout in self
                .apps
                .iter_mut()
                .filter(|a| Some(a.kind.as_str()) == plan.stages.bursts_to)
            {
                readout.command(&control::record_line(seconds));
            }
        }
    }
}

/// The model's `Live` from every application's latest series, with a row per application.
fn live_of(plan: &Plan, apps: &[Running], elapsed: Duration) -> Live {
    let snapshot = snapshot_of(apps.iter().filter_map(|a| {
        let (series, at) = a.live.as_ref()?;
        let series = if a.died || at.elapsed() > HALTED_AFTER {
            halted(series, at.elapsed())
        } else {
            series.clone()
        };
        Some((a.outcome.name.as_str(), series))
    }));
    let mut live = (plan.stages.live)(&snapshot, elapsed);
    live.apps = apps
        .iter()
        .map(|a| AppRow {
            name: a.outcome.name.clone(),
            kind: a.kind.clone(),
            host: a.outcome.host.clone(),
            state: match (&a.outcome.failure, a.died) {
                (_, false) => "running".into(),
                (Some(f), true) => f.clone(),
                (None, true) => "ended".into(),
            },
            heartbeat_age_s: a.live.as_ref().map(|l| l.1.elapsed().as_secs_f64()),
        })
        .collect();
    live
}

/// A command written to an application that has just died must be an error to handle, not
/// a SIGPIPE that kills the launcher (the binary restores SIGPIPE's default for its own
/// output pipes).
fn ignore_sigpipe() {
    // SAFETY: sets one signal's disposition to "ignore"; no handler runs, no memory is touched.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Used by the binary: the `swdaq` executable that is running, to start the applications.
pub fn current_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().map_err(|e| anyhow!("cannot tell which swdaq program runs: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event manager's answer is passed on only for the pause in force: an answer that
    /// crossed a resume, or belongs to an earlier pause, would hold events already given out.
    #[test]
    fn a_pause_point_is_passed_on_only_for_the_pause_in_force() {
        let mut relay = PauseRelay::default();
        assert_eq!(relay.point((5, 0)), None, "no pause asked");
        relay.note(&TriggerControl::Pause);
        assert_eq!(relay.point((5, 1)), Some(5));
        relay.note(&TriggerControl::Resume);
        assert_eq!(relay.point((5, 1)), None, "crossed the resume");
        relay.note(&TriggerControl::Pause);
        assert_eq!(relay.point((5, 1)), None, "the first pause's answer, late");
        assert_eq!(relay.point((9, 2)), Some(9));
    }
}
