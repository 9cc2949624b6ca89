//! swdaq's application logic as a library: what `swdaq run` starts and how it stops (`run`:
//! the whole chain in one process; `evb_run`: the CMS-style event builder in one process,
//! for configurations with an `[evb]` section; `swrod_run`: the ATLAS-style SW ROD with its
//! HLT and storage, for configurations with a `[swrod]` section), run control over HTTP
//! between runs (`control`: `swdaq serve`, `swdaq ctl`), and truth matching for hit-finding
//! quality.
//! The `swdaq` binary only parses the command line and calls in here; `error_report` is how
//! it prints a failure.

pub mod apps;
pub mod control;
pub mod error_report;
pub mod evb_run;
pub mod run;
pub mod swrod_run;
pub mod truth_match;
