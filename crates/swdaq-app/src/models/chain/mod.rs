//! The DUNE-style streaming chain: emulated links, readout with hit finding, self-trigger,
//! record building, HDF5 storage; in one process or as applications.

pub mod apps;
pub mod config;
pub mod emulator;
pub mod inputs;
pub mod metrics;
pub mod pass_score;
pub mod readout;
pub mod recording;
pub mod roi_score;
pub mod sink;
pub mod summary;
pub mod system;
