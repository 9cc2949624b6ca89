//! The run-control state machine of the whole system, as one table: a transition is legal
//! only if it is listed. Operators' commands and the run's own events (it came up, it
//! ended, it failed) go through the same table.
//!
//! ```text
//! initial ─configure─► configured ─start─► starting ─started─► running ◄─resume/pause─► paused
//!    ▲                     ▲  ▲                  │ stop            │ stop                │ stop
//!    │                     │  └──── ended ─── stopping ◄───────────┴─────────────────────┘
//!    │                     └─configure── error ◄─failed─ (starting, running, paused, stopping)
//!    └── configure-failed ── (initial, configured, error)
//! ```
//!
//! A configure that fails (the file unreadable or invalid) leaves the system unconfigured:
//! the configuration loaded before is dropped, so no run starts from a configuration the
//! operator has since changed.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// No configuration loaded: none yet, or the last configure failed.
    Initial,
    /// Configured and idle between runs.
    Configured,
    /// A run is coming up.
    Starting,
    /// Taking data, triggers on.
    Running,
    /// Taking data (readout on), triggers issue no decisions.
    Paused,
    /// The run is stopping; its summary comes when it has.
    Stopping,
    /// The last run failed; configure again to go on.
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    // Operators' commands.
    Configure,
    /// A configure whose configuration could not be loaded.
    ConfigureFailed,
    Start,
    Pause,
    Resume,
    Stop,
    /// A prescale or rate: no change of state.
    ChangeTrigger,
    /// A raw burst of every link's buffer: no change of state.
    Record,
    // The run's own events.
    Started,
    Ended,
    Failed,
    /// The run's `pre_start` hook refused it: no data was taken.
    StartRefused,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Initial,
        State::Configured,
        State::Starting,
        State::Running,
        State::Paused,
        State::Stopping,
        State::Error,
    ];

    pub fn name(self) -> &'static str {
        match self {
            State::Initial => "initial",
            State::Configured => "configured",
            State::Starting => "starting",
            State::Running => "running",
            State::Paused => "paused",
            State::Stopping => "stopping",
            State::Error => "error",
        }
    }

    /// A run exists (its threads are up or coming up or going down).
    pub fn has_run(self) -> bool {
        matches!(
            self,
            State::Starting | State::Running | State::Paused | State::Stopping
        )
    }
}

impl Event {
    pub const ALL: [Event; 12] = [
        Event::Configure,
        Event::ConfigureFailed,
        Event::Start,
        Event::Pause,
        Event::Resume,
        Event::Stop,
        Event::ChangeTrigger,
        Event::Record,
        Event::Started,
        Event::Ended,
        Event::Failed,
        Event::StartRefused,
    ];
}

use Event as E;
use State as S;

/// Every legal transition: (from, event, to).
pub const TRANSITIONS: &[(State, Event, State)] = &[
    (S::Initial, E::Configure, S::Configured),
    (S::Configured, E::Configure, S::Configured),
    (S::Error, E::Configure, S::Configured),
    (S::Initial, E::ConfigureFailed, S::Initial),
    (S::Configured, E::ConfigureFailed, S::Initial),
    (S::Error, E::ConfigureFailed, S::Initial),
    (S::Configured, E::Start, S::Starting),
    (S::Starting, E::Started, S::Running),
    (S::Running, E::Pause, S::Paused),
    (S::Paused, E::Resume, S::Running),
    // A stop during start: the run stops as soon as it is up.
    (S::Starting, E::Stop, S::Stopping),
    (S::Running, E::Stop, S::Stopping),
    (S::Paused, E::Stop, S::Stopping),
    // The run came up after a stop was asked for: it is already stopping.
    (S::Stopping, E::Started, S::Stopping),
    (S::Configured, E::ChangeTrigger, S::Configured),
    (S::Running, E::ChangeTrigger, S::Running),
    (S::Paused, E::ChangeTrigger, S::Paused),
    // Readout goes on while triggers are paused: a burst can be recorded.
    (S::Running, E::Record, S::Running),
    (S::Paused, E::Record, S::Paused),
    // A run ends by a stop, or by itself (its duration, every link ended, storage failed).
    (S::Starting, E::Ended, S::Configured),
    (S::Running, E::Ended, S::Configured),
    (S::Paused, E::Ended, S::Configured),
    (S::Stopping, E::Ended, S::Configured),
    (S::Starting, E::Failed, S::Error),
    (S::Running, E::Failed, S::Error),
    (S::Paused, E::Failed, S::Error),
    (S::Stopping, E::Failed, S::Error),
    // A refused start took no data and changed nothing: configured as before (a stop asked
    // for while the hook ran finds nothing to stop).
    (S::Starting, E::StartRefused, S::Configured),
    (S::Stopping, E::StartRefused, S::Configured),
];

/// `event` is not allowed in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {event:?} in state {}", state.name())]
pub struct Illegal {
    pub state: State,
    pub event: Event,
}

/// The state `event` leads to from `state`, if the table lists it.
pub fn next(state: State, event: Event) -> Result<State, Illegal> {
    TRANSITIONS
        .iter()
        .find(|(from, on, _)| *from == state && *on == event)
        .map(|&(_, _, to)| to)
        .ok_or(Illegal { state, event })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn the_table_has_one_target_per_state_and_event() {
        let mut seen = HashSet::new();
        for &(from, on, _) in TRANSITIONS {
            assert!(seen.insert((from, on)), "{from:?} {on:?} listed twice");
        }
    }

    #[test]
    fn every_state_is_reachable_from_initial() {
        let mut reached = HashSet::from([State::Initial]);
        loop {
            let more: Vec<State> = TRANSITIONS
                .iter()
                .filter(|(from, ..)| reached.contains(from))
                .map(|&(.., to)| to)
                .filter(|to| !reached.contains(to))
                .collect();
            if more.is_empty() {
                break;
            }
            reached.extend(more);
        }
        assert_eq!(reached.len(), State::ALL.len());
    }

    #[test]
    fn the_operator_cycle_runs_and_wrong_commands_are_refused() {
        let mut s = State::Initial;
        for e in [
            Event::Configure,
            Event::Start,
            Event::Started,
            Event::Pause,
            Event::Resume,
            Event::Stop,
            Event::Ended,
            Event::Start,
        ] {
            s = next(s, e).unwrap();
        }
        assert_eq!(s, State::Starting);
        assert_eq!(
            next(State::Initial, Event::Start),
            Err(Illegal {
                state: State::Initial,
                event: Event::Start
            })
        );
        assert!(next(State::Running, Event::Resume).is_err());
        assert!(next(State::Paused, Event::Pause).is_err());
        assert!(next(State::Running, Event::Configure).is_err());
        assert!(next(State::Configured, Event::Stop).is_err());
    }

    fn any_state() -> impl Strategy<Value = State> {
        proptest::sample::select(State::ALL.to_vec())
    }

    fn any_event() -> impl Strategy<Value = Event> {
        proptest::sample::select(Event::ALL.to_vec())
    }

    proptest! {
        /// Exactly the listed transitions are accepted, to the listed state.
        #[test]
        fn only_listed_transitions_are_accepted(state in any_state(), event in any_event()) {
            let listed = TRANSITIONS
                .iter()
                .find(|(f, e, _)| *f == state && *e == event)
                .map(|t| t.2);
            prop_assert_eq!(next(state, event).ok(), listed);
        }

        /// Along any sequence of events, a run is never started twice, data is never taken
        /// without a start, and a configuration never changes under a run.
        #[test]
        fn any_event_sequence_keeps_the_run_invariants(
            events in proptest::collection::vec(any_event(), 0..64),
        ) {
            let mut state = State::Initial;
            for event in events {
                match next(state, event) {
                    Ok(to) => {
                        if event == Event::Start {
                            prop_assert!(!state.has_run());
                        }
                        if matches!(event, Event::Configure | Event::ConfigureFailed) {
                            prop_assert!(!state.has_run());
                        }
                        if matches!(to, State::Running | State::Paused) {
                            prop_assert!(state.has_run());
                        }
                        state = to;
                    }
                    Err(e) => prop_assert_eq!(e.state, state),
                }
            }
        }
    }
}
