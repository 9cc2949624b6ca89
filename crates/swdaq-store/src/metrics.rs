//! The writer thread's counters in the monitoring registry: what reached the files, from the
//! writer's own [`WriterCounts`] (published after every writer call, a few stores per record),
//! and how long each record took to write.

use crate::writer::WriterCounts;
use std::time::Duration;
use swdaq_monitor::{Counter, Gauge, Histogram, MonitorError, Registry};

/// Bounds of the write-time histogram in seconds: 10 µs (a small record) to 1 s (a flush of a
/// large file's metadata, a slow disk).
const WRITE_SECONDS_BOUNDS: [f64; 11] = [
    1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0,
];

pub struct StoreMetrics {
    records: Counter,
    record_bytes: Counter,
    file_bytes: Counter,
    files_opened: Counter,
    files_closed: Counter,
    flushes: Counter,
    not_written: Counter,
    write_seconds: Histogram,
    queue_filled: Gauge,
    published: WriterCounts,
}

impl StoreMetrics {
    /// Registers the writer's block (thread `store-writer`); the handles go to its thread.
    pub fn register(registry: &Registry) -> Result<Self, MonitorError> {
        let mut b = registry.block("store-writer", &[]);
        Ok(Self {
            records: b.counter(
                "swdaq_store_records_total",
                "Trigger records written to files",
            )?,
            record_bytes: b.counter(
                "swdaq_store_record_bytes_total",
                "Bytes of the trigger records written (headers and fragments)",
            )?,
            file_bytes: b.counter(
                "swdaq_store_written_bytes_total",
                "Growth of the files on disk as HDF5 writes them: records plus HDF5 metadata",
            )?,
            files_opened: b.counter("swdaq_store_files_opened_total", "Files opened")?,
            files_closed: b.counter(
                "swdaq_store_files_closed_total",
                "Files closed and renamed to their final name",
            )?,
            flushes: b.counter(
                "swdaq_store_flushes_total",
                "Flushes of the open file (crash safety, and at close)",
            )?,
            not_written: b.counter(
                "swdaq_store_records_not_written_total",
                "Records refused (malformed, duplicate) or not written after a storage error",
            )?,
            write_seconds: b.histogram(
                "swdaq_store_record_write_seconds",
                "Time to write one record, with the file opening, rollover or flush it caused",
                &WRITE_SECONDS_BOUNDS,
            )?,
            queue_filled: b.gauge(
                "swdaq_store_queue_filled_ratio",
                "Share of the writer's queue of records in use: a disk slower than the records fills it, then the trigger is inhibited",
            )?,
            published: WriterCounts::default(),
        })
    }

    /// How full the queue of records waiting for the writer is, 0 to 1.
    pub(crate) fn queue(&self, waiting: usize, capacity: usize) {
        self.queue_filled
            .set(waiting as f64 / capacity.max(1) as f64);
    }

    /// Adds what the writer did since the last call.
    pub(crate) fn publish(&mut self, now: WriterCounts) {
        let last = self.published;
        self.records.add(now.records - last.records);
        self.record_bytes.add(now.record_bytes - last.record_bytes);
        self.file_bytes.add(now.file_bytes - last.file_bytes);
        self.files_opened.add(now.files_opened - last.files_opened);
        self.files_closed.add(now.files_closed - last.files_closed);
        self.flushes.add(now.flushes - last.flushes);
        self.published = now;
    }

    pub(crate) fn wrote(&self, took: Duration) {
        self.write_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn not_written(&self) {
        self.not_written.inc();
    }
}
