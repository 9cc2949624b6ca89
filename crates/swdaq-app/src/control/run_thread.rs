//! The thread of one run under run control: it runs the `pre_start` hook (whose failure
//! refuses the run), then the configured model between its other hooks, tells run control
//! through the model's hooks when data taking began and what the live figures are, and
//! records how the run ended.

use super::fsm::Event;
use super::system::{ENDED_KEPT, Inner, Run, Shared, log_note, one_line};
use crate::run_record::RecordedRun;
use crate::runtime::dqm::DqmView;
use crate::runtime::model::{Configured, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::steering::Steering;
use crate::runtime::stop::StopRequest;
use crate::transition_hooks::{Hook, HookRun, RunFacts, run_between_hooks};
use std::sync::Arc;

/// Tells run control how the run it started is going.
struct Hooks {
    shared: Arc<Shared>,
    number: u32,
}

impl Hooks {
    /// The run these hooks were made for, while it is still the one run control holds.
    fn this_run<'a>(&self, inner: &'a mut Inner) -> Option<&'a mut Run> {
        inner.run.as_mut().filter(|r| r.number == self.number)
    }
}

impl RunHooks for Hooks {
    fn started(&self, steer: Steering) {
        let mut inner = self.shared.lock();
        if let Some(run) = self.this_run(&mut inner) {
            run.steer = steer;
            let _ = inner.apply(Event::Started, &format!("run {}", self.number), "");
        }
        self.shared.changed.notify_all();
    }

    fn live(&self, live: &crate::live::Live) {
        let Ok(live) = serde_json::to_value(live) else {
            return;
        };
        let mut inner = self.shared.lock();
        if let Some(run) = self.this_run(&mut inner) {
            run.live = Some(live.clone());
            inner.watch.live(self.number, &live);
            let mut bad = (inner.dqm.as_ref())
                .filter(|(number, _)| *number == self.number)
                .map(|(_, view)| view.bad())
                .unwrap_or_default();
            if inner.published_dqm.run() == Some(self.number) {
                bad.extend(inner.published_dqm.bad());
            }
            inner.watch.data_quality(&bad);
        }
    }

    fn dqm(&self, view: DqmView) {
        let mut inner = self.shared.lock();
        if self.this_run(&mut inner).is_some() {
            inner.dqm = Some((self.number, view));
        }
    }

    fn stopping(&self, _: &StopReason) {
        if let Some(run) = self.this_run(&mut self.shared.lock()) {
            run.steer = Steering::default();
        }
    }
}

/// Runs one run of the configured model and reports how it ended to run control.
pub(super) fn run_thread(
    shared: Arc<Shared>,
    config: Box<dyn Configured>,
    stop: Arc<StopRequest>,
    recorded: RecordedRun,
    configure_hooks: Vec<HookRun>,
) {
    let number = config.run_number();
    let run_control = Hooks {
        shared: Arc::clone(&shared),
        number,
    };
    let mut ran = configure_hooks;
    let hooks = &config.run_section().hooks;
    let refused = hooks
        .run_refusing(Hook::PreStart, &RunFacts::of(&*config, true), &mut ran)
        .err();
    let start_refused = refused.is_some();
    let result = match refused {
        Some(refusal) => Err(refusal),
        None => run_between_hooks(&*config, &stop, &run_control, &mut ran),
    };
    let who = format!("run {number}");
    // Completed before anyone waiting for the stop hears of it. The reason on record is one
    // line (a refusing hook's output is in its own record).
    let unrecorded = recorded
        .finish(
            result
                .as_deref()
                .map_err(|e| one_line(e).lines().next().unwrap_or_default().to_owned()),
            &ran,
        )
        .err()
        .map(|e| format!("run {number} is not completed in the run registry: {e:#}"));
    let mut inner = shared.lock();
    if let Some(note) = unrecorded {
        log_note(&who, &note);
        inner.registry_notes.push(note);
    }
    // Why the system is in error: a run that failed, not one its hook refused.
    let mut fault = None;
    let outcome = match result {
        Ok(outcome) => {
            let summary = outcome.json();
            inner.last_summary_text = Some(outcome.text());
            let reason = format!(" ({:?})", outcome.stop_reason());
            let _ = inner.apply(Event::Ended, &who, &reason);
            Ok(summary)
        }
        // Refused by its hook, the run took no data and the system is configured as before.
        Err(e) if start_refused => {
            let message = one_line(&e);
            let _ = inner.apply(Event::StartRefused, &who, &format!(": {message}"));
            Err(message)
        }
        Err(e) => {
            let message = one_line(&e);
            let _ = inner.apply(Event::Failed, &who, &format!(": {message}"));
            inner.last_error = Some(message.clone());
            fault = Some(message.clone());
            Err(message)
        }
    };
    inner.watch.run_over(fault.as_deref());
    if inner.ended.len() == ENDED_KEPT {
        inner.ended.pop_front();
    }
    inner.ended.push_back((number, outcome));
    inner.run = None;
    shared.changed.notify_all();
}
