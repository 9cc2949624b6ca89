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
// The flush schedule every model's writer shares.
pub use swdaq_format::run_files::FlushPolicy;
pub(crate) use swdaq_format::run_files::Unflushed;

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
}
