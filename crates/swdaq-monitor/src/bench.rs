//! Throughput cost of monitoring, modelled on the FELIX study (Leventis et al.).
//!
//! N routing threads copy 40-byte messages from an input ring to an output ring, checksum
//! each (FNV-1a, byte by byte) and make [`UPDATES_PER_MESSAGE`] counter updates per message.
//! Variants run in the same process, interleaved round by round with a rotating order so
//! drift (thermal, other load) spreads over all of them:
//!
//! * `off`: no statistics (the baseline);
//! * `swdaq`: per-thread [`Block`](crate::Block) counters updated per message, a
//!   [`StatsThread`] reading them;
//! * `swdaq_batched`: the same counters, updated once per burst of 256 messages from sums
//!   kept in locals — how a readout thread counts frames it receives in bursts;
//! * `shared_atomics`: one shared set of `AtomicU64`, `fetch_add` from every thread (the
//!   paper's Implementation I);
//! * `queue`: every update sent over a bounded channel per metric, drained by a statistics
//!   thread (the paper's original design).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;

use crate::{Counter, Registry, StatsThread};

pub const MESSAGE_BYTES: usize = 40;
pub const UPDATES_PER_MESSAGE: usize = 10;
/// Messages per ring: 40 KiB in + 40 KiB out per thread stays in L2, as in a hot router.
const RING: usize = 1024;
/// Messages between looks at the stop flag.
const BATCH: usize = 256;
/// Capacity of each per-metric channel of the `queue` variant.
const QUEUE_CAPACITY: usize = 1 << 14;

#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Routing threads (default 2).
    pub threads: usize,
    /// Length of one measurement of one variant.
    pub trial: Duration,
    /// Measurements per variant; results are medians over rounds.
    pub rounds: usize,
    /// Statistics-thread interval in the `swdaq` variant (short, to include reader cost).
    pub stats_interval: Duration,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            threads: 2,
            trial: Duration::from_millis(500),
            rounds: 7,
            stats_interval: Duration::from_millis(100),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    Off,
    Swdaq,
    SwdaqBatched,
    SharedAtomics,
    Queue,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Off,
        Variant::Swdaq,
        Variant::SwdaqBatched,
        Variant::SharedAtomics,
        Variant::Queue,
    ];
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub variant: Variant,
    pub threads: usize,
    /// Median over rounds of all threads' messages per second.
    pub messages_per_second: f64,
    /// Median over rounds of the loss against `off` in the same round, in percent.
    pub overhead_pct: f64,
    /// Median wall time per message per thread.
    pub ns_per_message: f64,
    pub rounds: usize,
    /// The statistics side saw exactly the updates made, in every round (true for `off`).
    pub counts_exact: bool,
}

/// Runs every variant `config.rounds` times and returns one result per variant.
pub fn run(config: &BenchConfig) -> Vec<BenchResult> {
    let threads = config.threads.max(1);
    let rounds = config.rounds.max(1);
    // rates[round][variant]
    let mut rates = vec![[0.0f64; Variant::ALL.len()]; rounds];
    let mut exact = [true; Variant::ALL.len()];
    for (round, row) in rates.iter_mut().enumerate() {
        for k in 0..Variant::ALL.len() {
            let v = (round + k) % Variant::ALL.len();
            let t = trial(Variant::ALL[v], threads, config);
            row[v] = t.messages_per_second;
            exact[v] &= Variant::ALL[v] == Variant::Off || t.seen == t.expected;
        }
    }
    Variant::ALL
        .iter()
        .enumerate()
        .map(|(v, &variant)| {
            let mps = median(rates.iter().map(|r| r[v]).collect());
            BenchResult {
                variant,
                threads,
                messages_per_second: mps,
                overhead_pct: median(rates.iter().map(|r| 100.0 * (1.0 - r[v] / r[0])).collect()),
                ns_per_message: if mps > 0.0 {
                    1e9 * threads as f64 / mps
                } else {
                    f64::INFINITY
                },
                rounds,
                counts_exact: exact[v],
            }
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Where a routing thread's statistics go.
trait Sink: Send {
    /// Sum updates in locals and record once per batch instead of once per message.
    const PER_BATCH: bool = false;
    fn record(&self, k: usize, v: u64);
}

struct Off;
impl Sink for Off {
    #[inline]
    fn record(&self, _: usize, _: u64) {}
}

/// Handles in an array, as a thread would hold them in its own struct (no bounds checks).
struct Blocks([Counter; UPDATES_PER_MESSAGE]);
impl Sink for Blocks {
    #[inline]
    fn record(&self, k: usize, v: u64) {
        self.0[k].add(v);
    }
}

struct BatchedBlocks([Counter; UPDATES_PER_MESSAGE]);
impl Sink for BatchedBlocks {
    const PER_BATCH: bool = true;
    #[inline]
    fn record(&self, k: usize, v: u64) {
        self.0[k].add(v);
    }
}

struct Shared(Arc<[AtomicU64; UPDATES_PER_MESSAGE]>);
impl Sink for Shared {
    #[inline]
    fn record(&self, k: usize, v: u64) {
        self.0[k].fetch_add(v, Relaxed);
    }
}

struct Queue(Vec<Sender<u64>>);
impl Sink for Queue {
    #[inline]
    fn record(&self, k: usize, v: u64) {
        // The drain thread outlives the senders, so sending only fails if it panicked.
        let _ = self.0[k].send(v);
    }
}

type Totals = [u64; UPDATES_PER_MESSAGE];

/// One measurement of one variant.
struct Trial {
    messages_per_second: f64,
    /// Per-metric totals as seen by the statistics side.
    seen: Totals,
    /// Per-metric totals the routing threads recorded.
    expected: Totals,
}

fn trial(variant: Variant, threads: usize, config: &BenchConfig) -> Trial {
    let stop = AtomicBool::new(false);
    let drained = AtomicBool::new(false);
    let ready = Barrier::new(threads + 1);
    let registry = Registry::new();
    let shared = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let (senders, receivers): (Vec<Sender<u64>>, Vec<Receiver<u64>>) = (0..UPDATES_PER_MESSAGE)
        .map(|_| crossbeam_channel::bounded(QUEUE_CAPACITY))
        .unzip();
    let uses_blocks = matches!(variant, Variant::Swdaq | Variant::SwdaqBatched);
    let stats = uses_blocks
        .then(|| StatsThread::spawn(registry.clone(), config.stats_interval).ok())
        .flatten();
    let (elapsed, routed, queued) = std::thread::scope(|s| {
        let drain =
            (variant == Variant::Queue).then(|| s.spawn(|| drain_queues(&receivers, &drained)));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, ready) = (&stop, &ready);
                let sink: Box<dyn FnOnce() -> (u64, Totals) + Send> = match variant {
                    Variant::Off => Box::new(move || route(&Off, stop, ready, t)),
                    Variant::Swdaq | Variant::SwdaqBatched => {
                        let mut block = registry.block("bench", &[("worker", &t.to_string())]);
                        let counters: Vec<Counter> = (0..UPDATES_PER_MESSAGE)
                            .filter_map(|k| {
                                let name = format!("swdaq_bench_metric{k}_total");
                                block.counter(&name, "Bench counter").ok()
                            })
                            .collect();
                        // Names are valid, so this holds; if not, counts_exact reports it.
                        match <[Counter; UPDATES_PER_MESSAGE]>::try_from(counters) {
                            Ok(c) if variant == Variant::Swdaq => {
                                Box::new(move || route(&Blocks(c), stop, ready, t))
                            }
                            Ok(c) => Box::new(move || route(&BatchedBlocks(c), stop, ready, t)),
                            Err(_) => Box::new(move || route(&Off, stop, ready, t)),
                        }
                    }
                    Variant::SharedAtomics => {
                        let sink = Shared(shared.clone());
                        Box::new(move || route(&sink, stop, ready, t))
                    }
                    Variant::Queue => {
                        let sink = Queue(senders.clone());
                        Box::new(move || route(&sink, stop, ready, t))
                    }
                };
                s.spawn(sink)
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        std::thread::sleep(config.trial);
        stop.store(true, Relaxed);
        let elapsed = start.elapsed();
        let mut routed = (0u64, [0u64; UPDATES_PER_MESSAGE]);
        for (n, expected) in workers.into_iter().filter_map(|w| w.join().ok()) {
            routed.0 += n;
            routed.1.iter_mut().zip(expected).for_each(|(a, b)| *a += b);
        }
        drained.store(true, Relaxed);
        let queued = drain.and_then(|d| d.join().ok());
        (elapsed, routed, queued)
    });
    let seen = match variant {
        Variant::Off => [0; UPDATES_PER_MESSAGE],
        Variant::Swdaq | Variant::SwdaqBatched => {
            stats.map(|s| totals_of(&s.stop())).unwrap_or_default()
        }
        Variant::SharedAtomics => std::array::from_fn(|k| shared[k].load(Relaxed)),
        Variant::Queue => queued.unwrap_or_default(),
    };
    Trial {
        messages_per_second: routed.0 as f64 / elapsed.as_secs_f64(),
        seen,
        expected: routed.1,
    }
}

fn totals_of(s: &crate::Snapshot) -> [u64; UPDATES_PER_MESSAGE] {
    let mut out = [0; UPDATES_PER_MESSAGE];
    for f in &s.families {
        let k = f
            .name
            .strip_prefix("swdaq_bench_metric")
            .and_then(|r| r.strip_suffix("_total"))
            .and_then(|k| k.parse::<usize>().ok());
        if let Some(slot) = k.and_then(|k| out.get_mut(k)) {
            for series in &f.series {
                if let crate::Value::Counter { total, .. } = series.value {
                    *slot += total;
                }
            }
        }
    }
    out
}

fn drain_queues(receivers: &[Receiver<u64>], done: &AtomicBool) -> [u64; UPDATES_PER_MESSAGE] {
    let mut sums = [0u64; UPDATES_PER_MESSAGE];
    loop {
        // Read the flag first: once set, every sender has finished, so one more pass empties.
        let last = done.load(Relaxed);
        let mut got = false;
        for (sum, rx) in sums.iter_mut().zip(receivers) {
            for v in rx.try_iter() {
                *sum += v;
                got = true;
            }
        }
        if last {
            return sums;
        }
        if !got {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The value a message adds to metric `k`: its size for the byte counter, else one (message,
/// chunk, per-E-link counts and the like).
#[inline]
fn update(k: usize) -> u64 {
    if k == 1 { MESSAGE_BYTES as u64 } else { 1 }
}

/// The routing loop. Returns the number of messages routed and what it recorded per metric.
fn route<S: Sink>(sink: &S, stop: &AtomicBool, ready: &Barrier, seed: usize) -> (u64, Totals) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed as u64;
    let input: Vec<[u8; MESSAGE_BYTES]> = (0..RING)
        .map(|_| {
            std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
        })
        .collect();
    let mut output = vec![[0u8; MESSAGE_BYTES]; RING];
    let mut n = 0usize;
    let mut acc = 0u64;
    let mut local = [0u64; UPDATES_PER_MESSAGE];
    ready.wait();
    while !stop.load(Relaxed) {
        for i in n..n + BATCH {
            let slot = i % RING;
            let msg = black_box(&input[slot]);
            output[slot] = *msg;
            let cs = fnv1a(msg);
            acc ^= cs;
            for (k, l) in local.iter_mut().enumerate() {
                if S::PER_BATCH {
                    *l += update(k);
                } else {
                    sink.record(k, update(k));
                }
            }
        }
        if S::PER_BATCH {
            for (k, l) in local.iter_mut().enumerate() {
                sink.record(k, std::mem::take(l));
            }
        }
        n += BATCH;
        black_box(&mut output);
    }
    black_box(acc);
    (n as u64, std::array::from_fn(|k| n as u64 * update(k)))
}

fn fnv1a(msg: &[u8; MESSAGE_BYTES]) -> u64 {
    msg.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's statistics side sees exactly the updates the routing threads made.
    #[test]
    fn statistics_are_complete() {
        let config = BenchConfig {
            threads: 2,
            trial: Duration::from_millis(30),
            rounds: 1,
            stats_interval: Duration::from_millis(5),
        };
        for variant in Variant::ALL.into_iter().skip(1) {
            let t = trial(variant, 2, &config);
            assert!(t.messages_per_second > 0.0);
            assert!(t.expected[0] > 0);
            assert_eq!(t.seen, t.expected, "{variant:?}");
        }
    }

    #[test]
    fn run_reports_every_variant() {
        let results = run(&BenchConfig {
            threads: 1,
            trial: Duration::from_millis(10),
            rounds: 1,
            stats_interval: Duration::from_millis(5),
        });
        assert_eq!(results.len(), Variant::ALL.len());
        assert_eq!(results[0].variant, Variant::Off);
        assert_eq!(results[0].overhead_pct, 0.0);
        assert!(
            results
                .iter()
                .all(|r| r.messages_per_second > 0.0 && r.counts_exact)
        );
    }
}
