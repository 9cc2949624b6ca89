//! Run control's pause of the event builder's trigger, as CMS's run control holds the L1A:
//! while paused no event from the pause point on is due, and on resume the trigger clock goes
//! on from where it stood (every later event is due later by the time spent paused), so no
//! burst of events catches up and nothing waits long enough to expire.
//!
//! The pause point is an event number, fixed by the event manager (the unit that sees the
//! trigger) as its next event, so every readout unit holds the same events whatever the
//! moment the request reached it: in one process they share one `TriggerPause`; across
//! applications the event manager's point is passed to each readout unit
//! ([`TriggerPause::pause_from`]). A readout unit that read past the point before it heard of
//! it keeps those super-fragments (`ru` does not expire them while paused).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A run's trigger clock: its time zero, shared by every readout unit of a process, and its
/// pauses. Cloned, it is the same clock.
#[derive(Debug, Clone)]
pub struct TriggerClock {
    start: Instant,
    pause: Arc<TriggerPause>,
}

impl TriggerClock {
    /// A clock whose time zero is `start`, not paused.
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            pause: Arc::default(),
        }
    }

    pub fn pause(&self) -> &TriggerPause {
        &self.pause
    }

    /// The wall time an event with trigger time `trigger_ns` is due, after the pauses so far.
    pub fn due(&self, trigger_ns: u64) -> Instant {
        self.start + self.pause.shift() + Duration::from_nanos(trigger_ns)
    }

    /// Nanoseconds since time zero on the wall clock (when streamed data was read).
    pub fn elapsed_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// "Not paused" in `held_from`.
const NOT_HELD: u64 = u64::MAX;

/// One run's pause state, shared by the units that follow its trigger clock.
#[derive(Debug)]
pub struct TriggerPause {
    /// Asked to pause; the event manager has not fixed the point yet.
    requested: AtomicBool,
    /// Events numbered from this on are not due ([`NOT_HELD`]: none).
    held_from: AtomicU64,
    /// Nanoseconds of the pauses that have ended: every later event is due later by this.
    shift_ns: AtomicU64,
    /// When the current pause began (written only by `pause_from` and `resume`).
    began: Mutex<Option<Instant>>,
}

impl Default for TriggerPause {
    fn default() -> Self {
        Self {
            requested: AtomicBool::new(false),
            held_from: AtomicU64::new(NOT_HELD),
            shift_ns: AtomicU64::new(0),
            began: Mutex::new(None),
        }
    }
}

impl TriggerPause {
    /// Asks the event manager to pause at its next event (`fix_point`).
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
    }

    /// For the event manager, before it gives out `next`: if a pause was asked for, it begins
    /// at `next`.
    pub fn fix_point(&self, next: u64) {
        if self.requested.swap(false, Ordering::AcqRel) {
            self.pause_from(next);
        }
    }

    /// The first event held, while paused: the point the other readout units must be told.
    pub fn point(&self) -> Option<u64> {
        Some(self.held_from.load(Ordering::Acquire)).filter(|&e| e != NOT_HELD)
    }

    /// Holds every event from `event` on (a second pause keeps the earlier point).
    pub fn pause_from(&self, event: u64) {
        let mut began = self.began.lock().unwrap_or_else(|e| e.into_inner());
        began.get_or_insert_with(Instant::now);
        self.held_from.fetch_min(event, Ordering::AcqRel);
    }

    /// Ends the pause (a request not yet fixed is dropped): the time it lasted shifts every
    /// later event. The shift is stored before the events are released, so a unit that
    /// sees them released sees them due later.
    pub fn resume(&self) {
        self.requested.store(false, Ordering::Release);
        let mut began = self.began.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = began.take() {
            let lasted = since.elapsed().as_nanos() as u64;
            self.shift_ns.fetch_add(lasted, Ordering::AcqRel);
        }
        self.held_from.store(NOT_HELD, Ordering::Release);
    }

    /// True while `event` may not be given out or read.
    pub fn holds(&self, event: u64) -> bool {
        event >= self.held_from.load(Ordering::Acquire)
    }

    /// How much later than its trigger time an event released now is due.
    pub fn shift(&self) -> Duration {
        Duration::from_nanos(self.shift_ns.load(Ordering::Acquire))
    }

    /// Time spent paused so far, the current pause included.
    pub fn paused_for(&self) -> Duration {
        let began = self.began.lock().unwrap_or_else(|e| e.into_inner());
        self.shift() + began.map_or(Duration::ZERO, |b| b.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_event_manager_fixes_the_point_once_and_resume_shifts_the_clock() {
        let pause = TriggerPause::default();
        pause.fix_point(5);
        assert_eq!(pause.point(), None, "nothing asked");
        pause.request();
        assert!(!pause.holds(5), "not held before the point is fixed");
        pause.fix_point(7);
        pause.fix_point(9);
        assert_eq!(pause.point(), Some(7), "fixed once");
        assert!(!pause.holds(6) && pause.holds(7) && pause.holds(1000));
        std::thread::sleep(Duration::from_millis(20));
        pause.resume();
        assert!(pause.point().is_none() && !pause.holds(7));
        assert!(pause.shift() >= Duration::from_millis(20));
        assert_eq!(pause.paused_for(), pause.shift());
    }

    #[test]
    fn a_readout_unit_told_a_later_point_keeps_the_earlier_one() {
        let pause = TriggerPause::default();
        pause.pause_from(10);
        pause.pause_from(12);
        assert!(pause.holds(10));
        pause.resume();
        pause.resume();
        assert!(!pause.holds(10));
    }

    #[test]
    fn a_resume_before_the_point_is_fixed_cancels_the_request() {
        let pause = TriggerPause::default();
        pause.request();
        pause.resume();
        pause.fix_point(3);
        assert_eq!(pause.point(), None);
        assert_eq!(pause.shift(), Duration::ZERO);
    }

    #[test]
    fn a_clock_s_events_are_due_later_by_the_pauses() {
        let clock = TriggerClock::new(Instant::now());
        let before = clock.due(1_000);
        clock.pause().pause_from(1);
        std::thread::sleep(Duration::from_millis(5));
        clock.clone().pause().resume();
        assert!(
            clock.due(1_000) >= before + Duration::from_millis(5),
            "a clone is the same clock"
        );
    }

    proptest! {
        /// Any sequence of pauses and resumes only ever adds to the shift (due times never
        /// move earlier), and an event is held exactly while a pause at or before it lasts.
        #[test]
        fn the_shift_never_shrinks_and_holding_follows_the_point(
            steps in proptest::collection::vec((any::<bool>(), 1u64..50), 1..40)
        ) {
            let pause = TriggerPause::default();
            let mut point: Option<u64> = None;
            let mut shift = Duration::ZERO;
            for (pausing, event) in steps {
                if pausing {
                    pause.pause_from(event);
                    point = Some(point.map_or(event, |p| p.min(event)));
                } else {
                    pause.resume();
                    point = None;
                }
                prop_assert!(pause.shift() >= shift);
                shift = pause.shift();
                for e in 0..60 {
                    prop_assert_eq!(pause.holds(e), point.is_some_and(|p| e >= p));
                }
            }
        }
    }
}
