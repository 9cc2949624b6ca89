//! The one supervision loop of every run, in one process or as applications: it decides when
//! data taking ends (a stop request, the duration, or the run's own end: its input ended, its
//! storage failed, an essential application died), tells the hooks the live figures every
//! live interval — also while a model drains what it holds — and that the stop has begun.
//! Each model in one process, and the launcher for applications, says only what it has
//! (`Supervised`); where the checks and the clocks are is the same for all.

use crate::live::{LIVE_INTERVAL, Live};
use crate::runtime::model::RunHooks;
use crate::runtime::outcome::StopReason;
use crate::runtime::stop::StopRequest;
use std::time::{Duration, Instant};

/// How often the loop looks (at most: a `wait` may return sooner): a stop is seen within
/// this, a duration ends within it.
const TICK: Duration = Duration::from_millis(20);

/// What a model running in one process shows its supervisor.
pub trait Supervised {
    /// Its own reason to end now, if it has one (its input ended, its storage failed):
    /// asked every tick until the run is stopping.
    fn ended(&mut self) -> Option<StopReason>;
    /// Its live figures, `elapsed` into the run.
    fn live(&self, elapsed: Duration) -> Live;
    /// Starts the stop: data taking ends, what is held may still drain (`say` tells the
    /// operator what the stop waits for).
    fn begin_stop(&mut self, stop: &StopRequest);
    /// Whether it has drained (the loop returns then); a model that stops in stages after
    /// the loop says so at once.
    fn drained(&mut self) -> bool;
    /// Waits up to `tick` between two looks, stopping or not (the launcher takes its
    /// applications' events meanwhile; a model may keep a sample before its threads end).
    fn wait(&mut self, tick: Duration) {
        std::thread::sleep(tick);
    }
}

/// Runs the loop until `run` has ended and drained; `duration` `None` runs until stopped.
/// Checks, in this order: a stop request, the duration, the run's own end. Returns why
/// data taking ended; the storage's own error, which only the run's report has, is added
/// after ([`StopReason::with_storage_error`], [`StopReason::unless_storage_failed`]).
pub fn supervise(
    run: &mut dyn Supervised,
    duration: Option<Duration>,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> StopReason {
    let started = Instant::now();
    let mut next_live = started + LIVE_INTERVAL;
    let mut reason = None;
    loop {
        if reason.is_none() {
            reason = if stop.is_requested() {
                Some(StopReason::Interrupted)
            } else if duration.is_some_and(|d| started.elapsed() >= d) {
                Some(StopReason::Duration)
            } else {
                run.ended()
            };
            if let Some(reason) = &reason {
                hooks.stopping(reason);
                run.begin_stop(stop);
            }
        }
        if let Some(reason) = &reason
            && run.drained()
        {
            return reason.clone();
        }
        let now = Instant::now();
        if now >= next_live {
            while next_live <= now {
                next_live += LIVE_INTERVAL;
            }
            hooks.live(&run.live(now - started));
        }
        run.wait(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::steering::Steering;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl RunHooks for Heard {
        fn started(&self, _: Steering) {}
        fn live(&self, _: &Live) {
            self.0.lock().unwrap().push("live".into());
        }
        fn stopping(&self, _: &StopReason) {
            self.0.lock().unwrap().push("stopping".into());
        }
    }

    /// Ends by itself after `end_after` ticks, drains for `drain` more.
    struct Model {
        ticks: u32,
        end_after: u32,
        drain: u32,
        stopped_at: Option<u32>,
    }

    impl Supervised for Model {
        fn ended(&mut self) -> Option<StopReason> {
            (self.ticks >= self.end_after).then_some(StopReason::InputEnded)
        }
        fn live(&self, elapsed: Duration) -> Live {
            Live {
                model: "test",
                elapsed_s: elapsed.as_secs_f64(),
                figures: Vec::new(),
                series: Default::default(),
                sources: Vec::new(),
                apps: Vec::new(),
            }
        }
        fn begin_stop(&mut self, _: &StopRequest) {
            self.stopped_at = Some(self.ticks);
        }
        fn drained(&mut self) -> bool {
            self.stopped_at
                .is_some_and(|at| self.ticks >= at + self.drain)
        }
        fn wait(&mut self, tick: Duration) {
            self.ticks += 1;
            std::thread::sleep(tick);
        }
    }

    fn model(end_after: u32, drain: u32) -> Model {
        Model {
            ticks: 0,
            end_after,
            drain,
            stopped_at: None,
        }
    }

    #[test]
    fn a_stop_request_comes_before_the_duration_and_the_model_s_end() {
        let stop = StopRequest::default();
        stop.request();
        let hooks = Heard::default();
        let reason = supervise(&mut model(0, 0), Some(Duration::ZERO), &stop, &hooks);
        assert_eq!(reason, StopReason::Interrupted);
        assert_eq!(*hooks.0.lock().unwrap(), ["stopping"]);
    }

    #[test]
    fn the_duration_comes_before_the_model_s_end() {
        let reason = supervise(
            &mut model(0, 0),
            Some(Duration::ZERO),
            &StopRequest::default(),
            &Heard::default(),
        );
        assert_eq!(reason, StopReason::Duration);
    }

    /// The model ends by itself, then drains for longer than a live interval: the live
    /// figures go on meanwhile, and the stop is said once.
    #[test]
    fn live_figures_go_on_while_the_model_drains() {
        let hooks = Heard::default();
        let drain_ticks = (2 * LIVE_INTERVAL.as_millis() / TICK.as_millis()) as u32;
        let mut run = model(1, drain_ticks);
        let reason = supervise(&mut run, None, &StopRequest::default(), &hooks);
        assert_eq!(reason, StopReason::InputEnded);
        let heard = hooks.0.lock().unwrap();
        assert_eq!(heard.iter().filter(|h| *h == "stopping").count(), 1);
        assert_eq!(heard[0], "stopping");
        assert!(
            heard.iter().filter(|h| *h == "live").count() >= 1,
            "{heard:?}"
        );
    }
}
