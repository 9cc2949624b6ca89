//! The ZeroMQ transport over loopback: messages and fragments arrive whole, heartbeats keep
//! a peer alive, silence declares it gone, foreign and garbage messages are refused and
//! counted, and a send to a peer that is not there fails within its time-out.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::Outbox;
use swdaq_net::wire::{self, Framework, WireMessage};
use swdaq_net::{Heartbeat, Inlet, Liveness, NetOptions, Outlet};

/// A model of the tests' own, with a chain's and a SW ROD's frame layouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Message {
    End,
    Request(Request),
    /// Followed by a frame with the fragment's bytes.
    Fragment {
        request: Request,
        latency_us: u64,
    },
    /// Followed by a frame per answer found.
    Answers(Vec<bool>),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Request {
    trigger_number: u64,
}

impl From<Request> for Message {
    fn from(r: Request) -> Self {
        Message::Request(r)
    }
}

impl WireMessage for Message {
    const MODEL: u16 = 50;
    const VERSION: u16 = 2;
    fn kind(&self) -> &'static str {
        match self {
            Message::End => "end",
            Message::Request(_) => "request",
            Message::Fragment { .. } => "fragment",
            Message::Answers(_) => "answers",
        }
    }
    fn frames_after(&self) -> usize {
        match self {
            Message::Fragment { .. } => 1,
            Message::Answers(found) => found.iter().filter(|&&f| f).count(),
            _ => 0,
        }
    }
}

/// Another model, whose messages a `Message` inbox refuses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stranger;

impl WireMessage for Stranger {
    const MODEL: u16 = 51;
    const VERSION: u16 = 2;
    fn kind(&self) -> &'static str {
        "stranger"
    }
}

fn request(n: u64) -> Request {
    Request { trigger_number: n }
}

fn pair() -> (zmq::Context, Inlet<Message>, Outlet<Message>) {
    let context = zmq::Context::new();
    let inlet = Inlet::bind(&context, "tcp://127.0.0.1:0").unwrap();
    let outlet = Outlet::connect(&context, inlet.endpoint(), 7, &NetOptions::default()).unwrap();
    (context, inlet, outlet)
}

#[test]
fn messages_and_fragments_arrive_whole_and_in_order() {
    let (_c, mut inlet, outlet) = pair();
    Outbox::send(&outlet, request(1)).unwrap();
    let bytes: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let meta = Message::Fragment {
        request: request(2),
        latency_us: 3,
    };
    outlet.send_fragment(&meta, bytes.clone()).unwrap();
    let first = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!(
        (first.sender, first.message),
        (7, Message::Request(request(1)))
    );
    let second = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!(second.message, meta);
    assert_eq!(&second.frames[0][..], &bytes[..]);
    assert_eq!(outlet.counts(), (2, 0));
    assert_eq!(inlet.counts().received, 2);
}

#[test]
fn answers_bring_each_fragment_found_as_a_frame_of_its_own() {
    let (_c, mut inlet, outlet) = pair();
    let answers = Message::Answers(vec![true, false, true]);
    let frames = vec![vec![1u8; 300], vec![3u8; 500]];
    // Once connected (a send that never waits fails before).
    outlet.send_heartbeat().unwrap();
    outlet
        .try_send_with_frames(&answers, frames.clone())
        .unwrap();
    let d = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!(d.message, answers);
    let got: Vec<Vec<u8>> = d.frames.iter().map(|f| f.to_vec()).collect();
    assert_eq!(got, frames);
    // Announcing one frame too few is refused whole, and counted.
    outlet
        .try_send_with_frames(&answers, vec![vec![1u8; 3]])
        .unwrap();
    assert!(inlet.receive(Duration::from_millis(500)).is_none());
    assert_eq!(inlet.counts().refused.get("malformed"), Some(&1));
}

#[test]
fn heartbeats_keep_a_peer_alive_and_silence_declares_it_gone() {
    let (_c, mut inlet, outlet) = pair();
    let mut liveness = Liveness::new([7], Duration::from_millis(300));
    let heartbeat = Heartbeat::start(vec![outlet.clone()], Duration::from_millis(50)).unwrap();
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        assert!(
            inlet.receive(Duration::from_millis(20)).is_none(),
            "heartbeats are not delivered"
        );
        assert!(
            liveness
                .newly_gone(|p| inlet.last_seen(p), Instant::now())
                .is_empty()
        );
    }
    drop(heartbeat);
    let until = Instant::now() + Duration::from_secs(5);
    let mut gone = Vec::new();
    while gone.is_empty() && Instant::now() < until {
        inlet.receive(Duration::from_millis(20));
        gone = liveness.newly_gone(|p| inlet.last_seen(p), Instant::now());
    }
    assert_eq!(gone, [7]);
}

#[test]
fn foreign_versions_and_garbage_are_refused_and_counted() {
    let context = zmq::Context::new();
    let mut inlet = Inlet::<Message>::bind(&context, "tcp://127.0.0.1:0").unwrap();
    let raw = context.socket(zmq::PUSH).unwrap();
    raw.connect(inlet.endpoint()).unwrap();
    let mut other_version = wire::encode(2, &Message::End, 0);
    other_version[4] = 99;
    raw.send(other_version, 0).unwrap();
    raw.send(&b"\x00\x01garbage"[..], 0).unwrap();
    // A fragment header with its bytes frame missing, then a good message.
    let meta = Message::Fragment {
        request: request(1),
        latency_us: 0,
    };
    raw.send(wire::encode(2, &meta, 1), 0).unwrap();
    raw.send(wire::encode(2, &Message::End, 0), 0).unwrap();
    let d = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!(d.message, Message::End);
    let refused = &inlet.counts().refused;
    assert_eq!(refused.get("version"), Some(&1));
    assert_eq!(refused.get("garbage"), Some(&1));
    assert_eq!(refused.get("malformed"), Some(&1));
    assert_eq!(inlet.counts().received, 1);
}

#[test]
fn another_model_s_messages_and_another_version_of_its_own_are_refused_and_counted() {
    let context = zmq::Context::new();
    let mut inlet = Inlet::<Message>::bind(&context, "tcp://127.0.0.1:0").unwrap();
    let raw = context.socket(zmq::PUSH).unwrap();
    raw.connect(inlet.endpoint()).unwrap();
    raw.send(wire::encode(2, &Stranger, 0), 0).unwrap();
    let mut other_model_version = wire::encode(2, &Message::End, 0);
    other_model_version[14] ^= 1;
    raw.send(other_model_version, 0).unwrap();
    raw.send(wire::encode(2, &Framework::Heartbeat, 0), 0)
        .unwrap();
    raw.send(wire::encode(2, &Message::End, 0), 0).unwrap();
    let d = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!((d.sender, d.message), (2, Message::End));
    let refused = &inlet.counts().refused;
    assert_eq!(refused.get("model"), Some(&1));
    assert_eq!(refused.get("model_version"), Some(&1));
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(inlet.counts().received, 2, "the heartbeat and the end");
}

#[test]
fn a_sender_outside_the_topology_is_refused_and_counted_even_its_heartbeat() {
    let context = zmq::Context::new();
    let mut inlet = Inlet::<Message>::bind(&context, "tcp://127.0.0.1:0")
        .unwrap()
        .admitting(0..3);
    let raw = context.socket(zmq::PUSH).unwrap();
    raw.connect(inlet.endpoint()).unwrap();
    raw.send(wire::encode(7, &Framework::Heartbeat, 0), 0)
        .unwrap();
    raw.send(wire::encode(7, &Message::End, 0), 0).unwrap();
    raw.send(wire::encode(2, &Message::End, 0), 0).unwrap();
    let d = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!((d.sender, d.message), (2, Message::End));
    assert_eq!(inlet.counts().refused.get("unknown_sender"), Some(&2));
    assert_eq!(inlet.counts().received, 1);
    assert_eq!(inlet.last_seen(7), None, "a stranger keeps no one alive");
}

#[test]
fn a_send_to_nobody_fails_within_its_time_out() {
    let context = zmq::Context::new();
    let options = NetOptions {
        send_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    // Port 9 (discard) on loopback: nothing listens there in a test sandbox.
    let outlet = Outlet::<Message>::connect(&context, "tcp://127.0.0.1:9", 1, &options).unwrap();
    let started = Instant::now();
    assert!(outlet.send(&Message::End).is_err());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(outlet.counts(), (0, 1));
}

/// With nothing coming, `receive` waits out its whole wait, a sub-millisecond one too: it
/// used to poll with the wait rounded down to whole milliseconds, so a wait under 1 ms
/// returned at once and a caller waiting for something due in a millisecond spun.
#[test]
fn receive_with_nothing_coming_waits_its_whole_wait() {
    let (_context, mut inlet, _outlet) = pair();
    for micros in [100, 900, 1500, 2300] {
        let wait = Duration::from_micros(micros);
        let started = Instant::now();
        assert!(inlet.receive(wait).is_none());
        assert!(
            started.elapsed() >= wait,
            "{micros} µs: {:?}",
            started.elapsed()
        );
    }
}

/// A message over the inbox's limit (a hostile or broken peer's 8 MiB frame here, 512 MiB in
/// the audit) is never buffered: ZeroMQ drops its sender; other peers' messages still arrive.
#[test]
fn a_message_over_the_inbox_s_limit_is_dropped_with_its_sender() {
    let context = zmq::Context::new();
    let mut inlet =
        Inlet::<Message>::bind_limited(&context, "tcp://127.0.0.1:0", Some(1 << 20)).unwrap();
    let hostile = context.socket(zmq::PUSH).unwrap();
    hostile.connect(inlet.endpoint()).unwrap();
    // A well-formed fragment message whose bytes frame is 8 MiB.
    let meta = Message::Fragment {
        request: request(2),
        latency_us: 0,
    };
    hostile
        .send(wire::encode(9, &meta, 1), zmq::SNDMORE)
        .unwrap();
    hostile.send(vec![0u8; 8 << 20], 0).unwrap();
    let outlet =
        Outlet::<Message>::connect(&context, inlet.endpoint(), 7, &NetOptions::default()).unwrap();
    Outbox::send(&outlet, request(1)).unwrap();
    let d = inlet.receive(Duration::from_secs(5)).unwrap();
    assert_eq!((d.sender, d.message), (7, Message::Request(request(1))));
    assert!(inlet.receive(Duration::from_millis(300)).is_none());
    assert_eq!(inlet.counts().received, 1);
    assert!(
        inlet.counts().refused.is_empty(),
        "it never reached the inbox"
    );
}
