//! The dataflow models, one folder each.

pub mod chain;
pub mod evb;
pub mod swrod;
