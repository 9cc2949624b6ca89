//! `swdaq bench transport`: fragments through swdaq's ZeroMQ transport (header encoding,
//! checks, zero-copy payload) against bare ZeroMQ PUSH/PULL of the same sizes, over TCP
//! loopback, in the same run. Each sender makes a fresh buffer per message (a fragment is
//! assembled per request), so both sides copy the same bytes once.

use crate::socket::{Inlet, NetOptions, Outlet};
use crate::wire::WireMessage;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The benchmark's own messages, with a chain fragment's frame layout: metadata of the same
/// fields, then the fragment's bytes as a frame of their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BenchMessage {
    /// Connects the sockets before the clock starts.
    WarmUp,
    /// Followed by a frame with the fragment's bytes.
    Fragment {
        trigger_number: u64,
        trigger_timestamp: u64,
        run_number: u32,
        sequence_number: u16,
        source: u32,
        window_begin: u64,
        window_end: u64,
        destination: u32,
        latency_us: u64,
    },
}

impl WireMessage for BenchMessage {
    /// The last id, far from the models'.
    const MODEL: u16 = u16::MAX;
    const VERSION: u16 = 1;

    fn kind(&self) -> &'static str {
        match self {
            BenchMessage::WarmUp => "warm-up",
            BenchMessage::Fragment { .. } => "fragment",
        }
    }

    fn frames_after(&self) -> usize {
        match self {
            BenchMessage::WarmUp => 0,
            BenchMessage::Fragment { .. } => 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TransportBenchConfig {
    pub sizes: &'static [usize],
    /// Bytes moved per measurement and size.
    pub bytes_per_round: usize,
    /// Alternating rounds of each transport; the median is reported.
    pub rounds: usize,
}

impl Default for TransportBenchConfig {
    fn default() -> Self {
        Self {
            sizes: &[4 << 10, 64 << 10, 1 << 20],
            bytes_per_round: 512 << 20,
            rounds: 3,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TransportResult {
    pub fragment_bytes: usize,
    pub messages: usize,
    pub swdaq_messages_per_s: f64,
    pub swdaq_gb_per_s: f64,
    pub bare_zmq_messages_per_s: f64,
    pub bare_zmq_gb_per_s: f64,
    /// swdaq over bare ZeroMQ, medians of the same run.
    pub ratio: f64,
}

pub fn run(config: &TransportBenchConfig) -> Result<Vec<TransportResult>, crate::NetError> {
    let mut out = Vec::new();
    for &size in config.sizes {
        let messages = (config.bytes_per_round / size).max(1000);
        let (mut ours, mut bare) = (Vec::new(), Vec::new());
        for _ in 0..config.rounds {
            ours.push(swdaq_round(size, messages)?);
            bare.push(bare_round(size, messages)?);
        }
        let (ours, bare) = (median(ours), median(bare));
        let rate = |s: f64| messages as f64 / s;
        let gb = |s: f64| (messages * size) as f64 / s / 1e9;
        out.push(TransportResult {
            fragment_bytes: size,
            messages,
            swdaq_messages_per_s: rate(ours),
            swdaq_gb_per_s: gb(ours),
            bare_zmq_messages_per_s: rate(bare),
            bare_zmq_gb_per_s: gb(bare),
            ratio: bare / ours,
        });
    }
    Ok(out)
}

fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

/// Seconds to move `messages` fragments of `size` bytes through an outlet into an inlet.
fn swdaq_round(size: usize, messages: usize) -> Result<f64, crate::NetError> {
    let context = zmq::Context::new();
    let mut inlet = Inlet::<BenchMessage>::bind(&context, "tcp://127.0.0.1:0")?;
    let outlet = Outlet::connect(&context, inlet.endpoint(), 1, &NetOptions::default())?;
    let template = vec![0x5au8; size];
    warm_up(
        || outlet.send(&BenchMessage::WarmUp).is_ok(),
        || inlet.receive(Duration::from_secs(10)).is_some(),
    );
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 0..messages as u64 {
                let meta = BenchMessage::Fragment {
                    trigger_number: n,
                    trigger_timestamp: 0,
                    run_number: 1,
                    sequence_number: 0,
                    source: 0,
                    window_begin: 0,
                    window_end: 1,
                    destination: 0,
                    latency_us: 0,
                };
                outlet
                    .send_fragment(&meta, template.clone())
                    .expect("the bench's receiver is alive");
            }
        });
        let mut received = 0;
        while received < messages {
            let d = inlet
                .receive(Duration::from_secs(10))
                .expect("the bench's sender is alive");
            assert_eq!(d.frames.first().map(|p| p.len()), Some(size));
            received += 1;
        }
    });
    Ok(started.elapsed().as_secs_f64())
}

/// The same over bare PUSH/PULL sockets: one frame per message, no header, no checks.
/// Seconds for `messages` of `size` bytes (also the event builder's bare-ZeroMQ figure).
pub fn bare_round(size: usize, messages: usize) -> Result<f64, crate::NetError> {
    let context = zmq::Context::new();
    let pull = context.socket(zmq::PULL)?;
    pull.bind("tcp://127.0.0.1:0")?;
    let endpoint = pull.get_last_endpoint()?.unwrap_or_default();
    let push = context.socket(zmq::PUSH)?;
    push.set_sndhwm(NetOptions::default().queue_messages)?;
    push.connect(&endpoint)?;
    let template = vec![0x5au8; size];
    warm_up(
        || push.send(&b"x"[..], 0).is_ok(),
        || pull.poll(zmq::POLLIN, 10_000).unwrap_or(0) > 0 && pull.recv_msg(0).is_ok(),
    );
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            for _ in 0..messages {
                push.send(zmq::Message::from(template.clone()), 0)
                    .expect("the bench's receiver is alive");
            }
        });
        for _ in 0..messages {
            let m = pull.recv_msg(0).expect("the bench's sender is alive");
            assert_eq!(m.len(), size);
        }
    });
    Ok(started.elapsed().as_secs_f64())
}

/// Sends one message and waits for it, so connecting is not timed.
fn warm_up(mut send: impl FnMut() -> bool, received: impl FnOnce() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !send() {
        assert!(
            Instant::now() < deadline,
            "no loopback connection within 10 s"
        );
    }
    assert!(received(), "the warm-up message did not arrive within 10 s");
}
