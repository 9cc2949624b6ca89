//! Data-quality monitoring (#37): what the detector's data look like, as histograms a shifter
//! reads, and each histogram judged against a reference run's by a stated test
//! ([`compare`]). [`frd`] fills the event builder's histograms from its FRD files (`swdaq dqm`
//! offline); the other models' histograms, online filling from sampled data and the console's
//! page are to come.

pub mod compare;
pub mod frd;
pub mod hist;
mod set;

pub use compare::{Check, Quality, Test, Verdict, compare};
pub use hist::{Axis, Hist1, HistError};
pub use set::{HistSet, SetError};
