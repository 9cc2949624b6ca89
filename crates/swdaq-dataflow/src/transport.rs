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
