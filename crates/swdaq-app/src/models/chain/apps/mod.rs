//! The chain's applications, one process each (see `crate::runtime::app`).

pub mod builder;
pub mod dfo;
pub mod readout;
pub mod trigger;
