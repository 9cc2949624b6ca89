//! Registry, per-thread metric blocks and their single-writer handles.
//!
//! Every cell lives in 128-byte aligned storage owned by one block: a [`Slot`] per counter or
//! gauge, [`Line`]s per histogram. So two threads never write the same 64-byte cache line nor
//! an adjacent pair (which the L2 spatial prefetcher fetches together). Handles update with a
//! relaxed load and a relaxed store, which compile to plain memory instructions (on x86-64 a
//! single unlocked `incq [mem]`): no lock prefix, no fence. That is only correct with one
//! writer, which the handles enforce by being `Send` but neither `Sync` nor `Clone`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;

use crate::MonitorError;

const SLOTS_PER_LINE: usize = 16;

/// Largest number of finite bucket bounds a histogram may have (observe scans them linearly).
pub const MAX_BUCKETS: usize = 64;

/// Name prefixes the statistics thread uses for process health; blocks may not register them.
pub(crate) const RESERVED_PREFIXES: [&str; 2] = ["swdaq_thread_", "swdaq_process_"];

/// Label the registry adds to every series: the block's thread label.
pub const THREAD_LABEL: &str = "thread";

/// Two 64-byte cache lines: aligning to 128 bytes keeps the adjacent-line prefetcher from
/// pairing one thread's line with another's.
#[repr(align(128))]
pub(crate) struct Line([AtomicU64; SLOTS_PER_LINE]);

/// A counter or gauge cell, alone in its 128 bytes. One allocation per scalar, rather than
/// packing 16 into a [`Line`], lets the handle reach its value through one pointer, and the
/// compiler turns `add` into a single unlocked `incq`/`addq [mem]`. Packing needs an index
/// per update (or `unsafe` pointer projection): in `bench` it cost 5.6–7.0% against
/// 3.2–3.8% for this layout.
#[repr(align(128))]
pub(crate) struct Slot(AtomicU64);

impl Line {
    fn new() -> Self {
        Line(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// Makes a handle `Send` but not `Sync`: exactly one thread can write through it at a time.
type NotSync = PhantomData<Cell<()>>;

/// Kind of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Sorted `(name, value)` label pairs, including the `thread` label.
pub type Labels = Vec<(String, String)>;

pub(crate) struct FamilyDesc {
    pub help: String,
    pub kind: MetricKind,
    /// Finite upper bounds, histograms only.
    pub bounds: Arc<[f64]>,
}

enum Cells {
    /// A counter (u64) or gauge (f64 bits).
    Scalar(Arc<Slot>),
    /// `[sum bits, bucket 0..=n (last is +Inf), bound 0..n]`.
    Histogram(Arc<[Line]>, usize),
}

struct Entry {
    name: Arc<str>,
    labels: Arc<Labels>,
    cells: Cells,
}

#[derive(Default)]
struct State {
    families: BTreeMap<String, FamilyDesc>,
    entries: Vec<Entry>,
}

struct Inner {
    state: Mutex<State>,
    created: Instant,
}

/// All metric blocks of a process. Cheap to clone (an `Arc`); registration locks it, the hot
/// path never touches it.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Registry {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                created: Instant::now(),
            }),
        }
    }

    /// A new block for one data thread. `thread` becomes the `thread` label of every series of
    /// the block; `labels` (e.g. link, source id) are added to each series too. Labels are
    /// validated when the first metric is registered.
    pub fn block(&self, thread: &str, labels: &[(&str, &str)]) -> Block {
        let mut all: Labels = labels
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        all.push((THREAD_LABEL.to_owned(), thread.to_owned()));
        all.sort();
        Block {
            registry: self.clone(),
            labels: Arc::new(all),
        }
    }

    /// When the registry was created; snapshots report uptime from here.
    pub fn created(&self) -> Instant {
        self.inner.created
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while registering leaves the state consistent (pushes are last): keep going.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sum of every series of counter `name` (all threads' blocks) as it stands now; 0
    /// when there is no such counter. For a reader that wants one figure, not a snapshot: it
    /// takes the registration lock, which the hot path never touches.
    pub fn counter_total(&self, name: &str) -> u64 {
        let state = self.lock();
        if state.families.get(name).map(|d| d.kind) != Some(MetricKind::Counter) {
            return 0;
        }
        state
            .entries
            .iter()
            .filter(|e| &*e.name == name)
            .map(|e| match e.read(MetricKind::Counter) {
                RawValue::Counter(total) => total,
                _ => 0,
            })
            .fold(0, u64::wrapping_add)
    }

    /// Reads every series, merging identical `(name, labels)` series from different cells:
    /// counters and histograms are summed, and so are gauges (give threads distinguishing
    /// labels when a sum is not meaningful). Called by the statistics thread only.
    pub(crate) fn read(&self) -> Vec<FamilyReading> {
        let state = self.lock();
        let mut out: BTreeMap<&str, BTreeMap<&Labels, RawValue>> = BTreeMap::new();
        for e in &state.entries {
            let Some(desc) = state.families.get(&*e.name) else {
                continue;
            };
            let value = e.read(desc.kind);
            out.entry(&e.name)
                .or_default()
                .entry(&e.labels)
                .and_modify(|v| v.merge(&value))
                .or_insert(value);
        }
        out.into_iter()
            .filter_map(|(name, series)| {
                let desc = state.families.get(name)?;
                Some(FamilyReading {
                    name: name.to_owned(),
                    help: desc.help.clone(),
                    kind: desc.kind,
                    bounds: desc.bounds.clone(),
                    series: series.into_iter().map(|(l, v)| (l.clone(), v)).collect(),
                })
            })
            .collect()
    }
}

/// Values of one family as read by the statistics thread.
pub(crate) struct FamilyReading {
    pub name: String,
    pub help: String,
    pub kind: MetricKind,
    pub bounds: Arc<[f64]>,
    pub series: Vec<(Labels, RawValue)>,
}

#[derive(Clone, Debug)]
pub(crate) enum RawValue {
    Counter(u64),
    Gauge(f64),
    /// Per-bucket (non-cumulative) counts, the last one +Inf, and the sum.
    Histogram(Vec<u64>, f64),
}

impl RawValue {
    fn merge(&mut self, other: &RawValue) {
        match (self, other) {
            (RawValue::Counter(a), RawValue::Counter(b)) => *a = a.wrapping_add(*b),
            (RawValue::Gauge(a), RawValue::Gauge(b)) => *a += b,
            (RawValue::Histogram(a, sa), RawValue::Histogram(b, sb)) => {
                a.iter_mut()
                    .zip(b)
                    .for_each(|(x, y)| *x = x.wrapping_add(*y));
                *sa += sb;
            }
            // Kinds are fixed per name at registration, so mixed kinds cannot occur.
            _ => {}
        }
    }
}

/// The metrics of one data thread. Register everything before the hot loop, then move the
/// handles (not shared references) into the thread that writes them.
pub struct Block {
    registry: Registry,
    labels: Arc<Labels>,
}

impl Block {
    /// A monotonically increasing u64. The name must end in `_total`.
    pub fn counter(&mut self, name: &str, help: &str) -> Result<Counter, MonitorError> {
        if !name.ends_with("_total") {
            return Err(MonitorError::CounterSuffix(name.to_owned()));
        }
        Ok(Counter {
            slot: self.register_scalar(name, help, MetricKind::Counter)?,
            _not_sync: PhantomData,
        })
    }

    /// A value that goes up and down, stored as f64 (integers up to 2^53 are exact).
    pub fn gauge(&mut self, name: &str, help: &str) -> Result<Gauge, MonitorError> {
        Ok(Gauge {
            slot: self.register_scalar(name, help, MetricKind::Gauge)?,
            _not_sync: PhantomData,
        })
    }

    /// A histogram with fixed, finite, strictly increasing upper bounds (a +Inf bucket is
    /// implicit). Every block registering `name` must use the same bounds.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        bounds: &[f64],
    ) -> Result<Histogram, MonitorError> {
        let bad = |reason| {
            Err(MonitorError::InvalidBuckets {
                name: name.to_owned(),
                reason,
            })
        };
        if bounds.len() > MAX_BUCKETS {
            return bad("too many buckets");
        }
        if bounds.iter().any(|b| !b.is_finite()) {
            return bad("bounds must be finite (+Inf is implicit)");
        }
        if bounds.windows(2).any(|w| w[0] >= w[1]) {
            return bad("bounds must be strictly increasing");
        }
        let n = bounds.len();
        let slots = 1 + (n + 1) + n;
        let lines: Arc<[Line]> = (0..slots.div_ceil(SLOTS_PER_LINE))
            .map(|_| Line::new())
            .collect();
        for (i, b) in bounds.iter().enumerate() {
            let j = 2 + n + i;
            lines[j / SLOTS_PER_LINE].0[j % SLOTS_PER_LINE].store(b.to_bits(), Relaxed);
        }
        self.register(
            name,
            help,
            MetricKind::Histogram,
            bounds,
            Cells::Histogram(lines.clone(), n),
        )?;
        Ok(Histogram {
            lines,
            n,
            _not_sync: PhantomData,
        })
    }

    fn register_scalar(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricKind,
    ) -> Result<Arc<Slot>, MonitorError> {
        let slot = Arc::new(Slot(AtomicU64::new(0)));
        self.register(name, help, kind, &[], Cells::Scalar(slot.clone()))?;
        Ok(slot)
    }

    fn register(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricKind,
        bounds: &[f64],
        cells: Cells,
    ) -> Result<(), MonitorError> {
        validate_name(name)?;
        for (label, _) in self.labels.iter() {
            validate_label(label, kind)?;
        }
        if let Some(w) = self.labels.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(MonitorError::DuplicateLabel(w[0].0.clone()));
        }
        let mut state = self.registry.lock();
        match state.families.get(name) {
            Some(d) if d.kind != kind => {
                return Err(MonitorError::KindConflict {
                    name: name.to_owned(),
                    existing: d.kind.as_str(),
                    requested: kind.as_str(),
                });
            }
            Some(d) if *d.bounds != *bounds => {
                return Err(MonitorError::BucketConflict(name.to_owned()));
            }
            Some(_) => {}
            None => {
                state.families.insert(
                    name.to_owned(),
                    FamilyDesc {
                        help: help.to_owned(),
                        kind,
                        bounds: bounds.into(),
                    },
                );
            }
        }
        state.entries.push(Entry {
            name: name.into(),
            labels: self.labels.clone(),
            cells,
        });
        Ok(())
    }
}

impl Entry {
    fn read(&self, kind: MetricKind) -> RawValue {
        let slot = |lines: &[Line], i: usize| {
            lines[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE].load(Relaxed)
        };
        match &self.cells {
            Cells::Scalar(s) => {
                let bits = s.0.load(Relaxed);
                match kind {
                    MetricKind::Gauge => RawValue::Gauge(f64::from_bits(bits)),
                    _ => RawValue::Counter(bits),
                }
            }
            Cells::Histogram(lines, n) => RawValue::Histogram(
                (0..=*n).map(|i| slot(lines, 1 + i)).collect(),
                f64::from_bits(slot(lines, 0)),
            ),
        }
    }
}

fn validate_name(name: &str) -> Result<(), MonitorError> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !ok {
        return Err(MonitorError::InvalidName(name.to_owned()));
    }
    if RESERVED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err(MonitorError::ReservedName(name.to_owned()));
    }
    Ok(())
}

fn validate_label(label: &str, kind: MetricKind) -> Result<(), MonitorError> {
    let mut chars = label.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !label.starts_with("__")
        && !(kind == MetricKind::Histogram && label == "le");
    if ok {
        Ok(())
    } else {
        Err(MonitorError::InvalidLabel(label.to_owned()))
    }
}

/// A u64 counter written by one thread.
pub struct Counter {
    slot: Arc<Slot>,
    _not_sync: NotSync,
}

impl Counter {
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Load + store, not `fetch_add`: single writer, so no read-modify-write is needed.
    #[inline]
    pub fn add(&self, n: u64) {
        let v = &self.slot.0;
        v.store(v.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.slot.0.load(Relaxed)
    }
}

/// An f64 gauge written by one thread.
pub struct Gauge {
    slot: Arc<Slot>,
    _not_sync: NotSync,
}

impl Gauge {
    #[inline]
    pub fn set(&self, v: f64) {
        self.slot.0.store(v.to_bits(), Relaxed);
    }

    #[inline]
    pub fn add(&self, d: f64) {
        self.set(self.get() + d);
    }

    #[inline]
    pub fn get(&self) -> f64 {
        f64::from_bits(self.slot.0.load(Relaxed))
    }
}

/// A fixed-bucket histogram written by one thread.
pub struct Histogram {
    lines: Arc<[Line]>,
    /// Number of finite bounds.
    n: usize,
    _not_sync: NotSync,
}

impl Histogram {
    #[inline]
    fn slot(&self, i: usize) -> &AtomicU64 {
        &self.lines[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE]
    }

    /// Records `v`. NaN is ignored: it would poison the sum for the rest of the run.
    #[inline]
    pub fn observe(&self, v: f64) {
        if v.is_nan() {
            return;
        }
        // Bounds live in the block's own lines, so this scan touches no shared memory.
        let bucket = (0..self.n)
            .find(|&i| v <= f64::from_bits(self.slot(2 + self.n + i).load(Relaxed)))
            .unwrap_or(self.n);
        let count = self.slot(1 + bucket);
        count.store(count.load(Relaxed).wrapping_add(1), Relaxed);
        let sum = self.slot(0);
        sum.store((f64::from_bits(sum.load(Relaxed)) + v).to_bits(), Relaxed);
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        (0..=self.n).map(|i| self.slot(1 + i).load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family<'a>(r: &'a [FamilyReading], name: &str) -> &'a FamilyReading {
        r.iter().find(|f| f.name == name).expect("family present")
    }

    #[test]
    fn layout_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<Line>(), 128);
        assert_eq!(std::mem::align_of::<Line>(), 128);
        assert_eq!(std::mem::size_of::<Slot>(), 128);
        assert_eq!(std::mem::align_of::<Slot>(), 128);
    }

    #[test]
    fn counters_gauges_and_merging() {
        let reg = Registry::new();
        let mut a = reg.block("readout", &[("link", "0")]);
        let mut b = reg.block("readout", &[("link", "0")]);
        let ca = a.counter("x_total", "X").unwrap();
        let cb = b.counter("x_total", "X").unwrap();
        let g = a.gauge("g_ratio", "G").unwrap();
        ca.add(5);
        cb.inc();
        g.set(0.25);
        g.add(0.5);
        drop(a);
        drop(ca);
        let r = reg.read();
        let x = family(&r, "x_total");
        assert_eq!(x.series.len(), 1, "identical series merge");
        assert!(matches!(x.series[0].1, RawValue::Counter(6)));
        assert!(matches!(family(&r, "g_ratio").series[0].1, RawValue::Gauge(v) if v == 0.75));
        let labels = &x.series[0].0;
        assert_eq!(labels[0], ("link".to_owned(), "0".to_owned()));
        assert_eq!(labels[1], ("thread".to_owned(), "readout".to_owned()));
    }

    #[test]
    fn a_counter_s_total_sums_every_thread_s_series_and_ignores_other_kinds() {
        let reg = Registry::new();
        let a = reg.block("bu-0", &[]).counter("s_total", "S").unwrap();
        let b = reg.block("bu-1", &[]).counter("s_total", "S").unwrap();
        let g = reg.block("t", &[]).gauge("g_ratio", "G").unwrap();
        a.add(3);
        b.add(4);
        g.set(2.0);
        assert_eq!(reg.counter_total("s_total"), 7);
        assert_eq!(reg.counter_total("g_ratio"), 0, "a gauge is no counter");
        assert_eq!(reg.counter_total("none_total"), 0);
    }

    #[test]
    fn histogram_buckets() {
        let reg = Registry::new();
        let mut blk = reg.block("t", &[]);
        let h = blk.histogram("lat_seconds", "L", &[1.0, 2.0, 5.0]).unwrap();
        for v in [0.5, 1.0, 1.5, 3.0, 9.0, 9.0, f64::NAN] {
            h.observe(v);
        }
        assert_eq!(h.count(), 6);
        let r = reg.read();
        match &family(&r, "lat_seconds").series[0].1 {
            RawValue::Histogram(b, sum) => {
                assert_eq!(b, &vec![2, 1, 1, 2]);
                assert_eq!(*sum, 24.0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn many_scalars_span_lines() {
        let reg = Registry::new();
        let mut blk = reg.block("t", &[]);
        let cs: Vec<Counter> = (0..40)
            .map(|i| blk.counter(&format!("c{i}_total"), "c").unwrap())
            .collect();
        cs.iter().enumerate().for_each(|(i, c)| c.add(i as u64));
        let r = reg.read();
        for i in 0..40 {
            let f = family(&r, &format!("c{i}_total"));
            assert!(matches!(f.series[0].1, RawValue::Counter(v) if v == i as u64));
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let reg = Registry::new();
        let mut blk = reg.block("t", &[]);
        assert!(blk.counter("frames", "no suffix").is_err());
        assert!(blk.counter("9x_total", "bad").is_err());
        assert!(blk.gauge("swdaq_process_x", "reserved").is_err());
        blk.gauge("dup", "g").unwrap();
        assert!(blk.counter("dup", "kind").is_err());
        assert!(blk.histogram("h", "h", &[2.0, 1.0]).is_err());
        assert!(blk.histogram("h", "h", &[f64::INFINITY]).is_err());
        blk.histogram("h", "h", &[1.0]).unwrap();
        assert!(blk.histogram("h", "h", &[2.0]).is_err());
        let mut bad = reg.block("t", &[("bad-label", "v")]);
        assert!(bad.counter("y_total", "y").is_err());
        let mut le = reg.block("t", &[("le", "v")]);
        assert!(le.histogram("h2", "h", &[1.0]).is_err());
        let mut dup = reg.block("t", &[("thread", "again")]);
        assert!(dup.counter("z_total", "z").is_err());
    }
}
