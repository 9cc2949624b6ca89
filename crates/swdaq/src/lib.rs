//! The parts of the `swdaq` application that tests and other programs use as a library: the
//! whole-chain runner behind `swdaq run`, and truth matching for hit-finding quality.

pub mod run;
pub mod truth_match;
