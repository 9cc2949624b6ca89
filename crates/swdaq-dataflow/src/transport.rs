//! The transport interface between dataflow nodes. Nodes send and receive through these
//! traits only, so carrying a link over another medium (ZeroMQ between processes or hosts)
//! means implementing them for that medium; messages are plain data (`serde` types or bytes).
//! The in-process implementation is a crossbeam channel.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the peer has gone")]
pub struct Disconnected;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<T> {
    Message(T),
    /// Nothing within the wait.
    Nothing,
    /// Every sender has gone and nothing is left.
    Closed,
}

pub trait Outbox<T>: Send {
    /// Sends, waiting while the peer's queue is full.
    fn send(&self, message: T) -> Result<(), Disconnected>;
}

pub trait Inbox<T>: Send {
    fn receive(&self, wait: Duration) -> Received<T>;
}

impl<T: Send> Outbox<T> for crossbeam_channel::Sender<T> {
    fn send(&self, message: T) -> Result<(), Disconnected> {
        crossbeam_channel::Sender::send(self, message).map_err(|_| Disconnected)
    }
}

impl<T: Send> Inbox<T> for crossbeam_channel::Receiver<T> {
    fn receive(&self, wait: Duration) -> Received<T> {
        // `recv_timeout` spins and yields the CPU several times before it gives up, even
        // with no time to wait: polling through it cost the event builder a quarter of its
        // CPU in `sched_yield` (perf, `swdaq bench evb`).
        if wait.is_zero() {
            return match self.try_recv() {
                Ok(m) => Received::Message(m),
                Err(crossbeam_channel::TryRecvError::Empty) => Received::Nothing,
                Err(crossbeam_channel::TryRecvError::Disconnected) => Received::Closed,
            };
        }
        match self.recv_timeout(wait) {
            Ok(m) => Received::Message(m),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Received::Nothing,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Received::Closed,
        }
    }
}

/// An in-process link with room for `capacity` messages.
pub fn local<T>(capacity: usize) -> (crossbeam_channel::Sender<T>, crossbeam_channel::Receiver<T>) {
    crossbeam_channel::bounded(capacity.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiving_without_waiting_tells_empty_from_closed() {
        let (tx, rx) = local::<u32>(4);
        assert!(matches!(rx.receive(Duration::ZERO), Received::Nothing));
        tx.send(7).unwrap();
        assert!(matches!(rx.receive(Duration::ZERO), Received::Message(7)));
        drop(tx);
        assert!(matches!(rx.receive(Duration::ZERO), Received::Closed));
    }
}
