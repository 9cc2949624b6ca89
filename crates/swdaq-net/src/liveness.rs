//! Peer liveness: every outlet carries a heartbeat while the application runs, and a peer
//! not heard from (heartbeat or anything else) for the configured time is declared gone,
//! once, so that what it owed is timed out and counted rather than waited for.

use crate::socket::Outlet;
use crate::wire::{AppId, WireMessage};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sends a heartbeat on each outlet every `every` from its own thread.
pub struct Heartbeat {
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    pub fn start<M: WireMessage>(
        outlets: Vec<Outlet<M>>,
        every: Duration,
    ) -> std::io::Result<Self> {
        // The heartbeat is the framework's message, whatever model the outlets carry.
        let outlets: Vec<_> = outlets.iter().map(Outlet::untyped).collect();
        let running = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&running);
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || {
                while flag.load(Ordering::Relaxed) {
                    for o in &outlets {
                        o.heartbeat();
                    }
                    let until = Instant::now() + every;
                    while flag.load(Ordering::Relaxed) && Instant::now() < until {
                        std::thread::sleep(every.min(Duration::from_millis(20)));
                    }
                }
            })?;
        Ok(Self {
            running,
            thread: Some(thread),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Which of a set of peers have gone silent.
pub struct Liveness {
    timeout: Duration,
    since: Instant,
    watched: BTreeSet<AppId>,
    gone: BTreeSet<AppId>,
}

impl Liveness {
    /// Watches `peers` from now on: a peer never heard from counts from now.
    pub fn new(peers: impl IntoIterator<Item = AppId>, timeout: Duration) -> Self {
        Self {
            timeout,
            since: Instant::now(),
            watched: peers.into_iter().collect(),
            gone: BTreeSet::new(),
        }
    }

    /// Peers newly found silent for longer than the time-out, given when each was last
    /// heard from; each is reported once.
    pub fn newly_gone(
        &mut self,
        last_seen: impl Fn(AppId) -> Option<Instant>,
        now: Instant,
    ) -> Vec<AppId> {
        let mut out = Vec::new();
        for &peer in &self.watched {
            let heard = last_seen(peer).unwrap_or(self.since).max(self.since);
            if now.duration_since(heard) > self.timeout && self.gone.insert(peer) {
                out.push(peer);
            }
        }
        out
    }

    pub fn is_gone(&self, peer: AppId) -> bool {
        self.gone.contains(&peer)
    }

    pub fn gone(&self) -> &BTreeSet<AppId> {
        &self.gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_is_declared_gone_once_and_a_talking_one_never() {
        let t0 = Instant::now();
        let mut l = Liveness::new([1, 2], Duration::from_millis(100));
        let heard = |p: AppId| (p == 1).then(|| t0 + Duration::from_millis(450));
        assert!(
            l.newly_gone(heard, t0 + Duration::from_millis(50))
                .is_empty()
        );
        assert_eq!(l.newly_gone(heard, t0 + Duration::from_millis(500)), [2]);
        assert!(
            l.newly_gone(heard, t0 + Duration::from_millis(520))
                .is_empty()
        );
        assert_eq!(l.newly_gone(heard, t0 + Duration::from_millis(600)), [1]);
        assert!(l.is_gone(1) && l.is_gone(2));
    }
}
