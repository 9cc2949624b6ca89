//! What runs a model whatever the model: the traits a model implements to be run (`model`),
//! stop requests and signals, the `[topology]` section, applications and their launcher.

pub mod app;
mod child;
pub mod dqm;
pub mod dqm_stream;
pub mod launch;
pub mod live_feed;
pub mod memory;
pub mod model;
pub mod monitoring;
pub mod outcome;
pub mod stdio;
pub mod steering;
pub mod stop;
pub mod supervise;
pub mod topology;
