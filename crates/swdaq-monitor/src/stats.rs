//! The statistics thread: reads every block serially, computes deltas and rates, and keeps
//! the latest [`Snapshot`] for exporters.
//!
//! Reading serially from one thread is the paper's Implementation III: data threads never
//! wait on, or write to, anything the reader owns. Readers of snapshots take a mutex that only
//! the statistics thread and exporters use.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::block::{Labels, MetricKind, RawValue, Registry};
use crate::{MonitorError, proc};

/// Shortest interval the statistics thread accepts; shorter ones are raised to it.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Everything known at one instant.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Seconds since the registry was created.
    pub uptime_seconds: f64,
    /// Seconds since the previous snapshot (0 for the first): the denominator of every rate.
    pub interval_seconds: f64,
    pub families: Vec<Family>,
    pub process: ProcessHealth,
}

impl Snapshot {
    /// Every series of metric `name`.
    pub fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Series> {
        self.families
            .iter()
            .filter(move |f| f.name == name)
            .flat_map(|f| &f.series)
    }

    /// The summed rate (per second, over the last interval) of every series of counter
    /// `name`; 0 when there is no such counter.
    pub fn counter_rate(&self, name: &str) -> f64 {
        self.series(name)
            .map(|series| match series.value {
                Value::Counter {
                    rate_per_second, ..
                } => rate_per_second,
                _ => 0.0,
            })
            .sum()
    }
}

/// All series of one metric name, across blocks.
#[derive(Clone, Debug, Serialize)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: MetricKind,
    pub series: Vec<Series>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    #[serde(flatten)]
    pub value: Value,
}

#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Value {
    Counter {
        total: u64,
        /// Increase since the previous snapshot.
        delta: u64,
        rate_per_second: f64,
        /// Seconds since a snapshot last saw it rise (0: in this one; never risen: since the
        /// collector's first snapshot), so a reader tells a stopped source from a slow one.
        idle_seconds: f64,
    },
    Gauge {
        value: f64,
    },
    Histogram {
        buckets: Vec<Bucket>,
        count: u64,
        sum: f64,
        /// Observations since the previous snapshot, and their rate.
        delta: u64,
        rate_per_second: f64,
    },
}

/// Cumulative count of observations `<= le` (the +Inf bucket is `count`).
#[derive(Clone, Debug, Serialize)]
pub struct Bucket {
    pub le: f64,
    pub count: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessHealth {
    pub resident_memory_bytes: Option<u64>,
    pub threads: Vec<ThreadHealth>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ThreadHealth {
    pub tid: u32,
    pub name: String,
    pub cpu_seconds_total: f64,
    /// CPU seconds per wall second over the interval (1.0 = one core busy).
    pub cpu_usage_ratio: f64,
    pub last_cpu: u32,
}

/// Turns registry readings into snapshots with deltas. [`StatsThread`] runs one; use it
/// directly for synchronous collection (tests, one-shot dumps).
pub struct Collector {
    registry: Registry,
    last: Option<Instant>,
    /// Each series' last total, and when a snapshot last saw it rise.
    prev_counts: HashMap<(String, Labels), (u64, Instant)>,
    prev_cpu: HashMap<u32, u64>,
}

impl Collector {
    pub fn new(registry: Registry) -> Self {
        Collector {
            registry,
            last: None,
            prev_counts: HashMap::new(),
            prev_cpu: HashMap::new(),
        }
    }

    pub fn collect(&mut self) -> Snapshot {
        let now = Instant::now();
        let dt = self.last.map_or(0.0, |t| (now - t).as_secs_f64());
        self.last = Some(now);
        let rate = |d: u64| if dt > 0.0 { d as f64 / dt } else { 0.0 };
        let mut counts = HashMap::new();
        let families = self
            .registry
            .read()
            .into_iter()
            .map(|f| {
                let series = f
                    .series
                    .into_iter()
                    .map(|(labels, raw)| {
                        // The increase since the last snapshot, and when it last rose.
                        let mut delta_of = |total: u64| {
                            let key = (f.name.clone(), labels.clone());
                            let (prev, rose) =
                                self.prev_counts.get(&key).copied().unwrap_or((0, now));
                            let delta = total.saturating_sub(prev);
                            let rose = if delta > 0 { now } else { rose };
                            counts.insert(key, (total, rose));
                            (delta, rose)
                        };
                        let value = match raw {
                            RawValue::Counter(total) => {
                                let (delta, rose) = delta_of(total);
                                Value::Counter {
                                    total,
                                    delta,
                                    rate_per_second: rate(delta),
                                    idle_seconds: (now - rose).as_secs_f64(),
                                }
                            }
                            RawValue::Gauge(value) => Value::Gauge { value },
                            RawValue::Histogram(per_bucket, sum) => {
                                let mut acc = 0u64;
                                let cumulative: Vec<u64> = per_bucket
                                    .iter()
                                    .map(|c| {
                                        acc = acc.wrapping_add(*c);
                                        acc
                                    })
                                    .collect();
                                let (delta, _) = delta_of(acc);
                                Value::Histogram {
                                    buckets: f
                                        .bounds
                                        .iter()
                                        .zip(&cumulative)
                                        .map(|(&le, &count)| Bucket { le, count })
                                        .collect(),
                                    count: acc,
                                    sum,
                                    delta,
                                    rate_per_second: rate(delta),
                                }
                            }
                        };
                        Series {
                            labels: labels.into_iter().collect(),
                            value,
                        }
                    })
                    .collect();
                Family {
                    name: f.name,
                    help: f.help,
                    kind: f.kind,
                    series,
                }
            })
            .collect();
        self.prev_counts = counts;
        Snapshot {
            uptime_seconds: (now - self.registry.created()).as_secs_f64(),
            interval_seconds: dt,
            families,
            process: self.process_health(dt),
        }
    }

    fn process_health(&mut self, dt: f64) -> ProcessHealth {
        let stats = proc::read_threads();
        let threads = stats
            .iter()
            .map(|t| {
                let prev = self.prev_cpu.get(&t.tid).copied();
                let used = t.cpu_ticks.saturating_sub(prev.unwrap_or(t.cpu_ticks));
                ThreadHealth {
                    tid: t.tid,
                    name: t.name.clone(),
                    cpu_seconds_total: t.cpu_ticks as f64 / proc::USER_HZ,
                    cpu_usage_ratio: if dt > 0.0 {
                        used as f64 / proc::USER_HZ / dt
                    } else {
                        0.0
                    },
                    last_cpu: t.last_cpu,
                }
            })
            .collect();
        self.prev_cpu = stats.iter().map(|t| (t.tid, t.cpu_ticks)).collect();
        ProcessHealth {
            resident_memory_bytes: proc::resident_memory_bytes(),
            threads,
        }
    }
}

/// The latest snapshot, shared between the statistics thread and exporters.
#[derive(Clone, Default)]
pub struct SnapshotCell(Arc<Mutex<Arc<Snapshot>>>);

impl SnapshotCell {
    pub fn get(&self) -> Arc<Snapshot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }
}

/// Handle to the running statistics thread.
pub struct StatsThread {
    cell: SnapshotCell,
    stop: mpsc::Sender<()>,
    handle: JoinHandle<()>,
}

impl StatsThread {
    /// Starts collecting every `interval` (at least [`MIN_INTERVAL`]). A first snapshot is
    /// taken before this returns, so exporters never serve an empty page.
    pub fn spawn(registry: Registry, interval: Duration) -> Result<Self, MonitorError> {
        Self::spawn_with_hook(registry, interval, |_| {})
    }

    /// Like [`spawn`](Self::spawn), calling `hook` with each snapshot on the statistics
    /// thread, e.g. to log [`summary_line`](crate::summary_line).
    pub fn spawn_with_hook(
        registry: Registry,
        interval: Duration,
        mut hook: impl FnMut(&Snapshot) + Send + 'static,
    ) -> Result<Self, MonitorError> {
        let interval = interval.max(MIN_INTERVAL);
        let cell = SnapshotCell::default();
        let mut collector = Collector::new(registry);
        cell.set(collector.collect());
        let (stop, stopped) = mpsc::channel();
        let out = cell.clone();
        let handle = std::thread::Builder::new()
            .name("swdaq-stats".into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                loop {
                    let wait = next.saturating_duration_since(Instant::now());
                    let last =
                        !matches!(stopped.recv_timeout(wait), Err(RecvTimeoutError::Timeout));
                    // Fixed schedule, so rates are not skewed by the time a collection takes.
                    next += interval;
                    let snapshot = collector.collect();
                    hook(&snapshot);
                    out.set(snapshot);
                    if last {
                        break;
                    }
                }
            })
            .map_err(MonitorError::Spawn)?;
        Ok(StatsThread { cell, stop, handle })
    }

    /// The latest snapshot.
    pub fn latest(&self) -> Arc<Snapshot> {
        self.cell.get()
    }

    /// A cloneable reader of the latest snapshot, for exporters such as the HTTP endpoint.
    pub fn cell(&self) -> SnapshotCell {
        self.cell.clone()
    }

    /// Stops the thread after one final collection and returns that snapshot, which includes
    /// every update made before the call by threads that have finished.
    pub fn stop(self) -> Arc<Snapshot> {
        // The thread may only be gone if the hook panicked; the last snapshot is still there.
        let _ = self.stop.send(());
        let _ = self.handle.join();
        self.cell.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter_total(s: &Snapshot, name: &str, thread: &str) -> u64 {
        s.families
            .iter()
            .filter(|f| f.name == name)
            .flat_map(|f| &f.series)
            .filter(|x| x.labels.get("thread").is_some_and(|t| t == thread))
            .map(|x| match x.value {
                Value::Counter { total, .. } => total,
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn counter_rate_sums_a_counters_series_and_nothing_else() {
        let counter = |rate_per_second| Series {
            labels: BTreeMap::new(),
            value: Value::Counter {
                total: 0,
                delta: 0,
                rate_per_second,
                idle_seconds: 0.0,
            },
        };
        let family = |name: &str, kind, series| Family {
            name: name.into(),
            help: String::new(),
            kind,
            series,
        };
        let snapshot = Snapshot {
            uptime_seconds: 1.0,
            interval_seconds: 1.0,
            families: vec![
                family(
                    "a_total",
                    MetricKind::Counter,
                    vec![counter(1.5), counter(2.0)],
                ),
                family("b_total", MetricKind::Counter, vec![counter(7.0)]),
                family(
                    "c",
                    MetricKind::Gauge,
                    vec![Series {
                        labels: BTreeMap::new(),
                        value: Value::Gauge { value: 9.0 },
                    }],
                ),
            ],
            process: ProcessHealth::default(),
        };
        assert_eq!(snapshot.counter_rate("a_total"), 3.5);
        assert_eq!(snapshot.counter_rate("c"), 0.0);
        assert_eq!(snapshot.counter_rate("missing_total"), 0.0);
    }

    #[test]
    fn final_flush_counts_every_event_of_every_thread() {
        let registry = Registry::new();
        let stats = StatsThread::spawn(registry.clone(), Duration::from_millis(2)).unwrap();
        let per_thread = [100_000u64, 250_000, 1, 0];
        std::thread::scope(|s| {
            for (i, &n) in per_thread.iter().enumerate() {
                let mut block = registry.block(&format!("worker-{i}"), &[]);
                let frames = block.counter("frames_total", "Frames").unwrap();
                let bytes = block.counter("bytes_total", "Bytes").unwrap();
                s.spawn(move || {
                    for _ in 0..n {
                        frames.inc();
                        bytes.add(40);
                    }
                });
            }
        });
        let last = stats.stop();
        for (i, &n) in per_thread.iter().enumerate() {
            let t = format!("worker-{i}");
            assert_eq!(counter_total(&last, "frames_total", &t), n);
            assert_eq!(counter_total(&last, "bytes_total", &t), 40 * n);
        }
    }

    #[test]
    fn deltas_and_rates() {
        let registry = Registry::new();
        let mut block = registry.block("t", &[]);
        let c = block.counter("c_total", "c").unwrap();
        let h = block.histogram("h_seconds", "h", &[1.0]).unwrap();
        let mut col = Collector::new(registry);
        c.add(10);
        h.observe(0.5);
        let first = col.collect();
        assert_eq!(first.interval_seconds, 0.0);
        c.add(5);
        h.observe(2.0);
        std::thread::sleep(Duration::from_millis(5));
        let second = col.collect();
        assert!(second.interval_seconds > 0.0);
        for f in &second.families {
            match &f.series[0].value {
                Value::Counter {
                    total,
                    delta,
                    rate_per_second,
                    idle_seconds,
                } => {
                    assert_eq!((*total, *delta), (15, 5));
                    assert!((rate_per_second - 5.0 / second.interval_seconds).abs() < 1e-9);
                    assert_eq!(*idle_seconds, 0.0, "it rose in this interval");
                }
                Value::Histogram {
                    buckets,
                    count,
                    sum,
                    delta,
                    ..
                } => {
                    assert_eq!(buckets.len(), 1);
                    assert_eq!((buckets[0].le, buckets[0].count), (1.0, 1));
                    assert_eq!((*count, *sum, *delta), (2, 2.5, 1));
                }
                Value::Gauge { .. } => panic!("no gauges registered"),
            }
        }
        // Not rising: the time since the snapshot that last saw it rise.
        std::thread::sleep(Duration::from_millis(20));
        let third = col.collect();
        let idle = third.families.iter().find_map(|f| match f.series[0].value {
            Value::Counter { idle_seconds, .. } => Some(idle_seconds),
            _ => None,
        });
        assert!(idle.unwrap() >= 0.02, "{idle:?}");
    }
}
