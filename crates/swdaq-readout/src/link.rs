//! One link's ingest path: source -> latency-buffer slot -> checks -> publish -> observer
//! (the hit finder, on the same thread, reading the frame where it lies).

use crate::checks::{CheckCounts, ContinuityChecker, ErrorInterval, Verdict};
use crate::ring::{LatencyBuffer, Producer, SlotMeta};
use crate::source::{Batch, FrameSource, Poll};
use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use swdaq_format::FrameFormat;
use swdaq_format::SourceId;
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

/// How many bad intervals a link remembers; older ones fall off (and are counted).
pub const ERROR_LOG_CAPACITY: usize = 4096;

/// What the ingest thread shares with request servers.
pub struct LinkShared {
    pub source_id: SourceId,
    pub format: FrameFormat,
    pub buffer: LatencyBuffer,
    /// Touched only when a frame is bad and when a request is served: never per good frame.
    errors: Mutex<VecDeque<ErrorInterval>>,
}

impl LinkShared {
    /// A link whose latency buffer holds `seconds` of frames at the format's nominal rate.
    pub fn new(source_id: SourceId, format: FrameFormat, seconds: f64) -> io::Result<Self> {
        let frames = (seconds * format.frame_rate_hz()).ceil().max(2.0) as usize;
        Ok(Self {
            source_id,
            format,
            buffer: LatencyBuffer::new(frames, format.frame_size())?,
            errors: Mutex::new(VecDeque::new()),
        })
    }

    fn record_error(&self, interval: ErrorInterval) {
        let mut log = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() == ERROR_LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(interval);
    }

    /// The recorded bad intervals that overlap `[begin, end)`.
    pub fn errors_overlapping(&self, begin: u64, end: u64) -> Vec<ErrorInterval> {
        let log = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .filter(|e| e.begin < end && e.end > begin)
            .copied()
            .collect()
    }
}

/// Sees every published frame in place, on the ingest thread.
pub trait FrameObserver {
    fn observe(&mut self, meta: &SlotMeta, frame: &[u8]);

    /// Trigger primitives found so far, for the link's metrics.
    fn tps_found(&self) -> u64 {
        0
    }
}

/// No observer: raw-data readout only.
impl FrameObserver for () {
    fn observe(&mut self, _: &SlotMeta, _: &[u8]) {}
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestCounts {
    pub frames: u64,
    pub bytes: u64,
    /// Good frames not buffered because a reader pinned their slot for too long.
    pub dropped: u64,
}

/// How many frames the ingest loop counts between publishing to [`LinkMetrics`].
pub const PUBLISH_EVERY: u64 = 256;

/// A link's counters in the monitoring registry. The ingest loop keeps plain counts and
/// publishes the increments every [`PUBLISH_EVERY`] frames (and at the end), so monitoring
/// costs a handful of stores per batch of frames, not per frame.
pub struct LinkMetrics {
    counters: [Counter; 10],
    occupancy: Gauge,
    published: [u64; 10],
}

impl LinkMetrics {
    /// Registers the link's metrics in a block of the thread `thread` (e.g. `readout-0`).
    pub fn register(
        registry: &Registry,
        thread: &str,
        link: u32,
        source: SourceId,
    ) -> Result<Self, MonitorError> {
        let (link, source) = (link.to_string(), format!("0x{:08x}", source.id));
        let mut block = registry.block(thread, &[("link", &link), ("source_id", &source)]);
        let mut c = |name: &str, help: &str| block.counter(name, help);
        let counters = [
            c("swdaq_readout_frames_total", "Frames buffered")?,
            c("swdaq_readout_bytes_total", "Bytes buffered")?,
            c(
                "swdaq_readout_dropped_frames_total",
                "Good frames not buffered (slot pinned by a slow reader)",
            )?,
            c(
                "swdaq_readout_missing_frames_total",
                "Frames that never arrived (timestamp/sequence gaps)",
            )?,
            c(
                "swdaq_readout_timestamp_jumps_total",
                "Timestamp steps that are not whole frames",
            )?,
            c(
                "swdaq_readout_sequence_errors_total",
                "Sequence ids out of order",
            )?,
            c(
                "swdaq_readout_header_errors_total",
                "Frames whose header reports an error",
            )?,
            c(
                "swdaq_readout_bad_size_frames_total",
                "Frames of the wrong size, rejected",
            )?,
            c(
                "swdaq_tpg_trigger_primitives_total",
                "Trigger primitives found",
            )?,
            c(
                "swdaq_readout_decode_errors_total",
                "What the link's decoder could not make a good frame of (a detector's own board)",
            )?,
        ];
        let occupancy = block.gauge(
            "swdaq_readout_buffer_filled_ratio",
            "Latency buffer slots in use",
        )?;
        Ok(Self {
            counters,
            occupancy,
            published: [0; 10],
        })
    }

    /// Adds what was counted since the last call.
    pub fn publish(
        &mut self,
        ingest: &IngestCounts,
        checks: &CheckCounts,
        tps: u64,
        decode_errors: u64,
        buffer_filled: f64,
    ) {
        let now = [
            ingest.frames,
            ingest.bytes,
            ingest.dropped,
            checks.missing_frames,
            checks.timestamp_jumps,
            checks.sequence_errors,
            checks.header_errors,
            checks.bad_size,
            tps,
            decode_errors,
        ];
        for ((counter, last), value) in self.counters.iter().zip(&mut self.published).zip(now) {
            counter.add(value - *last);
            *last = value;
        }
        self.occupancy.set(buffer_filled);
    }
}

/// The ingest loop's state for one link.
pub struct Ingest<'a, S, O> {
    shared: &'a LinkShared,
    producer: Producer<'a>,
    source: S,
    observer: O,
    pub checker: ContinuityChecker,
    pub counts: IngestCounts,
    /// Where a frame goes when its slot is pinned: it must still leave the source.
    spill: Vec<u8>,
    /// Lengths of the frames of one batch (as many as the source's batch size).
    lens: Vec<usize>,
    /// The batch's frames that pass the checks, published once the batch is judged.
    kept: Vec<SlotMeta>,
    metrics: Option<LinkMetrics>,
}

impl<'a, S: FrameSource, O: FrameObserver> Ingest<'a, S, O> {
    /// `None` if the link already has an ingest loop (one producer per buffer).
    pub fn new(shared: &'a LinkShared, source: S, observer: O) -> Option<Self> {
        Some(Self {
            producer: shared.buffer.producer()?,
            checker: ContinuityChecker::new(shared.format),
            counts: IngestCounts::default(),
            spill: vec![0; shared.buffer.max_frame()],
            lens: vec![0; source.batch_size().max(1)],
            kept: Vec::with_capacity(source.batch_size()),
            metrics: None,
            shared,
            source,
            observer,
        })
    }

    /// Publishes this link's counts to the monitoring registry as the loop runs.
    pub fn with_metrics(mut self, metrics: LinkMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Pushes the counts to the metrics now (the loop does it every few hundred frames).
    pub fn publish_metrics(&mut self) {
        if let Some(m) = &mut self.metrics {
            let buffer = &self.shared.buffer;
            let filled =
                buffer.published().min(buffer.capacity() as u64) as f64 / buffer.capacity() as f64;
            m.publish(
                &self.counts,
                &self.checker.counts,
                self.observer.tps_found(),
                self.source.decode_errors(),
                filled,
            );
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn observer(&self) -> &O {
        &self.observer
    }

    pub fn observer_mut(&mut self) -> &mut O {
        &mut self.observer
    }

    /// Ends the loop (releasing the write end) and hands back the source and the observer.
    pub fn into_parts(self) -> (S, O) {
        (self.source, self.observer)
    }

    /// Moves the source's next frames (one, or a batch for a batching source) into the
    /// buffer. Frames land in consecutive slots; a rejected frame's slot is refilled by moving
    /// the batch's later frames down, a copy paid only when a frame is bad.
    pub fn step(&mut self) -> io::Result<Batch> {
        let Some(mut run) = self.producer.next_slots(self.lens.len()) else {
            return self.spill_one();
        };
        let batch = self.source.next_frames(&mut run, &mut self.lens)?;
        let Batch::Frames(received) = batch else {
            return Ok(batch);
        };
        self.kept.clear();
        for (i, &len) in self.lens[..received].iter().enumerate() {
            if let Some(meta) = judge(&mut self.checker, self.shared, run.slot(i), len) {
                run.move_frame(i, self.kept.len(), len);
                self.kept.push(meta);
            }
        }
        // The run's borrow of the producer ends here: the kept frames are published in order.
        for k in 0..self.kept.len() {
            self.publish_frame(self.kept[k]);
        }
        Ok(batch)
    }

    /// The next slot is pinned: the frame still leaves the source (into the spill buffer), is
    /// checked, and counts as dropped if it was good.
    fn spill_one(&mut self) -> io::Result<Batch> {
        let poll = self.source.next_frame(&mut self.spill)?;
        if let Poll::Frame(len) = poll
            && judge(&mut self.checker, self.shared, &self.spill, len).is_some()
        {
            self.counts.dropped += 1;
        }
        Ok(poll.into())
    }

    /// Publishes the frame in the next slot and lets the observer see it in place.
    fn publish_frame(&mut self, meta: SlotMeta) {
        self.producer.publish(meta);
        self.counts.frames += 1;
        self.counts.bytes += u64::from(meta.len);
        if let Some((meta, frame)) = self.producer.last_published() {
            self.observer.observe(&meta, frame);
        }
        if self.counts.frames.is_multiple_of(PUBLISH_EVERY) {
            self.publish_metrics();
        }
    }

    /// Runs until the source ends or `keep_going` says stop (checked every frame: one load).
    pub fn run(&mut self, keep_going: impl Fn() -> bool) -> io::Result<()> {
        let result = loop {
            if !keep_going() {
                break Ok(());
            }
            match self.step() {
                Ok(Batch::End) => break Ok(()),
                Ok(Batch::Idle) => std::hint::spin_loop(),
                Ok(Batch::Frames(_)) => {}
                Err(e) => break Err(e),
            }
        };
        self.publish_metrics();
        result
    }
}

/// Checks a frame of `len` bytes received into `slot` and records its bad interval, if any.
/// `Some` if it is to be kept. A source reporting more than the slot holds (an oversized
/// datagram) delivered no frame: it counts as bad size.
fn judge(
    checker: &mut ContinuityChecker,
    shared: &LinkShared,
    slot: &[u8],
    len: usize,
) -> Option<SlotMeta> {
    if len > slot.len() {
        checker.counts.bad_size += 1;
        return None;
    }
    let (verdict, interval) = checker.check(&slot[..len]);
    if let Some(interval) = interval {
        shared.record_error(interval);
    }
    let Verdict::Keep { header, flags, .. } = verdict else {
        return None;
    };
    Some(SlotMeta {
        timestamp: header.timestamp,
        len: len as u32,
        flags,
    })
}
