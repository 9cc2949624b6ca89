//! swdaq's application logic as a library: the dataflow models (`models`: the DUNE-style
//! chain, the CMS-style event builder, the ATLAS-style SW ROD), what runs them whatever the
//! model (`runtime`: the traits every model implements, stop requests, monitoring,
//! applications and their launcher), `swdaq run`
//! (`run_command`), run control over HTTP between runs (`control`: `swdaq serve`,
//! `swdaq ctl`). Truth scoring of hit finding is `swdaq_tpg::quality`'s.
//! The `swdaq` binary only parses the command line and calls in here; `error_report` is how
//! it prints a failure.

pub mod app_command;
pub mod control;
pub mod error_report;
pub mod file_recorder;
pub mod live;
pub mod models;
pub mod run_command;
pub mod run_record;
pub mod run_section;
pub mod runtime;
pub mod stored;
pub mod transfer_section;
pub mod transition_hooks;
