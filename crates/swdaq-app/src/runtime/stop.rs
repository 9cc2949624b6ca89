//! How a run is stopped from outside: Ctrl-C, SIGTERM and SIGHUP all ask for the same clean
//! stop (summary, files closed and renamed). While the stop goes on, a second signal says
//! which stage it is waiting for; a third ends the process at once (in a multi-process run
//! the applications, their input closed, still stop cleanly by themselves).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Shared between the signal handler and the run.
#[derive(Default)]
pub struct StopRequest {
    requested: AtomicBool,
    signals: AtomicU32,
    /// What the stop is waiting for now, in words.
    waiting_for: Mutex<String>,
}

/// What a signal should lead to, by how many came.
#[derive(Debug, PartialEq, Eq)]
pub enum OnSignal {
    /// Stop cleanly.
    Stop,
    /// Say what the stop waits for.
    Explain(String),
    /// End the process now.
    Exit,
}

impl StopRequest {
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }

    /// Asks for the stop without a signal (tests, a failed stage).
    pub fn request(&self) {
        self.requested.store(true, Ordering::Relaxed);
    }

    /// Signals received so far.
    pub fn signals(&self) -> u32 {
        self.signals.load(Ordering::Relaxed)
    }

    /// Records what the stop is waiting for (shown on a second signal).
    pub fn waiting_for(&self, what: impl Into<String>) {
        *self.waiting_for.lock().unwrap_or_else(|e| e.into_inner()) = what.into();
    }

    /// Counts a signal and says what to do about it.
    pub fn on_signal(&self) -> OnSignal {
        self.request();
        match self.signals.fetch_add(1, Ordering::Relaxed) + 1 {
            1 => OnSignal::Stop,
            2 => OnSignal::Explain(
                self.waiting_for
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            ),
            _ => OnSignal::Exit,
        }
    }
}

/// Installs the handler of Ctrl-C, SIGTERM and SIGHUP for `stop`.
pub fn install(stop: std::sync::Arc<StopRequest>) -> anyhow::Result<()> {
    ctrlc::set_handler(move || match stop.on_signal() {
        OnSignal::Stop => eprintln!(
            "swdaq run: stopping cleanly (signal again to see what the stop waits for; a third time ends at once)"
        ),
        OnSignal::Explain(what) => eprintln!(
            "swdaq run: still stopping, waiting for {}",
            if what.is_empty() { "data taking to end" } else { &what }
        ),
        OnSignal::Exit => {
            eprintln!("swdaq run: third signal: ending at once");
            std::process::exit(130);
        }
    })
    .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_stops_the_second_explains_the_third_exits() {
        let s = StopRequest::default();
        assert!(!s.is_requested());
        assert_eq!(s.on_signal(), OnSignal::Stop);
        assert!(s.is_requested());
        s.waiting_for("the record builder to finish 3 records");
        assert_eq!(
            s.on_signal(),
            OnSignal::Explain("the record builder to finish 3 records".into())
        );
        assert_eq!(s.on_signal(), OnSignal::Exit);
    }
}
