//! The system under run control: its state (`fsm`), its configuration (any model's, held as
//! `Box<dyn Configured>`), and the run going on, which runs on a thread of its own. Every command goes through the state machine
//! under one lock, so concurrent commands see one order; waits (a run coming up, a run
//! stopping) release the lock. A configure that fails leaves the system unconfigured (the
//! configuration loaded before is dropped: a start would otherwise run a file the operator
//! has since changed) with the error in `/status` until a configure works.

use super::fsm::{Event, Illegal, State, next};
use super::published_dqm::PublishedDqm;
use super::watch::Watch;
use crate::error_report;
use crate::run_record;
use crate::runtime::dqm::{DqmView, put_worst_first};
use crate::runtime::model::{Capabilities, Configured};
use crate::runtime::steering::{BurstReason, RecordError, Steering};
use crate::runtime::stop::StopRequest;
use crate::transition_hooks::{Hook, HookRun, RunFacts};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use swdaq_control::{LogEntry, Publication};
use swdaq_format::run_files::RunsOnDisk;
use swdaq_registry::ClaimError;
use swdaq_trigger::{TriggerChange, TriggerControl};

/// How long a start waits for data taking to begin before answering.
const START_WAIT: Duration = Duration::from_secs(60);

/// The longest logbook entry taken, in characters.
const MAX_LOG_CHARS: usize = 4000;

/// How far beyond the last run a run number asked for may be without `confirm_jump`: more
/// runs than a detector takes in weeks of short runs, so a number further on is a typo, or a
/// request not from the operator, more likely than intent; and one request for 4294967295
/// would use up every number after it for this output directory.
pub const MAX_RUN_JUMP: u32 = 1000;

/// Why a command was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    Illegal(#[from] Illegal),
    /// Legal in this state, but not with these arguments now (a run number already used).
    #[error("{0}")]
    Conflict(String),
    /// The request itself is wrong (an unknown trigger source, a bad prescale).
    #[error("{0}")]
    BadRequest(String),
    /// The configured model has no such thing (raw bursts of the event builder, ...).
    #[error("{0}")]
    NotApplicable(String),
    /// The running trigger cannot take the request now (its input is full or closing).
    #[error("the trigger cannot take the request now: {0}")]
    Busy(String),
    /// The configuration could not be loaded or the run failed.
    #[error("{0}")]
    Failed(String),
}

impl ControlError {
    /// The HTTP status code it is answered with.
    pub fn status_code(&self) -> u16 {
        match self {
            ControlError::Illegal(_)
            | ControlError::Conflict(_)
            | ControlError::NotApplicable(_) => 409,
            ControlError::BadRequest(_) => 400,
            ControlError::Busy(_) => 503,
            ControlError::Failed(_) => 500,
        }
    }
}

/// Runs the console's runs page lists, newest first.
const RUNS_SHOWN: usize = 20;

/// Where the configuration comes from on every `configure` (the file `swdaq serve` was
/// given, with its command-line overrides).
pub type ConfigSource = Box<dyn Fn() -> anyhow::Result<Box<dyn Configured>> + Send + Sync>;

pub(super) struct Run {
    pub(super) number: u32,
    stop: Arc<StopRequest>,
    /// What steers the running system, from the moment data taking began until the stop.
    pub(super) steer: Steering,
    started_at: SystemTime,
    /// The run's `Live` figures, refreshed every status interval.
    pub(super) live: Option<Value>,
}

pub(super) struct Inner {
    state: State,
    config: Option<Box<dyn Configured>>,
    pub(super) run: Option<Run>,
    last_run_number: Option<u32>,
    /// How the last few runs ended: the summary (`swdaq run --json`'s, with its run number)
    /// or the error, newest last; a stop finds its own run's here even if another run has
    /// started since.
    pub(super) ended: VecDeque<(u32, Result<Value, String>)>,
    /// Why the last configure or the last run failed (cleared by a configure that works).
    pub(super) last_error: Option<String>,
    /// The last run's summary as `swdaq run` prints it (the console shows it as is).
    pub(super) last_summary_text: Option<String>,
    /// The console's history, journal and alerts.
    pub(super) watch: Watch,
    /// What the run registry found at the last start (runs left not ended) or could not
    /// record at the last stop.
    pub(super) registry_notes: Vec<String>,
    /// The online data-quality monitoring of the run going on, else of the last run, and
    /// that run's number; none when that run has none.
    pub(super) dqm: Option<(u32, DqmView)>,
    /// The histograms users' analyzers published for the run going on, else the last run.
    pub(super) published_dqm: PublishedDqm,
    /// What the configure hooks of the configuration loaded last did: kept with the next
    /// run's record (the run they prepared).
    configure_hooks: Vec<HookRun>,
    /// The transfer agent of the last started run's `[run.transfer]`, kept between runs: the
    /// files of a run reach the registry at its stop.
    transfer: Option<ServedTransfer>,
}

/// A transfer agent beside `swdaq serve`, with the section that asked for it and its
/// Prometheus series (those of `swdaq transfer --metrics-addr`), collected into run
/// control's own `/metrics` when asked.
struct ServedTransfer {
    section: crate::transfer_section::TransferSection,
    agent: swdaq_transfer::Agent,
    metrics: swdaq_monitor::Collector,
}

/// Runs whose outcome is kept.
pub(super) const ENDED_KEPT: usize = 16;

pub(super) struct Shared {
    inner: Mutex<Inner>,
    pub(super) changed: Condvar,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct RunControl {
    shared: Arc<Shared>,
    source: ConfigSource,
}

/// Logs a state change with who asked and when (UTC, RFC 3339).
fn log_change(who: &str, event: Event, from: State, to: State, detail: &str) {
    eprintln!(
        "{} swdaq serve: {who}: {event:?}: {} -> {}{detail}",
        humantime::format_rfc3339_millis(SystemTime::now()),
        from.name(),
        to.name(),
    );
}

/// A line of serve's log that is no transition.
pub(super) fn log_note(who: &str, note: &str) {
    eprintln!(
        "{} swdaq serve: {who}: {note}",
        humantime::format_rfc3339_millis(SystemTime::now())
    );
}

impl Inner {
    /// The transfer agent `config`'s `[run.transfer]` asks for: the running one when its
    /// section is the same, else a new one; one no longer asked for is stopped on a thread of
    /// its own, so run control never waits for it.
    fn keep_transfer(&mut self, config: &dyn Configured, who: &str) {
        let wanted = config.run_section().transfer.clone();
        if self.transfer.as_ref().map(|t| &t.section) == wanted.as_ref() {
            return;
        }
        if let Some(old) = self.transfer.take() {
            std::thread::spawn(move || drop(old.agent.stop(crate::transfer_section::STOP_WAIT)));
        }
        let Some(section) = wanted else {
            return;
        };
        let series = swdaq_monitor::Registry::new();
        match crate::transfer_section::start_agent(config.run_section(), Some(&series)) {
            Ok(Some(agent)) => {
                self.transfer = Some(ServedTransfer {
                    section,
                    agent,
                    metrics: swdaq_monitor::Collector::new(series),
                })
            }
            Ok(None) => {}
            Err(e) => log_note(who, &format!("no transfer to permanent storage: {e:#}")),
        }
    }

    /// The loaded configuration's run registry.
    fn registry_location(&self) -> Result<swdaq_registry::Location, ControlError> {
        let config = self.config.as_ref().ok_or_else(|| {
            ControlError::Conflict(
                "no configuration loaded: configure first (the run registry is the configuration's)"
                    .into(),
            )
        })?;
        config
            .run_section()
            .registry_location()
            .map_err(ControlError::Failed)
    }

    /// Carries out `event` (logged), or says why not.
    pub(super) fn apply(
        &mut self,
        event: Event,
        who: &str,
        detail: &str,
    ) -> Result<State, Illegal> {
        let from = self.state;
        self.state = next(from, event)?;
        log_change(who, event, from, self.state, detail);
        self.watch.transition(who, event, from, self.state, detail);
        Ok(self.state)
    }

    /// Where the configured runs write their files (none before a configure).
    fn output_dirs(&self) -> Vec<std::path::PathBuf> {
        self.config
            .as_ref()
            .map(|c| c.output_dirs())
            .unwrap_or_default()
    }

    /// Sends `control` to the running trigger without ever blocking the lock holder.
    fn send_to_trigger(&self, control: TriggerControl) -> Result<(), ControlError> {
        let Some(trigger) = self.run.as_ref().and_then(|r| r.steer.trigger.as_ref()) else {
            return Err(ControlError::Busy("the run is not taking data".into()));
        };
        trigger.send(control).map_err(ControlError::Busy)
    }

    /// What the configured model lets run control ask (`None`: nothing configured).
    fn capabilities(&self) -> Option<Capabilities> {
        self.config.as_ref().map(|c| c.steering())
    }

    /// Refuses `event` where the configured model has no such thing.
    fn check_capability(&self, event: Event) -> Result<(), ControlError> {
        let Some(can) = self.capabilities() else {
            return Ok(());
        };
        let allowed = match event {
            Event::Pause | Event::Resume => can.pause_resume,
            Event::ChangeTrigger => can.trigger_change.map(|_| ()),
            Event::Record => can.record.map(|_| ()),
            _ => Ok(()),
        };
        allowed.map_err(ControlError::NotApplicable)
    }

    /// The operators' commands legal now: by the state machine and the model's capabilities.
    fn commands(&self) -> Vec<&'static str> {
        OPERATOR_COMMANDS
            .iter()
            .filter(|(_, e)| next(self.state, *e).is_ok() && self.check_capability(*e).is_ok())
            .map(|(name, _)| *name)
            .collect()
    }
}

/// The operators' commands, as `/status` names them.
const OPERATOR_COMMANDS: [(&str, Event); 7] = [
    ("configure", Event::Configure),
    ("start", Event::Start),
    ("stop", Event::Stop),
    ("pause", Event::Pause),
    ("resume", Event::Resume),
    ("trigger", Event::ChangeTrigger),
    ("record", Event::Record),
];

impl RunControl {
    pub fn new(source: ConfigSource) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    state: State::Initial,
                    config: None,
                    run: None,
                    last_run_number: None,
                    ended: VecDeque::new(),
                    last_error: None,
                    last_summary_text: None,
                    watch: Watch::default(),
                    registry_notes: Vec::new(),
                    dqm: None,
                    published_dqm: PublishedDqm::default(),
                    configure_hooks: Vec::new(),
                    transfer: None,
                }),
                changed: Condvar::new(),
            }),
            source,
        }
    }

    pub fn state(&self) -> State {
        self.shared.lock().state
    }

    /// (Re)loads the configuration; if it cannot be loaded, the system is left unconfigured
    /// (the one loaded before is dropped) and `/status` says why.
    pub fn configure(&self, who: &str) -> Result<Value, ControlError> {
        // Checked before and after loading: the lock is not held meanwhile, because the
        // configure hooks may take their time limit and `/status` must answer all along.
        next(self.shared.lock().state, Event::Configure)?;
        let mut ran = Vec::new();
        let loaded = (self.source)().and_then(|c| {
            let hooks = &c.run_section().hooks;
            hooks.validate()?;
            hooks.run_refusing(Hook::PreConfigure, &RunFacts::of(&*c, false), &mut ran)?;
            c.validate()?;
            hooks.run_telling(Hook::PostConfigure, &RunFacts::of(&*c, false), &mut ran);
            Ok(c)
        });
        let mut inner = self.shared.lock();
        next(inner.state, Event::Configure)?;
        let config = match loaded {
            Ok(config) => config,
            Err(e) => {
                let message = one_line(&e);
                inner.config = None;
                inner.configure_hooks.clear();
                inner.last_error = Some(format!("configure failed: {message}"));
                inner.apply(Event::ConfigureFailed, who, &format!(": {message}"))?;
                return Err(ControlError::Failed(message));
            }
        };
        let detail = format!(" ({}: {})", config.model().name(), config.describe());
        inner.configure_hooks = ran;
        inner.config = Some(config);
        inner.last_error = None;
        inner.watch.state_fault(None);
        let state = inner.apply(Event::Configure, who, &detail)?;
        Ok(json!({ "state": state }))
    }

    /// Starts run `number` (if none is given: the configuration's, then the next free one in
    /// the output directory; a number with files there is refused, and one more than
    /// [`MAX_RUN_JUMP`] beyond the last run unless `confirm_jump`) and answers once data
    /// taking has begun, or the run stopped or failed first.
    pub fn start(
        &self,
        number: Option<u32>,
        confirm_jump: bool,
        who: &str,
    ) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        next(inner.state, Event::Start)?;
        let mut config = inner.config.clone().ok_or(Illegal {
            state: inner.state,
            event: Event::Start,
        })?;
        if let (Some(n), Some(last)) = (number, inner.last_run_number)
            && n <= last
        {
            return Err(ControlError::Conflict(format!(
                "run numbers must increase: run {n} is not after the last run, {last}"
            )));
        }
        let wanted = match (number, inner.last_run_number) {
            (Some(n), _) => n,
            (None, Some(_)) => 0,
            (None, None) => config.run_number(),
        };
        // 0: the next number free in the output directories, so a restarted server goes on
        // from what they hold; a number that has files there is refused.
        let dirs = config.output_dirs();
        let dirs: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
        if let Some(n) = number
            && !confirm_jump
        {
            check_jump(&dirs, n, inner.last_run_number)?;
        }
        config.set_run_number(wanted);
        let claimed = run_record::claim(&*config, inner.last_run_number, &run_record::os_user())
            .map_err(|e| match e {
                ClaimError::Taken(why) => ControlError::Conflict(why),
                ClaimError::Other(e) => ControlError::Failed(one_line(&e)),
            })?;
        for line in &claimed.not_ended {
            log_note(who, line);
        }
        inner.registry_notes = claimed.not_ended;
        inner.keep_transfer(&*config, who);
        let recorded = claimed.run;
        let number = recorded.number();
        config.set_run_number(number);
        let stop = Arc::new(StopRequest::default());
        inner.run = Some(Run {
            number,
            stop: Arc::clone(&stop),
            steer: Steering::default(),
            started_at: SystemTime::now(),
            live: None,
        });
        inner.last_run_number = Some(number);
        // The last run's histograms are not this run's: until it says it monitors, none.
        inner.dqm = None;
        inner.published_dqm.clear();
        inner.apply(Event::Start, who, &format!(" (run {number})"))?;
        let shared = Arc::clone(&self.shared);
        let configure_hooks = std::mem::take(&mut inner.configure_hooks);
        std::thread::Builder::new()
            .name(format!("run-{number}"))
            .spawn(move || {
                super::run_thread::run_thread(shared, config, stop, recorded, configure_hooks)
            })
            .map_err(|e| ControlError::Failed(format!("cannot start the run's thread: {e}")))?;
        let (inner, _) = self
            .shared
            .changed
            .wait_timeout_while(inner, START_WAIT, |i| {
                i.state == State::Starting && i.run.as_ref().is_some_and(|r| r.number == number)
            })
            .unwrap_or_else(|e| e.into_inner());
        match inner.ended.iter().find(|(n, _)| *n == number) {
            Some((_, Err(e))) => Err(ControlError::Failed(e.clone())),
            _ => Ok(json!({ "state": inner.state, "run_number": number })),
        }
    }

    /// Stops the run and answers with its summary once it has stopped.
    pub fn stop(&self, who: &str) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        next(inner.state, Event::Stop)?;
        let Some(run) = inner.run.as_ref() else {
            return Err(Illegal {
                state: inner.state,
                event: Event::Stop,
            }
            .into());
        };
        let number = run.number;
        run.stop.request();
        inner.apply(Event::Stop, who, &format!(" (run {number})"))?;
        let inner = self
            .shared
            .changed
            .wait_while(inner, |i| {
                i.run.as_ref().is_some_and(|r| r.number == number)
            })
            .unwrap_or_else(|e| e.into_inner());
        match inner.ended.iter().find(|(n, _)| *n == number) {
            Some((_, Ok(summary))) => Ok(summary.clone()),
            Some((_, Err(e))) => Err(ControlError::Failed(e.clone())),
            None => Err(ControlError::Conflict(format!(
                "run {number} ended without a summary"
            ))),
        }
    }

    pub fn pause(&self, who: &str) -> Result<Value, ControlError> {
        self.switch_triggers(Event::Pause, TriggerControl::Pause, who)
    }

    pub fn resume(&self, who: &str) -> Result<Value, ControlError> {
        self.switch_triggers(Event::Resume, TriggerControl::Resume, who)
    }

    fn switch_triggers(
        &self,
        event: Event,
        control: TriggerControl,
        who: &str,
    ) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        inner.check_capability(event)?;
        next(inner.state, event)?;
        inner.send_to_trigger(control)?;
        let state = inner.apply(event, who, "")?;
        Ok(json!({ "state": state }))
    }

    /// Changes a trigger source's prescale or rate: for the run going on, if any, and for
    /// the runs after it.
    pub fn change_trigger(&self, change: TriggerChange, who: &str) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        inner.check_capability(Event::ChangeTrigger)?;
        next(inner.state, Event::ChangeTrigger)?;
        let Some(config) = inner.config.as_ref() else {
            return Err(Illegal {
                state: inner.state,
                event: Event::ChangeTrigger,
            }
            .into());
        };
        let mut changed = config.clone();
        changed
            .change_trigger(&change)
            .map_err(ControlError::BadRequest)?;
        if inner.state.has_run() {
            inner.send_to_trigger(TriggerControl::Change(change.clone()))?;
        }
        inner.config = Some(changed);
        let detail = format!(
            " ({}: prescale {:?}, rate_hz {:?})",
            change.trigger, change.prescale, change.rate_hz
        );
        let state = inner.apply(Event::ChangeTrigger, who, &detail)?;
        Ok(json!({ "state": state }))
    }

    /// Records a raw burst of every link: the latency buffer and `seconds` after (the
    /// configuration's `recording.seconds_after` if `None`).
    pub fn record(&self, seconds: Option<f64>, who: &str) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        inner.check_capability(Event::Record)?;
        next(inner.state, Event::Record)?;
        let default_seconds = inner.capabilities().and_then(|c| c.record.ok());
        let Some(recorder) = inner.run.as_ref().and_then(|r| r.steer.bursts.clone()) else {
            return Err(ControlError::Conflict("the run is not taking data".into()));
        };
        let Some(seconds) = seconds.or(default_seconds) else {
            return Err(ControlError::Conflict(
                "the run records no raw bursts".into(),
            ));
        };
        let started = recorder
            .record(seconds, BurstReason::Command)
            .map_err(|e| match e {
                RecordError::BadSeconds(_) => ControlError::BadRequest(e.to_string()),
                RecordError::Io(..) => ControlError::Failed(e.to_string()),
                _ => ControlError::Conflict(e.to_string()),
            })?;
        let state = inner.apply(Event::Record, who, &format!(" ({seconds} s after)"))?;
        Ok(json!({ "state": state, "recording": started }))
    }

    /// Adds a logbook entry to run `entry.run_number`, else the run going on, else the last
    /// run, in the configuration's run registry.
    pub fn log(&self, entry: LogEntry, who: &str) -> Result<Value, ControlError> {
        let text = entry.text.trim();
        if text.is_empty() || text.chars().count() > MAX_LOG_CHARS {
            return Err(ControlError::BadRequest(format!(
                "a logbook entry has 1 to {MAX_LOG_CHARS} characters"
            )));
        }
        let (location, run) = {
            let inner = self.shared.lock();
            let current = inner.run.as_ref().map(|r| r.number);
            (
                inner.registry_location()?,
                entry.run_number.or(current).or(inner.last_run_number),
            )
        };
        // The registry is opened without the lock: its waits are bounded, but commands
        // need not share them.
        let author = entry.author.unwrap_or_else(|| who.to_string());
        let run = swdaq_registry::Registry::open(&location)
            .and_then(|mut registry| registry.add_log(run, &author, text))
            .map_err(|e| ControlError::Failed(one_line(&e)))?;
        log_note(who, &format!("logbook entry for run {run}"));
        Ok(json!({ "run_number": run }))
    }

    /// The newest runs (at most [`RUNS_SHOWN`]) in the configuration's run registry, newest
    /// first, each with its files' count and bytes and its logbook: the console's runs page.
    pub fn runs(&self) -> Result<Value, ControlError> {
        let location = self.shared.lock().registry_location()?;
        let failed = |e: anyhow::Error| ControlError::Failed(one_line(&e));
        // Read without the lock, as a logbook entry is written.
        let mut registry = swdaq_registry::Registry::open(&location).map_err(failed)?;
        let rows = registry
            .list(&swdaq_registry::RunFilter::default())
            .map_err(failed)?;
        let mut runs = Vec::new();
        // Each run's files and logbook only: not its configuration, summary and hooks.
        for row in rows.iter().rev().take(RUNS_SHOWN) {
            let files = registry.files(row.number).map_err(failed)?;
            let mut run = json!(row);
            run["files"] = json!(files.len());
            run["bytes"] = json!(files.iter().map(|f| f.bytes).sum::<u64>());
            run["logbook"] = json!(registry.logbook(row.number).map_err(failed)?);
            runs.push(run);
        }
        Ok(json!({ "registry": location.describe(), "runs": runs }))
    }

    /// The state, the commands it allows, the run going on with its live figures, the last
    /// run's summary or error, and the console's journal, alerts, disks and files.
    pub fn status(&self) -> Value {
        let mut inner = self.shared.lock();
        let run = inner.run.as_ref().map(|r| {
            json!({
                "run_number": r.number,
                "started_at": humantime::format_rfc3339_millis(r.started_at).to_string(),
                "elapsed_s": r.started_at.elapsed().map_or(0.0, |d| d.as_secs_f64()),
                "live": r.live,
            })
        });
        let last_summary = inner.ended.iter().rev().find_map(|(_, r)| r.as_ref().ok());
        let transfer = inner
            .transfer
            .as_ref()
            .map(|t| (t.section.destination.clone(), t.agent.status()));
        let mut status = json!({
            "state": inner.state,
            "model": inner.config.as_ref().map(|c| c.model().name()),
            "commands": inner.commands(),
            "trigger_sources": inner.capabilities().and_then(|c| c.trigger_change.ok()),
            "run": run,
            "last_run_number": inner.last_run_number,
            "last_summary": last_summary,
            "last_summary_text": inner.last_summary_text,
            "error": inner.last_error,
            "registry_notes": inner.registry_notes,
            "transfer": transfer.as_ref().map(|(destination, s)| json!({
                "destination": destination,
                "backlog": s.backlog,
                "verified": s.verified,
                "failed_attempts": s.failures,
                "corrupt_copies_found": s.corrupt_found,
                "deleted": s.deleted,
                "last_error": s.last_error,
            })),
        });
        let transfer_failing = transfer.map_or_else(Vec::new, |(destination, s)| {
            super::alerts::of_transfer(&destination, s.backlog.failed, s.last_error.as_deref())
        });
        let dirs = inner.output_dirs();
        let mut runs: Vec<u32> = inner.run.iter().map(|r| r.number).collect();
        runs.extend(inner.ended.back().map(|(n, _)| *n));
        let console = inner.watch.status(&dirs, &runs, transfer_failing);
        if let (Some(status), Value::Object(console)) = (status.as_object_mut(), console) {
            status.extend(console);
        }
        status
    }

    /// The console's data-quality view (`GET /dqm`): the run going on's online monitoring,
    /// else the last run's as it ended (`DqmView::to_json`, with `run_number` and `running`);
    /// `enabled: false` and why when that run has none or there was no run. The histograms
    /// users' analyzers published for that run are among `histograms`, in the same order
    /// (worst first), each with its `source`; `analyzers` lists them.
    pub fn dqm(&self) -> Value {
        let (dqm, published, current, last) = {
            let inner = self.shared.lock();
            let current = inner.run.as_ref().map(|r| r.number);
            let shown = current.or(inner.last_run_number);
            let published = (inner.published_dqm.run())
                .filter(|&run| Some(run) == shown)
                .map(|_| inner.published_dqm.clone());
            (inner.dqm.clone(), published, current, inner.last_run_number)
        };
        let extra = published
            .as_ref()
            .map_or_else(Vec::new, PublishedDqm::listed);
        let mut answer = match dqm {
            Some((number, view)) => {
                let mut answer = view.to_json(extra);
                answer["run_number"] = json!(number);
                answer["running"] = json!(current == Some(number));
                answer
            }
            None => {
                let why = match current.or(last) {
                    Some(n) => format!(
                        "run {n} has no online data-quality monitoring: [dqm] enabled = true in the configuration turns it on"
                    ),
                    None => "no run yet".to_string(),
                };
                let mut answer = json!({
                    "enabled": false,
                    "run_number": current.or(last),
                    "running": current.is_some(),
                    "why": why,
                });
                put_worst_first(&mut answer, Vec::new(), None, extra);
                answer
            }
        };
        if let Some(published) = published {
            answer["analyzers"] = published.analyzers_json();
        }
        answer
    }

    /// Keeps an analyzer's histograms for the run going on, else the last run, judged as
    /// that run's built-in histograms are (its `[dqm]` checks, or the defaults).
    pub fn publish_dqm(&self, publication: Publication, who: &str) -> Result<Value, ControlError> {
        let mut inner = self.shared.lock();
        let run = (inner.run.as_ref().map(|r| r.number))
            .or(inner.last_run_number)
            .ok_or_else(|| ControlError::BadRequest("no run yet: nothing to publish for".into()))?;
        let checks = match &inner.dqm {
            Some((number, view)) if *number == run => view.checks().clone(),
            _ => swdaq_dqm::Checks::default(),
        };
        let analyzer = publication.analyzer.clone();
        let first = !inner.published_dqm.has(run, &analyzer);
        let answer = (inner.published_dqm.publish(publication, run, &checks))
            .map_err(ControlError::BadRequest)?;
        // Once per analyzer and run: it publishes every few seconds, and its Bad histograms
        // reach the journal as alerts when they change.
        if first {
            log_note(who, &format!("analyzer {analyzer} publishes for run {run}"));
        }
        Ok(answer)
    }

    /// The history of the live series after unix time `since` (`/history`).
    pub fn history(&self, since: Option<f64>) -> Value {
        self.shared.lock().watch.history.to_json(since)
    }

    /// Run control's own Prometheus metrics (`control::metrics`), with the requests
    /// `refused` so far by status code.
    pub fn metrics(&self, refused: &std::collections::BTreeMap<u16, u64>) -> String {
        let (state, last_run_number, dirs, transfer) = {
            let mut inner = self.shared.lock();
            let transfer = inner
                .transfer
                .as_mut()
                .map(|t| t.metrics.collect().families);
            (
                inner.state,
                inner.last_run_number,
                inner.output_dirs(),
                transfer,
            )
        };
        super::metrics::render(&super::metrics::Observed {
            state,
            last_run_number,
            disks: &super::alerts::disks(&dirs),
            refused,
            transfer: transfer.unwrap_or_default(),
        })
    }

    /// Notes a command refused, for the console's journal.
    pub fn note_refused(&self, who: &str, what: &str, why: &str) {
        self.shared.lock().watch.refused(who, what, why);
    }

    /// The configuration and the run whose stored data the console shows: the run going
    /// on, else the last one.
    pub fn latest_run(&self) -> Option<(Box<dyn Configured>, u32)> {
        let inner = self.shared.lock();
        let config = inner.config.as_ref()?.clone();
        let run = inner
            .run
            .as_ref()
            .map(|r| r.number)
            .or(inner.last_run_number)?;
        Some((config, run))
    }

    /// Stops the run going on, if any, and waits until it has (the server is closing).
    pub fn shut_down(&self, who: &str) {
        if self.state().has_run() {
            let _ = self.stop(who);
        }
    }
}

/// Refuses run `wanted` if it is more than [`MAX_RUN_JUMP`] beyond the last run started here
/// or found in `dirs`.
fn check_jump(
    dirs: &[&std::path::Path],
    wanted: u32,
    last_started: Option<u32>,
) -> Result<(), ControlError> {
    let mut last = last_started.unwrap_or(0);
    for dir in dirs {
        let found = RunsOnDisk::scan(dir, None).map_err(|e| {
            ControlError::Failed(format!("cannot look for runs in {}: {e}", dir.display()))
        })?;
        last = last.max(found.highest.unwrap_or(0));
    }
    if wanted.saturating_sub(last) > MAX_RUN_JUMP {
        return Err(ControlError::Conflict(format!(
            "run {wanted} is {} beyond the last run ({last}), more than {MAX_RUN_JUMP}: every number up to it would be skipped for good; ask again with \"confirm_jump\": true (swdaq ctl start --run {wanted} --confirm-jump) if that is meant",
            wanted - last
        )));
    }
    Ok(())
}

/// An error with its causes on one line, for a JSON answer.
pub(super) fn one_line(e: &anyhow::Error) -> String {
    error_report::cause_lines(e).join(": ")
}

#[cfg(test)]
#[path = "system_tests.rs"]
mod tests;
