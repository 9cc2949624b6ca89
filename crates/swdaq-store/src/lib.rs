//! Storage of trigger records in HDF5 files that any physicist opens with h5py, laid out like
//! DUNE's `hdf5libs` files ([`layout`]); a synchronous [`writer::RecordFileWriter`] and a
//! [`reader::RecordFileReader`].
//!
//! HDF5 comes from `hdf5-metno` built from its bundled sources (static), so a fresh machine
//! needs only a C compiler and CMake; no system HDF5.

pub mod bench;
pub mod error;
pub mod inspect;
pub mod layout;
pub mod reader;
pub mod thread;
pub mod writer;

pub use error::StoreError;
pub use reader::{FileAttributes, RecordFileReader};
pub use thread::{StorageThread, StoreReport};
pub use writer::{RecordFileWriter, StoreConfig};
