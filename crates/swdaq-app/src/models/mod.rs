//! The dataflow models, one folder each with the same files (`mod.rs`: the model and its
//! configuration's `Configured`; `config.rs`, `system.rs`, `live.rs`, `summary.rs`; `apps/`
//! where it runs as applications). A fourth model is a fourth folder and a line in [`MODELS`].

use crate::model::Model;

pub mod chain;
pub mod evb;
pub mod swrod;

/// Every model, the default one (no table of its own) included.
pub static MODELS: &[&dyn Model] = &[&chain::CHAIN, &evb::EVB, &swrod::SWROD];
