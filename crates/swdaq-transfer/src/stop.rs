//! A stop any wait of the transfer honours: waits are on a condition variable, woken at once
//! when a stop is asked for, and bounded by their own time-out either way.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
pub struct Stop(Arc<(Mutex<bool>, Condvar)>);

impl Stop {
    pub fn request(&self) {
        let (flag, woken) = &*self.0;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        woken.notify_all();
    }

    pub fn requested(&self) -> bool {
        *self.0.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits `timeout` or until a stop is asked for; whether one was.
    pub fn wait(&self, timeout: Duration) -> bool {
        let (flag, woken) = &*self.0;
        let guard = flag.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = woken
            .wait_timeout_while(guard, timeout, |stopped| !*stopped)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }
}
