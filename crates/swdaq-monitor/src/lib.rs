//! Monitoring that costs nothing: per-thread metric blocks read by one statistics thread.
//!
//! # Why this design
//!
//! The ATLAS FELIX study (Leventis, Schumacher, Dönszelmann) measured what statistics cost a
//! multi-threaded router of 40-byte messages:
//!
//! * every update pushed to a concurrent queue drained by a statistics thread: ~85% of the
//!   throughput lost;
//! * one shared set of atomics updated by all threads: no better, since every update fights
//!   for the same cache lines;
//! * a set of atomics per thread, read serially by one statistics thread: ~20% lost, the rest
//!   being lock-prefixed read-modify-writes and lines shared between threads.
//!
//! swdaq goes one step further so the cost is below measurement noise:
//!
//! * each data thread owns a [`Block`] whose cells are 128-byte aligned and written by no
//!   other thread (128, not 64, so the adjacent-line prefetcher does not pair lines either);
//! * handles ([`Counter`], [`Gauge`], [`Histogram`]) update with a relaxed load and a relaxed
//!   store — on x86-64 `Counter::inc` is one unlocked `incq [mem]`, no fence. That is only
//!   sound with a single writer, which the handles guarantee by being `Send` but not `Sync`
//!   or `Clone`;
//! * the [`StatsThread`] reads every block serially at its interval, computes deltas and
//!   rates, and publishes a [`Snapshot`]. Exporters ([`MetricsServer`], [`render_prometheus`],
//!   [`summary_line`]) only ever read snapshots, so a scrape never touches the data threads.
//!
//! The registry keeps its own reference to each block's storage, so the counts of a thread
//! that has ended stay visible and keep adding up.
//!
//! # Use from a data thread (readout, hit finding)
//!
//! ```
//! use std::time::Duration;
//! use swdaq_monitor::{Registry, StatsThread};
//!
//! # fn main() -> Result<(), swdaq_monitor::MonitorError> {
//! let registry = Registry::new(); // one per process, cloned into whoever registers
//! let stats = StatsThread::spawn(registry.clone(), Duration::from_secs(1))?;
//!
//! // Register before the hot loop (this may lock and allocate) ...
//! let mut block = registry.block("readout-0", &[("link", "0"), ("source_id", "0x00000001")]);
//! let frames = block.counter("swdaq_readout_frames_total", "Frames received")?;
//! let occupancy = block.gauge("swdaq_readout_buffer_occupancy_ratio", "Latency buffer fill")?;
//! let latency = block.histogram(
//!     "swdaq_readout_request_latency_seconds",
//!     "Data request latency",
//!     &[1e-5, 1e-4, 1e-3, 1e-2],
//! )?;
//!
//! // ... then move the handles into the thread that writes them.
//! std::thread::spawn(move || {
//!     for _ in 0..1000 {
//!         frames.inc();
//!         occupancy.set(0.25);
//!         latency.observe(3e-4);
//!     }
//! })
//! .join()
//! .unwrap();
//!
//! let last = stats.stop(); // final collection: includes everything counted above
//! println!("{}", swdaq_monitor::summary_line(&last, 5));
//! # Ok(())
//! # }
//! ```
//!
//! Rules of thumb:
//!
//! * one block per data thread, created with a thread label (`readout-0`, `tpg-3`) and the
//!   labels that identify what the thread serves; all handles of a block go to that thread;
//! * names follow Prometheus conventions: base units in the name (`_seconds`, `_bytes`,
//!   `_ratio`), counters end in `_total`; the registry rejects invalid names and labels, a name
//!   reused with another kind or other buckets, and the reserved `swdaq_thread_*` /
//!   `swdaq_process_*` names that carry process health;
//! * series with the same name and labels (e.g. two blocks with the same labels) are summed;
//! * counters are `u64`; gauges are `f64` (exact for integers up to 2^53), because most
//!   gauges are ratios, seconds or bytes and one type keeps the API small;
//! * count per burst where the data arrives in bursts: `frames.add(n)` once per received
//!   batch instead of `frames.inc()` per frame. In [`bench`] (40-byte messages, ~50 ns of
//!   work each, 10 counters) per-message updates cost ~3–4% and per-256-message updates
//!   ~0.5%, against ~80% for shared atomics and ~90% for a queue.
//!
//! Process health (per-thread CPU time and usage, last core, resident memory) comes from
//! `/proc` on each collection; see [`proc`].

pub mod bench;
mod block;
mod expose;
mod http;
pub mod proc;
mod stats;

pub use block::{
    Block, Counter, Gauge, Histogram, Labels, MAX_BUCKETS, MetricKind, Registry, THREAD_LABEL,
};
pub use expose::{
    CONTENT_TYPE, escape_help, escape_label_value, fmt_f64, process_families, render_prometheus,
    summary_line,
};
pub use http::{DEFAULT_ADDR, MetricsServer};
pub use stats::{
    Bucket, Collector, Family, MIN_INTERVAL, ProcessHealth, Series, Snapshot, SnapshotCell,
    StatsThread, ThreadHealth, Value,
};

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("invalid metric name {0:?}: must match [a-zA-Z_:][a-zA-Z0-9_:]*")]
    InvalidName(String),
    #[error("counter name {0:?} must end in _total")]
    CounterSuffix(String),
    #[error("metric name {0:?} is reserved for process health (swdaq_thread_*, swdaq_process_*)")]
    ReservedName(String),
    #[error(
        "invalid label name {0:?}: must match [a-zA-Z_][a-zA-Z0-9_]*, not start with __, and not be `le` on a histogram"
    )]
    InvalidLabel(String),
    #[error("label {0:?} given twice (`thread` is set from the block's thread label)")]
    DuplicateLabel(String),
    #[error("metric {name:?} is already registered as a {existing}, not a {requested}")]
    KindConflict {
        name: String,
        existing: &'static str,
        requested: &'static str,
    },
    #[error("histogram {name:?}: {reason}")]
    InvalidBuckets { name: String, reason: &'static str },
    #[error("histogram {0:?} is already registered with other buckets")]
    BucketConflict(String),
    #[error("cannot bind the metrics endpoint to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the metrics endpoint: {0}")]
    Http(String),
    #[error("cannot spawn a monitoring thread: {0}")]
    Spawn(std::io::Error),
}
