//! `[dqm]` in a topology: the process that supervises the applications (`swdaq run` or
//! `swdaq serve`) subscribes to each sample stream the model names (a ZeroMQ PUB endpoint:
//! the chain's builders' `record_stream`) and hands every message it receives, as its frames,
//! to the monitoring thread the one-process run has ([`OnlineDqm`], started by
//! [`DqmSection::start`]). The model's fill function decodes the frames and fills as from a
//! sample taken in one process; a malformed message is an unreadable sample, counted with the
//! first one's reason, never a panic. So `GET /dqm`, the alerts, the reference's judgement
//! and the saved `dqm_runNNNNNN.h5` are the one-process ones.
//!
//! Every wait is bounded: the subscriber polls its sockets for at most [`POLL`] between looks
//! at the stop, and drains for at most [`DRAIN`] once told to stop. A message that finds the
//! monitoring thread's queue full is a counted drop, in the same counter as in one process;
//! one the publisher dropped (ZeroMQ's PUB drops for a subscriber that falls behind, or
//! before it has subscribed) is counted from what each publisher says it sent
//! ([`StreamedDqm::finish`]).

use super::dqm::{DqmReport, DqmSection, DqmView, OnlineDqm};
use crate::run_section::RunSection;
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_dqm::HistSet;
use swdaq_dqm::sample::{SampleCounts, Sampler};
use swdaq_monitor::Registry;

/// Longest wait for a message before the stop is looked at again.
pub const POLL: Duration = Duration::from_millis(100);
/// Once told to stop, messages still arriving are taken for at most this long (the
/// publishers have stopped by then: what is on its way arrives within a poll).
pub const DRAIN: Duration = Duration::from_secs(2);
/// Messages taken from one socket before the stop is looked at again.
const BATCH: usize = 1024;
/// Frames a message keeps at most; the rest are counted in [`StreamMessage::frames_dropped`]
/// (a record has a frame per fragment: far fewer).
pub const MAX_FRAMES: usize = 1 << 16;

/// A sample stream of the topology: the application publishing it and where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleStream {
    pub app: String,
    pub endpoint: String,
}

/// One message as received: its frames, never trusted (the model's fill decodes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamMessage {
    pub frames: Vec<Vec<u8>>,
    /// Frames over [`MAX_FRAMES`], received and let go: such a message is malformed.
    pub frames_dropped: usize,
}

/// What the subscriber took in: messages received per stream (in the streams' order), and
/// the samplers' counts (sent to the monitoring thread, or dropped: its queue was full).
#[derive(Debug, Default)]
struct Received {
    per_stream: Vec<u64>,
    samples: SampleCounts,
}

/// Online monitoring fed by the applications' sample streams.
pub struct StreamedDqm {
    online: OnlineDqm<StreamMessage>,
    streams: Vec<SampleStream>,
    subscriber: JoinHandle<Received>,
    stop: StopOnDrop,
}

/// Tells the subscriber to stop when dropped: a run that fails before `finish` leaves no
/// thread polling.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl StreamedDqm {
    /// With `[dqm]` on: the monitoring thread (its reference loaded from `output_dir`) and a
    /// subscriber connected to every stream, before the applications start publishing (a
    /// publisher not yet bound is connected to once it is). `max_frame_bytes` bounds one
    /// frame (ZeroMQ drops a publisher sending more before the frame is buffered); `fill`
    /// is the model's fill function for one message.
    pub fn start<E: std::fmt::Display + 'static>(
        dqm: &DqmSection,
        output_dir: &Path,
        streams: Vec<SampleStream>,
        max_frame_bytes: u64,
        fill: fn(&mut HistSet, StreamMessage) -> Result<(), E>,
        registry: &Registry,
    ) -> anyhow::Result<Option<Self>> {
        // The publishers sample every N-th item: every message they send is taken.
        let every_message = DqmSection {
            sample_every: 1,
            ..dqm.clone()
        };
        let Some(online) = every_message.start(output_dir, fill, registry)? else {
            return Ok(None);
        };
        let sampler = online.tap().sampler(registry, "dqm-subscriber")?;
        let context = zmq::Context::new();
        let sockets = (streams.iter())
            .map(|s| subscribe(&context, s, max_frame_bytes, dqm.queue))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let stop = Arc::new(AtomicBool::new(false));
        let told = Arc::clone(&stop);
        let subscriber = std::thread::Builder::new()
            .name("dqm-subscriber".into())
            .spawn(move || {
                let received = receive_until_stopped(&sockets, sampler, &told);
                drop(sockets);
                drop(context);
                received
            })?;
        Ok(Some(Self {
            online,
            streams,
            subscriber,
            stop: StopOnDrop(stop),
        }))
    }

    /// What the console shows of it (`RunHooks::dqm`).
    pub fn view(&self) -> DqmView {
        self.online.view()
    }

    /// Once the publishers have stopped: the subscriber drains what is on its way and ends,
    /// and the monitoring thread's outcome is saved as for a one-process run. `published`
    /// says how many messages an application sent (none: unknown, its report lost); what
    /// it sent and never arrived is counted dropped.
    pub fn finish(self, run: &RunSection, published: impl Fn(&str) -> Option<u64>) -> DqmReport {
        self.stop.0.store(true, Ordering::Release);
        let (received, panicked) = match self.subscriber.join() {
            Ok(received) => (received, false),
            Err(_) => (Received::default(), true),
        };
        let mut samples = received.samples;
        for (stream, &got) in self.streams.iter().zip(&received.per_stream) {
            if let Some(sent) = published(&stream.app) {
                samples.dropped += sent.saturating_sub(got);
            }
        }
        let mut report = self.online.finish(run, samples);
        if panicked {
            report.error = Some("the sample-stream subscriber panicked".into());
        }
        report
    }
}

/// A SUB socket connected to `stream`, taking everything it publishes, its queue bounded
/// like the monitoring thread's.
fn subscribe(
    context: &zmq::Context,
    stream: &SampleStream,
    max_frame_bytes: u64,
    queue: usize,
) -> anyhow::Result<zmq::Socket> {
    let socket = context.socket(zmq::SUB)?;
    socket.set_linger(0)?;
    socket.set_maxmsgsize(i64::try_from(max_frame_bytes).unwrap_or(i64::MAX))?;
    socket.set_rcvhwm(i32::try_from(queue).unwrap_or(i32::MAX))?;
    socket.set_subscribe(b"")?;
    socket
        .connect(&stream.endpoint)
        .with_context(|| format!("[dqm]: {}'s sample stream {}", stream.app, stream.endpoint))?;
    Ok(socket)
}

/// Receives from every socket until `stop`, then drains for at most [`DRAIN`] (until a
/// poll finds nothing); each message is offered to `sampler`.
fn receive_until_stopped(
    sockets: &[zmq::Socket],
    mut sampler: Sampler<StreamMessage>,
    stop: &AtomicBool,
) -> Received {
    let mut per_stream = vec![0; sockets.len()];
    let mut drain_until: Option<Instant> = None;
    let poll_ms = POLL.as_millis() as i64;
    loop {
        if drain_until.is_none() && stop.load(Ordering::Acquire) {
            drain_until = Some(Instant::now() + DRAIN);
        }
        if drain_until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let mut items: Vec<zmq::PollItem> = sockets
            .iter()
            .map(|s| s.as_poll_item(zmq::POLLIN))
            .collect();
        let ready = match zmq::poll(&mut items, poll_ms) {
            Ok(n) => n,
            Err(zmq::Error::EINTR) => continue,
            Err(e) => {
                eprintln!("swdaq: [dqm] sample streams: {e}; no more samples taken");
                break;
            }
        };
        if ready == 0 && drain_until.is_some() {
            break;
        }
        let readable: Vec<bool> = items.iter().map(zmq::PollItem::is_readable).collect();
        for ((socket, count), _) in (sockets.iter().zip(&mut per_stream))
            .zip(readable)
            .filter(|(_, r)| *r)
        {
            // What is waiting, without waiting for more; at most a batch, so that the stop
            // is looked at however fast a publisher goes.
            for message in std::iter::from_fn(|| receive(socket)).take(BATCH) {
                *count += 1;
                sampler.offer(|| message);
            }
        }
    }
    Received {
        per_stream,
        samples: sampler.counts(),
    }
}

/// One whole message if one is waiting; none otherwise (or on an error, which ends nothing:
/// the next poll tries again). A multipart message arrives whole, so its further frames are
/// there once its first is.
fn receive(socket: &zmq::Socket) -> Option<StreamMessage> {
    let first = socket.recv_bytes(zmq::DONTWAIT).ok()?;
    let mut message = StreamMessage {
        frames: vec![first],
        frames_dropped: 0,
    };
    while socket.get_rcvmore().unwrap_or(false) {
        let Ok(frame) = socket.recv_bytes(zmq::DONTWAIT) else {
            break;
        };
        if message.frames.len() < MAX_FRAMES {
            message.frames.push(frame);
        } else {
            message.frames_dropped += 1;
        }
    }
    Some(message)
}
