//! ZeroMQ endpoints: every application binds one [`Inlet`] (a PULL socket) where all its
//! peers send, and holds one [`Outlet`] (a PUSH socket) per peer it sends to. One inbox per
//! application keeps the topology to one address per application; the message kind in the
//! header says what each message is for. Both are typed by the model whose messages they carry
//! (`Inlet<M>`, `Outlet<M>`): a message is encoded and decoded once, by code made for its model.
//!
//! Outlets never wait for ever: a send that a peer does not take within the send time-out
//! (peer gone, or too slow) fails and is counted, so a dead peer costs its own data, never
//! the sender's progress. Inlets refuse what is not ours (wrong magic, another protocol
//! version, another model's message or another version of its model's, a malformed body, a
//! sender id outside the topology) with a counter and a line on stderr, and remember when each peer was last heard from (liveness; see `crate::liveness`).
//! A stranger's heartbeat is refused too: it must neither count as traffic nor keep anyone
//! alive.

use crate::wire::{self, AppId, Framework, Header, WireError, WireMessage};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Display;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::{Disconnected, Outbox};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetOptions {
    /// How long a send may wait for a peer that does not take the message.
    pub send_timeout: Duration,
    /// Messages queued per peer before sends wait (ZeroMQ high-water mark).
    pub queue_messages: i32,
    /// How long queued messages still go out after an outlet is dropped.
    pub linger: Duration,
}

impl Default for NetOptions {
    fn default() -> Self {
        Self {
            send_timeout: Duration::from_millis(1000),
            queue_messages: 1000,
            linger: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        endpoint: String,
        source: zmq::Error,
    },
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: zmq::Error,
    },
    #[error("ZeroMQ: {0}")]
    Zmq(#[from] zmq::Error),
}

/// Why a send failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the peer did not take the message in time (gone, or too slow)")]
    TimedOut,
    #[error("the ZeroMQ context is closing")]
    Closing,
}

pub(crate) struct OutletInner {
    socket: Mutex<zmq::Socket>,
    sender: AppId,
    endpoint: String,
    sent: AtomicU64,
    undelivered: AtomicU64,
}

/// A PUSH socket connected to one peer's inbox, sending model `M`'s messages; cheap to clone,
/// usable from any thread.
pub struct Outlet<M> {
    inner: Arc<OutletInner>,
    model: PhantomData<fn(M)>,
}

impl<M> Clone for Outlet<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            model: PhantomData,
        }
    }
}

impl<M: WireMessage> Outlet<M> {
    /// Connects (in the background: the peer need not be up yet) to `endpoint`, sending as
    /// application `sender`.
    pub fn connect(
        context: &zmq::Context,
        endpoint: &str,
        sender: AppId,
        options: &NetOptions,
    ) -> Result<Self, NetError> {
        let socket = context.socket(zmq::PUSH)?;
        socket.set_sndhwm(options.queue_messages)?;
        socket.set_sndtimeo(options.send_timeout.as_millis() as i32)?;
        socket.set_linger(options.linger.as_millis() as i32)?;
        // Queue only for a connected peer: messages for one that is gone fail (counted)
        // instead of piling up for a reconnection that may never come.
        socket.set_immediate(true)?;
        socket
            .connect(endpoint)
            .map_err(|source| NetError::Connect {
                endpoint: endpoint.into(),
                source,
            })?;
        Ok(Self {
            inner: Arc::new(OutletInner {
                socket: Mutex::new(socket),
                sender,
                endpoint: endpoint.into(),
                sent: AtomicU64::new(0),
                undelivered: AtomicU64::new(0),
            }),
            model: PhantomData,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Messages sent, and messages the peer did not take.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.inner.sent.load(Ordering::Relaxed),
            self.inner.undelivered.load(Ordering::Relaxed),
        )
    }

    pub fn send(&self, message: &M) -> Result<(), SendError> {
        self.send_frames(message, &mut Vec::new(), 0)
    }

    /// Sends without waiting at all: fails at once when the peer's queue is full.
    pub fn try_send(&self, message: &M) -> Result<(), SendError> {
        self.send_frames(message, &mut Vec::new(), zmq::DONTWAIT)
    }

    /// A heartbeat, waiting for the peer as any send does: once it goes, the peer is
    /// connected.
    pub fn send_heartbeat(&self) -> Result<(), SendError> {
        let head = wire::encode(self.inner.sender, &Framework::Heartbeat, 0);
        self.inner.send_frames(head, &mut Vec::new(), 0)
    }

    /// The socket without its model, for the heartbeat thread.
    pub(crate) fn untyped(&self) -> Arc<OutletInner> {
        Arc::clone(&self.inner)
    }

    /// A fragment: its metadata, then its bytes as a second frame, handed over without a copy.
    pub fn send_fragment(&self, message: &M, bytes: Vec<u8>) -> Result<(), SendError> {
        self.send_frames(message, &mut vec![bytes], 0)
    }

    /// A message and the frames it announces (`WireMessage::frames_after`), each handed over
    /// without a copy; never waits: fails at once when the peer's queue is full.
    pub fn try_send_with_frames(
        &self,
        message: &M,
        mut frames: Vec<Vec<u8>>,
    ) -> Result<(), SendError> {
        self.try_send_keeping(message, &mut frames)
    }

    /// As [`Self::try_send_with_frames`], but when the peer's queue is full `frames` are
    /// left as they were, to be sent again later; taken when the message goes.
    pub fn try_send_keeping(
        &self,
        message: &M,
        frames: &mut Vec<Vec<u8>>,
    ) -> Result<(), SendError> {
        self.send_frames(message, frames, zmq::DONTWAIT)
    }

    fn send_frames(
        &self,
        message: &M,
        frames: &mut Vec<Vec<u8>>,
        flags: i32,
    ) -> Result<(), SendError> {
        let head = wire::encode(self.inner.sender, message, frames.len() as u16);
        self.inner.send_frames(head, frames, flags)
    }
}

impl OutletInner {
    /// A heartbeat, unless another thread is sending right now (then that message, once it
    /// goes, says as much); never waits.
    pub(crate) fn heartbeat(&self) {
        let Ok(socket) = self.socket.try_lock() else {
            return;
        };
        let head = wire::encode(self.sender, &Framework::Heartbeat, 0);
        // A full queue already tells the peer we are alive.
        let _ = socket.send(head, zmq::DONTWAIT);
    }

    /// Sends the encoded first frame `head` and then `frames`.
    fn send_frames(
        &self,
        head: Vec<u8>,
        frames: &mut Vec<Vec<u8>>,
        flags: i32,
    ) -> Result<(), SendError> {
        let socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        // A multipart message is atomic in ZeroMQ: the first frame waits (or times out) for
        // room, the others then always go.
        let last = frames.len();
        let more = |i: usize| if i < last { zmq::SNDMORE } else { 0 };
        let result = socket.send(head, flags | more(0)).and_then(|()| {
            std::mem::take(frames)
                .into_iter()
                .enumerate()
                .try_for_each(|(i, bytes)| {
                    socket.send(zmq::Message::from(bytes), flags | more(i + 1))
                })
        });
        match result {
            Ok(()) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.undelivered.fetch_add(1, Ordering::Relaxed);
                Err(if e == zmq::Error::ETERM {
                    SendError::Closing
                } else {
                    SendError::TimedOut
                })
            }
        }
    }
}

/// Dataflow nodes send through outlets as through any other transport.
impl<T: Into<M> + Send, M: WireMessage> Outbox<T> for Outlet<M> {
    fn send(&self, message: T) -> Result<(), Disconnected> {
        Outlet::send(self, &message.into()).map_err(|_| Disconnected)
    }
}

/// An outlet whose sends never wait: a message the peer cannot take at once (gone, or
/// its queue full) fails at once, to be counted by the sender. For requests, where a dead
/// readout must not hold the builder up.
pub struct Immediate<M>(pub Outlet<M>);

impl<M> Clone for Immediate<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: Into<M> + Send, M: WireMessage> Outbox<T> for Immediate<M> {
    fn send(&self, message: T) -> Result<(), Disconnected> {
        self.0.try_send(&message.into()).map_err(|_| Disconnected)
    }
}

/// One message as received, checked.
#[derive(Debug)]
pub struct Delivery<M> {
    pub sender: AppId,
    pub message: M,
    /// The fragments' bytes that followed it, as ZeroMQ received them (no copy made yet).
    pub frames: Vec<zmq::Message>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InletCounts {
    pub received: u64,
    /// Messages refused, by reason: `garbage`, `version`, `model` (another model's message),
    /// `model_version` (another version of this model's messages), `malformed`,
    /// `unknown_sender`.
    pub refused: BTreeMap<String, u64>,
}

/// An application's inbox: a PULL socket every peer sends to, taking model `M`'s messages
/// and the framework's.
pub struct Inlet<M> {
    socket: zmq::Socket,
    endpoint: String,
    counts: InletCounts,
    last_seen: HashMap<AppId, Instant>,
    /// The sender ids taken (the topology's applications); any if `None`.
    senders: Option<BTreeSet<AppId>>,
    refusals_logged: u32,
    model: PhantomData<fn() -> M>,
}

/// Messages an inlet queues per sending peer before that peer's sends wait.
pub const INLET_QUEUE_MESSAGES: i32 = 1 << 16;

/// Refusals written to stderr per inlet; the rest are only counted.
const REFUSALS_LOGGED: u32 = 10;

impl<M: WireMessage> Inlet<M> {
    /// An inbox taking messages of any size (benchmarks, tests); applications bind theirs
    /// with [`Self::bind_limited`].
    pub fn bind(context: &zmq::Context, endpoint: &str) -> Result<Self, NetError> {
        Self::bind_limited(context, endpoint, None)
    }

    /// An inbox at `endpoint`; a peer sending a message (any one frame) larger than
    /// `max_message_bytes` is disconnected by ZeroMQ before the message is buffered, so a
    /// hostile or broken peer cannot make this process allocate what it likes.
    pub fn bind_limited(
        context: &zmq::Context,
        endpoint: &str,
        max_message_bytes: Option<u64>,
    ) -> Result<Self, NetError> {
        let socket = context.socket(zmq::PULL)?;
        if let Some(max) = max_message_bytes {
            socket.set_maxmsgsize(i64::try_from(max).unwrap_or(i64::MAX))?;
        }
        // Per sending peer. Deep enough for a burst of small messages (TP batches while the
        // trigger is busy); large ones (fragments) are bounded by the builders' credits.
        socket.set_rcvhwm(INLET_QUEUE_MESSAGES)?;
        socket.set_linger(0)?;
        socket.bind(endpoint).map_err(|source| NetError::Bind {
            endpoint: endpoint.into(),
            source,
        })?;
        let endpoint = socket
            .get_last_endpoint()?
            .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned());
        Ok(Self {
            socket,
            endpoint,
            counts: InletCounts::default(),
            last_seen: HashMap::new(),
            senders: None,
            refusals_logged: 0,
            model: PhantomData,
        })
    }

    /// Takes messages only from `senders` from now on; the rest are refused as
    /// `unknown_sender`.
    pub fn admitting(mut self, senders: impl IntoIterator<Item = AppId>) -> Self {
        self.senders = Some(senders.into_iter().collect());
        self
    }

    /// The bound address (with the port the system chose, for `tcp://127.0.0.1:0`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn counts(&self) -> &InletCounts {
        &self.counts
    }

    /// When `peer` was last heard from (any message, heartbeats included).
    pub fn last_seen(&self, peer: AppId) -> Option<Instant> {
        self.last_seen.get(&peer).copied()
    }

    /// The next valid message other than a heartbeat, waiting at most `wait`. Refused
    /// messages are counted and skipped.
    pub fn receive(&mut self, wait: Duration) -> Option<Delivery<M>> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ready = self
                .socket
                .poll(zmq::POLLIN, whole_millis_up(left))
                .unwrap_or(0);
            if ready == 0 {
                return None;
            }
            if let Some(d) = self.receive_one() {
                return Some(d);
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// Reads one whole multipart message; `None` if it was refused or a heartbeat.
    fn receive_one(&mut self) -> Option<Delivery<M>> {
        let mut frames = Vec::with_capacity(2);
        loop {
            match self.socket.recv_msg(zmq::DONTWAIT) {
                Ok(frame) => {
                    let more = frame.get_more();
                    frames.push(frame);
                    if !more {
                        break;
                    }
                }
                Err(_) if frames.is_empty() => return None,
                // ZeroMQ delivers multipart messages whole: the rest is there.
                Err(_) => continue,
            }
        }
        // `None`: the framework's heartbeat.
        let decoded = Header::read(&frames[0]).and_then(|header| {
            if header.is_framework::<M>()? {
                wire::decode_body::<Framework>(&header, &frames[0]).map(|_| (header, None))
            } else {
                wire::decode_body::<M>(&header, &frames[0]).map(|d| (header, Some(d.message)))
            }
        });
        let (header, message) = match decoded {
            Ok((h, message)) if h.frames_after as usize == frames.len() - 1 => (h, message),
            Ok((h, _)) => {
                let reason = format!(
                    "header announces {} more frames, {} came",
                    h.frames_after,
                    frames.len() - 1
                );
                self.refuse_wire(WireError::Malformed {
                    sender: h.sender,
                    what: "message",
                    reason,
                });
                return None;
            }
            Err(e) => {
                self.refuse_wire(e);
                return None;
            }
        };
        let sender = header.sender;
        if self.senders.as_ref().is_some_and(|s| !s.contains(&sender)) {
            self.refuse(
                "unknown_sender",
                format!("sender {sender} is not in the topology"),
            );
            return None;
        }
        self.counts.received += 1;
        self.last_seen.insert(sender, Instant::now());
        let message = message?;
        frames.remove(0);
        Some(Delivery {
            sender,
            message,
            frames,
        })
    }

    fn refuse_wire(&mut self, error: WireError) {
        self.refuse(error.reason(), error);
    }

    fn refuse(&mut self, reason: &str, why: impl Display) {
        *self.counts.refused.entry(reason.to_string()).or_default() += 1;
        if self.refusals_logged < REFUSALS_LOGGED {
            self.refusals_logged += 1;
            eprintln!("swdaq: {}: refused a message: {why}", self.endpoint);
        }
    }
}

/// A poll time-out in whole milliseconds, rounded up: rounded down, any wait under 1 ms
/// (and the tail of every longer one) polled with 0 and returned at once, so a loop waiting
/// for its next L1 accept a millisecond ahead spun (the HLT supervisor took 73% of a core at
/// 5 kHz, `perf` and `strace` of its thread).
fn whole_millis_up(wait: Duration) -> i64 {
    wait.as_micros().div_ceil(1000).min(i64::MAX as u128) as i64
}
