//! Data-quality monitoring (#37): what the detector's data look like, as histograms a shifter
//! reads, and each histogram judged against a reference run's by a stated test
//! ([`compare`]). [`chain`] fills the chain's histograms from its trigger records, [`frd`] the
//! event builder's from its FRD files and [`swrod`] the SW ROD's from its EventStorage files
//! (`swdaq dqm`, offline), each through one function per item (an event, a record) that
//! running models use on their samples too: a data thread's [`sample::Sampler`] hands every
//! N-th item to the [`online`] monitoring thread without ever waiting, which fills the run's
//! set, judges it against a reference run's, exports the qualities and publishes the set for
//! `swdaq serve`'s console to draw.

pub mod chain;
pub mod checks;
pub mod compare;
pub mod frd;
pub mod hdf5_file;
pub mod hist;
pub mod online;
pub mod sample;
mod set;
pub mod swrod;

pub use checks::{Checks, NamedCheck};
pub use compare::{Check, Method, Quality, Test, Verdict, compare, compare_counts};
pub use hist::{Axis, Hist1, HistError, HistKind};
pub use set::{HistSet, SetError, is_per_source};
