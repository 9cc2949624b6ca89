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
//!
//! The publishing side is here too, one for every model: an application binds a
//! [`SamplePublisher`] on the address its stream key gives ([`StreamKeys`]: the chain's
//! builders' `record_stream`, the event builder's builder units' and the SW ROD's HLT
//! applications' `event_stream`) and sends without ever waiting; a unit that samples with a
//! `swdaq_dqm` [`Sampler`] hands its samples to a thread that publishes them
//! ([`publish_samples`]). What each application sent and dropped ([`Published`]) comes back
//! in its report.

use super::dqm::{DqmReport, DqmSection, DqmView, OnlineDqm};
use super::model::RunHooks;
use super::stop::StopRequest;
use super::topology::{App, Field, TopologySection};
use crate::run_section::RunSection;
use anyhow::Context;
use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_dqm::HistSet;
use swdaq_dqm::sample::{SampleCounts, SampleTap, Sampler};
use swdaq_monitor::Registry;

/// How long a closed publisher's unsent messages are given to leave.
pub const PUBLISHER_LINGER: Duration = Duration::from_secs(1);
/// How long a publishing thread waits for its first subscriber before it sends.
pub const SUBSCRIBER_WAIT: Duration = Duration::from_secs(2);
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

impl StreamMessage {
    /// The one frame of a message that holds one sample as bytes (an event, as the
    /// one-process sampler copies it); anything else is refused with why.
    pub fn single_frame(self) -> Result<Vec<u8>, String> {
        match (self.frames.len(), self.frames_dropped) {
            (1, 0) => Ok(self.frames.into_iter().next().unwrap_or_default()),
            (n, dropped) => Err(format!("{} frames where one sample has one", n + dropped)),
        }
    }

    /// Fills `set` from a message holding one sample as bytes with `fill`, the model's
    /// one-process fill; a message that is not one frame, or whose frame `fill` refuses, is
    /// refused with why (the monitoring thread counts it unreadable).
    pub fn fill_sample<E: std::fmt::Display>(
        self,
        set: &mut HistSet,
        fill: fn(&mut HistSet, Vec<u8>) -> Result<(), E>,
    ) -> Result<(), String> {
        let sample = self.single_frame()?;
        fill(set, sample).map_err(|e| e.to_string())
    }
}

/// What an application's sample stream did: messages handed to its socket, and samples
/// picked but never sent (the publishing queue was full, or the socket refused them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub sent: u64,
    pub dropped: u64,
}

/// The keys of an application kind's sample stream: where it binds its PUB socket, and
/// every how many items it publishes.
pub struct StreamKeys {
    /// The application kind that publishes.
    pub kind: &'static str,
    pub stream: Field,
    pub every: Field,
    /// What it publishes ("records", "events").
    pub items: &'static str,
}

impl StreamKeys {
    /// Application kind `kind`'s keys `stream` and `every`, for `items`; `elsewhere` is what
    /// the refusal of either on another kind says.
    pub const fn new(
        kind: &'static str,
        [stream, every]: [&'static str; 2],
        items: &'static str,
        elsewhere: &'static str,
    ) -> Self {
        Self {
            kind,
            stream: Field {
                key: stream,
                elsewhere,
            },
            every: Field {
                key: every,
                elsewhere,
            },
            items,
        }
    }

    /// Checks every publishing application's keys: `every` at least 1, and with `[dqm]` in a
    /// topology a stream for each (the supervisor monitors what they publish).
    pub fn check(&self, topology: &TopologySection, dqm_enabled: bool) -> anyhow::Result<()> {
        for (_, a) in topology.of_kind(self.kind) {
            let every: u64 = a.field_or(self.every.key, 1)?;
            anyhow::ensure!(
                every >= 1,
                "invalid configuration: topology.apps.{}: must be >= 1",
                self.every.key
            );
            let stream: String = a.field(self.stream.key)?;
            // Its port is the user's to choose, as every address of the topology is: the
            // supervisor cannot tell a port free on another host, nor open one on a firewall.
            anyhow::ensure!(
                !dqm_enabled || !stream.is_empty(),
                "invalid configuration: topology.apps.{key}: {name}: [dqm] in a topology \
                 monitors the {items} every {kind} application publishes: give it {key} = \
                 \"tcp://HOST:PORT\" (a port of its host, free) or drop [dqm]",
                key = self.stream.key,
                name = a.name,
                items = self.items,
                kind = self.kind,
            );
        }
        Ok(())
    }

    /// Every publishing application's stream, where the supervisor connects to it: a stream
    /// bound on every interface (`*`, `0.0.0.0`) is reached at its application's own
    /// address's host.
    pub fn streams(&self, topology: &TopologySection) -> anyhow::Result<Vec<SampleStream>> {
        let mut streams = Vec::new();
        for (_, a) in topology.of_kind(self.kind) {
            let bound: String = a.field(self.stream.key)?;
            if !bound.is_empty() {
                streams.push(SampleStream {
                    app: a.name.clone(),
                    endpoint: reachable(&bound, &a.address),
                });
            }
        }
        Ok(streams)
    }

    /// Application `app`'s publisher, bound (none without a stream), its queue `dqm.queue`
    /// samples, and every how many items it publishes: its `every`, else [`default_every`].
    pub fn open(
        &self,
        context: &zmq::Context,
        app: &App,
        dqm: &DqmSection,
    ) -> anyhow::Result<Option<(SamplePublisher, u64)>> {
        let address: String = app.field(self.stream.key)?;
        if address.is_empty() {
            return Ok(None);
        }
        let every = app.field_or(self.every.key, default_every(dqm))?;
        let publisher = SamplePublisher::bind(context, &address, dqm.queue)
            .with_context(|| format!("{}: {} {address}", app.name, self.stream.key))?;
        Ok(Some((publisher, every.max(1))))
    }
}

/// An application's `*_stream_every` when it does not give one: with `[dqm]` on, its
/// `sample_every` (items sampled where they are built, as in one process), else 1.
pub fn default_every(dqm: &DqmSection) -> u64 {
    if dqm.enabled {
        u64::from(dqm.sample_every)
    } else {
        1
    }
}

/// `bound` (`tcp://HOST:PORT`) with a wildcard host replaced by the host of `address`.
pub fn reachable(bound: &str, address: &str) -> String {
    let host_of = |endpoint: &str| {
        let rest = endpoint.strip_prefix("tcp://")?;
        Some(rest.rsplit_once(':')?.0.to_owned())
    };
    match (host_of(bound), host_of(address)) {
        (Some(wild), Some(host)) if wild == "*" || wild == "0.0.0.0" => {
            let port = bound.rsplit_once(':').map_or("", |(_, p)| p);
            format!("tcp://{host}:{port}")
        }
        _ => bound.to_owned(),
    }
}

/// A ZeroMQ publishing socket for samples: a subscriber that cannot keep up loses them (a
/// publisher drops at its high-water mark), never the publisher's time. It is an XPUB, which
/// publishes as a PUB does and hears its subscribers subscribe
/// ([`SamplePublisher::wait_for_subscriber`]).
pub struct SamplePublisher {
    socket: zmq::Socket,
    counts: Published,
}

impl SamplePublisher {
    /// Bound at `address`, holding at most `queue` messages for a subscriber (more are
    /// dropped); what it holds when closed is given [`PUBLISHER_LINGER`] to leave (a unit
    /// that ends publishes its last samples).
    pub fn bind(context: &zmq::Context, address: &str, queue: usize) -> anyhow::Result<Self> {
        let socket = context.socket(zmq::XPUB)?;
        socket.set_linger(PUBLISHER_LINGER.as_millis() as i32)?;
        socket.set_sndhwm(i32::try_from(queue).unwrap_or(i32::MAX))?;
        socket.bind(address)?;
        Ok(Self {
            socket,
            counts: Published::default(),
        })
    }

    /// Waits at most `within` for a subscriber's subscription: what is sent before one has
    /// arrived is dropped by ZeroMQ, and a unit that builds its first events at once would
    /// otherwise publish them to nobody (the supervisor connects before the applications
    /// start, and reaches a socket once it is bound). Whether one came.
    pub fn wait_for_subscriber(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.socket.poll(zmq::POLLIN, left.as_millis() as i64) {
                Ok(0) => return false,
                Ok(_) => {
                    // A subscription is a message whose first byte is 1 (0: unsubscribe).
                    if let Ok(m) = self.socket.recv_bytes(zmq::DONTWAIT)
                        && m.first() == Some(&1)
                    {
                        return true;
                    }
                }
                Err(zmq::Error::EINTR) => {}
                Err(_) => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Sends one sample as a multipart message, never waiting: one the socket refuses is
    /// counted dropped.
    pub fn send<I, T>(&mut self, frames: I)
    where
        I: IntoIterator<Item = T>,
        T: Into<zmq::Message>,
    {
        if self.socket.send_multipart(frames, zmq::DONTWAIT).is_ok() {
            self.counts.sent += 1;
        } else {
            self.counts.dropped += 1;
        }
    }

    pub fn counts(&self) -> Published {
        self.counts
    }
}

/// Samples of a unit that samples with a `swdaq_dqm` [`Sampler`] (the event builder's
/// builder units, the SW ROD's HLT), published by a thread of their own: the unit's sampler
/// (every `every`-th item into a queue of `queue`, a full queue a counted drop, as in one
/// process) and the thread, which publishes each sample as one frame until the sampler is
/// dropped and returns what it sent. [`PublishingThread::finish`] adds the sampler's drops.
/// The thread first waits up to [`SUBSCRIBER_WAIT`] for the supervisor's subscription, the
/// samples meanwhile in the queue (never the unit's time: a full queue is a counted drop).
pub fn publish_samples(
    mut publisher: SamplePublisher,
    every: u64,
    queue: usize,
    registry: &Registry,
) -> anyhow::Result<(Sampler<Vec<u8>>, PublishingThread)> {
    let (tx, rx): (_, Receiver<Vec<u8>>) = crossbeam_channel::bounded(queue.max(1));
    let every = u32::try_from(every).unwrap_or(u32::MAX);
    let sampler = SampleTap::new(tx, every).sampler(registry, "dqm-publisher")?;
    let handle = std::thread::Builder::new()
        .name("dqm-publisher".into())
        .spawn(move || {
            publisher.wait_for_subscriber(SUBSCRIBER_WAIT);
            for sample in rx {
                publisher.send([sample]);
            }
            publisher.counts()
        })?;
    Ok((sampler, PublishingThread(handle)))
}

/// The thread [`publish_samples`] started.
pub struct PublishingThread(JoinHandle<Published>);

impl PublishingThread {
    /// Once the unit's sampler is dropped: what was sent, and dropped on the way (`sampled`,
    /// the sampler's counts, has those the queue had no room for).
    pub fn finish(self, sampled: SampleCounts) -> anyhow::Result<Published> {
        let mut published =
            (self.0.join()).map_err(|_| anyhow::anyhow!("the sample-stream publisher panicked"))?;
        published.dropped += sampled.dropped;
        Ok(published)
    }
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

    /// [`StreamedDqm::start`] for a model's topology: subscribed to the streams `keys` name,
    /// a frame bounded by `topology.max_message_mb`, the console told of it (`hooks`).
    /// Called before the applications start, so that their first samples are taken.
    pub fn start_for_topology<E: std::fmt::Display + 'static>(
        dqm: &DqmSection,
        run: &RunSection,
        topology: &TopologySection,
        keys: &StreamKeys,
        fill: fn(&mut HistSet, StreamMessage) -> Result<(), E>,
        hooks: &dyn RunHooks,
    ) -> anyhow::Result<Option<Self>> {
        let started = Self::start(
            dqm,
            &run.output_dir,
            keys.streams(topology)?,
            topology.max_message_mb.saturating_mul(1 << 20),
            fill,
            &Registry::new(),
        )?;
        if let Some(streamed) = &started {
            hooks.dqm(streamed.view());
        }
        Ok(started)
    }

    /// What the console shows of it (`RunHooks::dqm`).
    pub fn view(&self) -> DqmView {
        self.online.view()
    }

    /// [`StreamedDqm::finish`] once the applications have stopped, `stop` telling what the
    /// stop waits for meanwhile.
    pub fn finish_stopped(
        self,
        stop: &StopRequest,
        run: &RunSection,
        published: impl Fn(&str) -> Option<Published>,
    ) -> DqmReport {
        stop.waiting_for("data-quality monitoring to judge and save its histograms");
        self.finish(run, published)
    }

    /// Once the publishers have stopped: the subscriber drains what is on its way and ends,
    /// and the monitoring thread's outcome is saved as for a one-process run. `published`
    /// says what an application sent and dropped (none: unknown, its report lost); what
    /// it dropped, or sent and never arrived, is counted dropped.
    pub fn finish(
        self,
        run: &RunSection,
        published: impl Fn(&str) -> Option<Published>,
    ) -> DqmReport {
        self.stop.0.store(true, Ordering::Release);
        let (received, panicked) = match self.subscriber.join() {
            Ok(received) => (received, false),
            Err(_) => (Received::default(), true),
        };
        let mut samples = received.samples;
        for (stream, &got) in self.streams.iter().zip(&received.per_stream) {
            if let Some(p) = published(&stream.app) {
                samples.dropped += p.dropped + p.sent.saturating_sub(got);
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

/// What every model's tests of its stream keys hold.
#[cfg(test)]
pub(crate) mod checks {
    use super::*;

    /// `config` (with `[dqm]` on, its topology having publishing applications of `keys`,
    /// each at 127.0.0.1, and another kind first) is refused naming its first publishing
    /// application's missing stream; with every one's stream bound on every interface at
    /// `port`, `port + 1`, ... it is valid and the streams are reached at their applications'
    /// host; a zero `every` and a stream on another kind are refused.
    pub(crate) fn every_stream_is_required<C: Clone>(
        config: &C,
        keys: &StreamKeys,
        topology: fn(&mut C) -> &mut TopologySection,
        validate: fn(&C) -> anyhow::Result<()>,
        port: u16,
    ) {
        let mut config = config.clone();
        let publishing: Vec<usize> = (0..topology(&mut config).apps.len())
            .filter(|&i| topology(&mut config).apps[i].kind == keys.kind)
            .collect();
        let first = topology(&mut config).apps[publishing[0]].name.clone();
        let e = validate(&config).unwrap_err().to_string();
        let named = format!("topology.apps.{}: {first}", keys.stream.key);
        assert!(e.contains(&named) && e.contains("[dqm]"), "{e}");
        let mut expected = Vec::new();
        for (&i, port) in publishing.iter().zip(port..) {
            let app = &mut topology(&mut config).apps[i];
            let bound = format!("tcp://*:{port}");
            app.fields.insert(keys.stream.key.into(), bound.into());
            expected.push(SampleStream {
                app: app.name.clone(),
                endpoint: format!("tcp://127.0.0.1:{port}"),
            });
        }
        validate(&config).unwrap();
        assert_eq!(keys.streams(topology(&mut config)).unwrap(), expected);
        let mut zero = config.clone();
        let app = &mut topology(&mut zero).apps[publishing[0]];
        app.fields.insert(keys.every.key.into(), 0.into());
        let e = validate(&zero).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: must be >= 1", keys.every.key)),
            "{e}"
        );
        let mut elsewhere = config;
        let app = &mut topology(&mut elsewhere).apps[0];
        assert_ne!(app.kind, keys.kind);
        app.fields
            .insert(keys.stream.key.into(), "tcp://x:1".into());
        let e = validate(&elsewhere).unwrap_err().to_string();
        assert!(e.contains(keys.stream.elsewhere), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit's sampler offers every item; every `every`-th is published by the thread, one
    /// frame each, and what the thread sent comes back with the sampler's drops.
    #[test]
    fn sampled_items_are_published_one_frame_each_and_counted() {
        let context = zmq::Context::new();
        let publisher = SamplePublisher::bind(&context, "tcp://127.0.0.1:*", 64).unwrap();
        let endpoint = publisher.socket.get_last_endpoint().unwrap().unwrap();
        let subscriber = context.socket(zmq::SUB).unwrap();
        subscriber.set_subscribe(b"").unwrap();
        subscriber.connect(&endpoint).unwrap();
        // Sampled at once: the thread sends once the subscription has reached it.
        let registry = Registry::new();
        let (mut sampler, thread) = publish_samples(publisher, 3, 64, &registry).unwrap();
        for i in 0..10u8 {
            sampler.offer(|| vec![i; 4]);
        }
        let sampled = sampler.counts();
        drop(sampler);
        let published = thread.finish(sampled).unwrap();
        assert_eq!(
            published,
            Published {
                sent: 3,
                dropped: 0
            }
        );
        subscriber.set_rcvtimeo(5000).unwrap();
        for i in [2u8, 5, 8] {
            let frames = subscriber.recv_multipart(0).unwrap();
            let message = StreamMessage {
                frames,
                frames_dropped: 0,
            };
            assert_eq!(message.single_frame().unwrap(), vec![i; 4]);
        }
    }

    /// A stream bound on every interface is reached at its application's host; one bound
    /// on an address, or not over TCP, where it is bound.
    #[test]
    fn a_wildcard_stream_is_reached_at_its_application_s_host() {
        assert_eq!(
            reachable("tcp://0.0.0.0:9", "tcp://10.1.2.3:7104"),
            "tcp://10.1.2.3:9"
        );
        assert_eq!(
            reachable("tcp://10.0.0.7:9", "tcp://10.1.2.3:7104"),
            "tcp://10.0.0.7:9"
        );
        assert_eq!(reachable("ipc:///tmp/s", "tcp://h:1"), "ipc:///tmp/s");
    }

    #[test]
    fn a_sample_is_one_frame_and_a_refused_one_says_why() {
        let fill = |set: &mut HistSet, sample: Vec<u8>| -> Result<(), String> {
            set.events += 1;
            (sample.len() == 2)
                .then_some(())
                .ok_or("not two bytes".into())
        };
        let mut set = HistSet::default();
        let one = |frames: Vec<Vec<u8>>, frames_dropped| StreamMessage {
            frames,
            frames_dropped,
        };
        one(vec![vec![1, 2]], 0)
            .fill_sample(&mut set, fill)
            .unwrap();
        let two = one(vec![vec![1, 2], vec![3]], 0).fill_sample(&mut set, fill);
        assert_eq!(two.unwrap_err(), "2 frames where one sample has one");
        let cut = one(vec![vec![1, 2]], 4).fill_sample(&mut set, fill);
        assert_eq!(cut.unwrap_err(), "5 frames where one sample has one");
        let none = one(Vec::new(), 0).fill_sample(&mut set, fill);
        assert!(none.is_err());
        let bad = one(vec![vec![1]], 0).fill_sample(&mut set, fill);
        assert_eq!(bad.unwrap_err(), "not two bytes");
        assert_eq!(
            set.events, 2,
            "only the one-frame messages reached the fill"
        );
    }
}
