//! Storage of trigger records in HDF5 files that any physicist opens with h5py, laid out like
//! DUNE's `hdf5libs` files ([`layout`]): a synchronous [`RecordFileWriter`] (`.writing` then
//! rename, rollover, free-space check, flushes that keep the open file readable after a kill:
//! [`durable`]), the [`StorageThread`] that runs one behind a bounded queue and counts what it
//! writes ([`StoreMetrics`]), a [`RecordFileReader`], and what the app's commands show:
//! [`inspect`] (listing and decoded fragments), [`display`] (event display PNG) and [`bench`]
//! (`swdaq bench store`).
//! [`sample`] makes a record with known content for tests and demonstrations.
//!
//! # HDF5 library
//!
//! `hdf5-metno` 0.11 (the maintained fork of `hdf5-rust`) with its `static` feature builds
//! HDF5 1.14.6 from the sources bundled in `hdf5-metno-src` 0.9 with CMake and links it
//! statically: a fresh machine needs a C compiler and CMake 3.18 or newer (newer `hdf5-metno`
//! releases want CMake 3.26, more than the machines' 3.25), no system HDF5, and the binary
//! carries its HDF5. The C build takes about 5 minutes on a shared 2-core machine, once per
//! target directory and profile. Alternatives weighed: `hdf5-sys` against a system library
//! (not on a fresh machine), writing HDF5 ourselves (a large, subtle format), or
//! `netcdf`/`zarr` (not what DUNE's tools read).
//!
//! # Throughput
//!
//! Fragments are contiguous, unfiltered datasets, so HDF5 hands each to one `write(2)`; the
//! cost on top is ~50 us of metadata per dataset (`H5Dcreate`). Measured on tmpfs with
//! 8 x 1 MiB fragments per record: ~2.1 GB/s, 0.75 x `write(2)` of the same bytes; with
//! 64 x 64 KiB fragments ~0.65 GB/s (0.26 x). Newer file-format bounds and a larger metadata
//! block measured no faster, so files keep HDF5's defaults, like hdf5libs.

mod attributes;
pub mod bench;
pub mod display;
pub mod durable;
pub mod error;
pub mod inspect;
pub mod layout;
pub mod metrics;
pub mod reader;
pub mod sample;
pub mod thread;
pub mod writer;

pub use error::StoreError;
pub use metrics::StoreMetrics;
pub use reader::{AttributeProblem, FileAttributes, RecordFileReader, RecordHeaders, RecordId};
pub use thread::{StorageThread, StoreReport};
pub use writer::{RecordFileWriter, StoreConfig, WriterCounts};
