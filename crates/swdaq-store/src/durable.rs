//! Crash safety of the open `.writing` file: when it is flushed, and how HDF5 is set up so that
//! a file killed at any moment still reads as it was at its last flush.
//!
//! # What HDF5 writes when
//!
//! Raw data (fragment bytes) goes to the file at once, into space allocated after the last
//! flush. Metadata (object headers, group B-tree nodes and local heaps, the superblock) lives in
//! HDF5's metadata cache and reaches the file only when the cache evicts an entry or at
//! `H5Fflush`. Without flushes the file on disk is the superblock and fragment bytes with
//! nothing pointing at them: a kill leaves it unreadable ("bad object header version number",
//! the test `without_flushes_the_open_file_is_not_readable`).
//!
//! # The design: flush points, and no evictions between them
//!
//! The writer calls `H5Fflush` (hdf5-metno `File::flush`) right after a file is created, after
//! `flush_every_records` records, and at most `flush_interval_ms` after the oldest unflushed
//! record (the writer thread wakes up for it when idle). A flush writes every dirty entry and
//! the superblock's end-of-allocation, so the file then reads exactly as written so far.
//! Between flushes the metadata cache is told never to evict (`builder`): an evicted entry,
//! e.g. the root group's symbol-table node naming a new record whose object header is still
//! cached, would land on disk and a reader would list a record it cannot open. With no
//! evictions the metadata on disk is always the last flush's, and the raw data written since
//! lies in space that metadata does not reference. Measured (2026-11-23): with evictions left
//! on, a file of 3000 small records copied after every record never listed an unflushed
//! record (the cache grew instead of evicting), so turning them off is a bound on what the
//! cache may write, not a fix of an observed failure. Its cost is memory: the cache keeps the
//! open file's metadata, about 7 kB per record of six datasets (the writes of one flush, seen
//! with strace), until the file closes.
//!
//! A kill during a flush can leave some of its entries written and others not. The kill tests
//! (`tests/crash.rs`: SIGKILL at random points of writes and flushes, records read back and
//! compared; `tests/python/test_crash.py`: the same read by h5py and `swdaq inspect`) found no
//! flushed record lost in 180 kills (Rust runs of 60 and 100, the Python run of 20; flushes
//! every 4 records), nor in 20 kills of files of up to 600 records with evictions left on.
//!
//! A flush hands the bytes to the kernel, which is all a killed process needs. For a power cut
//! or a kernel crash, `sync_to_disk` (on by default) also waits at each flush point and at
//! close until the file's bytes are on the device (`fdatasync` through a plain file handle on
//! the same file: it syncs the file, whichever descriptor wrote it), and syncs the directory
//! after a file is created or renamed so that its name survives too. The wait is the price:
//! `swdaq bench store` measures it (BENCHMARKS.md).
//!
//! Flushing costs little with large fragments and much with many small datasets per record,
//! growing with the file's metadata (`swdaq bench store`, BENCHMARKS.md): hence the default
//! of 64 records or 1 s rather than every record.
//!
//! # Rejected
//!
//! - HDF5 SWMR (`H5Fstart_swmr_write`): a SWMR writer may only append to existing chunked
//!   datasets and must not create groups, datasets or attributes (HDF5 SWMR user's guide),
//!   while every record is a new group with new datasets; it also needs the 1.10 file format
//!   (`libver latest`), which HDF5 1.8 readers cannot open.
//! - A small closed file per flush period, or an append-only sidecar: either changes the
//!   hdf5libs-like layout (one file of many records) that readers rely on, or needs its own
//!   reader and recovery step instead of reading the `.writing` file as it lies.

use crate::error::{Result, StoreError};
use hdf5::file::{CacheDecreaseMode, CacheIncreaseMode, FlashIncreaseMode, MetadataCacheConfig};
use std::path::Path;
use std::time::{Duration, Instant};

/// When the open file is flushed: `interval` after its oldest unflushed record, or once
/// `every_records` wait, whichever comes first. Neither: only at close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    interval: Option<Duration>,
    every_records: Option<u64>,
}

impl FlushPolicy {
    /// Zero turns a bound off.
    pub fn new(interval_ms: u64, every_records: u64) -> Self {
        Self {
            interval: (interval_ms > 0).then(|| Duration::from_millis(interval_ms)),
            every_records: (every_records > 0).then_some(every_records),
        }
    }

    /// Whether files are flushed while open at all.
    pub fn enabled(&self) -> bool {
        self.interval.is_some() || self.every_records.is_some()
    }
}

/// The records written since the last flush.
#[derive(Debug, Default)]
pub(crate) struct Unflushed {
    records: u64,
    oldest: Option<Instant>,
}

impl Unflushed {
    pub fn add(&mut self, now: Instant) {
        self.records += 1;
        self.oldest.get_or_insert(now);
    }

    /// When the oldest unflushed record must be flushed by.
    pub fn deadline(&self, policy: &FlushPolicy) -> Option<Instant> {
        Some(self.oldest? + policy.interval?)
    }

    pub fn due(&self, policy: &FlushPolicy, now: Instant) -> bool {
        policy.every_records.is_some_and(|n| self.records >= n)
            || self.deadline(policy).is_some_and(|d| now >= d)
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// How a crash-safe file is opened: HDF5's metadata cache never evicts (writes) an entry between
/// flushes, so the metadata on disk is only ever the last flush's.
pub(crate) fn builder(policy: &FlushPolicy) -> hdf5::FileBuilder {
    let mut builder = hdf5::File::with_options();
    if policy.enabled() {
        // Evictions can only be turned off with automatic cache resizing off.
        builder.fapl().mdc_config(&MetadataCacheConfig {
            evictions_enabled: false,
            incr_mode: CacheIncreaseMode::Off,
            flash_incr_mode: FlashIncreaseMode::Off,
            decr_mode: CacheDecreaseMode::Off,
            ..MetadataCacheConfig::default()
        });
    }
    builder
}

/// Waits until `file`'s bytes (written through any descriptor) are on the storage device.
pub(crate) fn sync_data(file: &std::fs::File, path: &Path) -> Result<()> {
    file.sync_data().map_err(|source| StoreError::Io {
        what: "cannot sync to disk",
        path: path.to_path_buf(),
        source,
    })
}

/// Waits until `dir`'s entries (a created or renamed file's name) are on the storage device.
pub(crate) fn sync_directory(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::Io {
            what: "cannot sync to disk",
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_is_due_by_count_or_by_age() {
        let t0 = Instant::now();
        let policy = FlushPolicy::new(1000, 3);
        let mut pending = Unflushed::default();
        assert!(!pending.due(&policy, t0 + Duration::from_secs(5)));
        pending.add(t0);
        pending.add(t0 + Duration::from_millis(600));
        assert_eq!(pending.deadline(&policy), Some(t0 + Duration::from_secs(1)));
        assert!(!pending.due(&policy, t0 + Duration::from_millis(999)));
        assert!(pending.due(&policy, t0 + Duration::from_millis(1000)));
        pending.add(t0 + Duration::from_millis(700));
        assert!(pending.due(&policy, t0 + Duration::from_millis(700)));
        pending.clear();
        assert_eq!(pending.deadline(&policy), None);
    }

    #[test]
    fn a_sync_that_fails_names_the_path_and_why() {
        let missing = Path::new("/nonexistent/swdaq-durable");
        let e = sync_directory(missing).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("cannot sync to disk /nonexistent/swdaq-durable"),
            "{text}"
        );
        assert!(text.contains("No such file"), "{text}");
    }

    #[test]
    fn zero_turns_a_bound_off() {
        let t0 = Instant::now();
        let mut pending = Unflushed::default();
        (0..1000).for_each(|_| pending.add(t0));
        let late = t0 + Duration::from_secs(3600);
        assert!(!pending.due(&FlushPolicy::new(0, 0), late));
        assert!(!FlushPolicy::new(0, 0).enabled());
        assert!(!pending.due(&FlushPolicy::new(0, 2000), late));
        assert!(pending.due(&FlushPolicy::new(0, 1000), t0));
        assert!(pending.due(&FlushPolicy::new(1, 0), late));
    }
}
