//! One link's ingest path: source -> latency-buffer slot -> checks -> publish -> observer
//! (the hit finder, on the same thread, reading the frame where it lies).

use crate::checks::{ContinuityChecker, ErrorInterval, Verdict};
use crate::link_format::LinkFormat;
use crate::metrics::{LinkMetrics, PUBLISH_EVERY};
use crate::ring::{LatencyBuffer, Producer, SlotMeta};
use crate::source::{FrameSource, Poll};
use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use swdaq_format::SourceId;

/// How many bad intervals a link remembers; older ones fall off (and are counted).
pub const ERROR_LOG_CAPACITY: usize = 4096;

/// What the ingest thread shares with request servers.
pub struct LinkShared {
    pub source_id: SourceId,
    pub format: LinkFormat,
    pub buffer: LatencyBuffer,
    /// Touched only when a frame is bad and when a request is served: never per good frame.
    errors: Mutex<VecDeque<ErrorInterval>>,
}

impl LinkShared {
    /// A link whose latency buffer holds `seconds` of frames at the format's nominal rate.
    pub fn new(source_id: SourceId, format: LinkFormat, seconds: f64) -> io::Result<Self> {
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
                filled,
            );
        }
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

    /// Moves one frame from the source into the buffer.
    pub fn step(&mut self) -> io::Result<Poll> {
        let (slot, spilled) = match self.producer.next_slot() {
            Some(slot) => (slot, false),
            None => (&mut self.spill[..], true),
        };
        let poll = self.source.next_frame(slot)?;
        let Poll::Frame(len) = poll else {
            return Ok(poll);
        };
        if len > slot.len() {
            // A source reporting more than the slot holds (an oversized datagram): not a frame.
            self.checker.counts.bad_size += 1;
            return Ok(poll);
        }
        let (verdict, interval) = self.checker.check(&slot[..len]);
        if let Some(interval) = interval {
            self.shared.record_error(interval);
        }
        let Verdict::Keep { header, flags, .. } = verdict else {
            return Ok(poll);
        };
        if spilled {
            self.counts.dropped += 1;
            return Ok(poll);
        }
        let meta = SlotMeta {
            timestamp: header.timestamp,
            len: len as u32,
            flags,
        };
        self.producer.publish(meta);
        self.counts.frames += 1;
        self.counts.bytes += len as u64;
        if let Some((meta, frame)) = self.producer.last_published() {
            self.observer.observe(&meta, frame);
        }
        if self.counts.frames.is_multiple_of(PUBLISH_EVERY) {
            self.publish_metrics();
        }
        Ok(poll)
    }

    /// Runs until the source ends or `keep_going` says stop (checked every frame: one load).
    pub fn run(&mut self, keep_going: impl Fn() -> bool) -> io::Result<()> {
        let result = loop {
            if !keep_going() {
                break Ok(());
            }
            match self.step() {
                Ok(Poll::End) => break Ok(()),
                Ok(Poll::Idle) => std::hint::spin_loop(),
                Ok(Poll::Frame(_)) => {}
                Err(e) => break Err(e),
            }
        };
        self.publish_metrics();
        result
    }
}
