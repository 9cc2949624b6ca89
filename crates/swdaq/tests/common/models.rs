//! A configuration of every dataflow model, one process and applications, for tests that
//! drive each model alike (data safety drills, run control).
#![allow(dead_code)]

use super::{loopback_apps, loopback_topology_apps};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    Chain,
    ChainApps,
    Evb,
    EvbApps,
    Swrod,
    SwrodApps,
}

pub const EVERY_MODEL: [Model; 6] = [
    Model::Chain,
    Model::ChainApps,
    Model::Evb,
    Model::EvbApps,
    Model::Swrod,
    Model::SwrodApps,
];

/// One FED list of `n` FEDs of about `bytes` each, ids from `first`.
pub fn feds(first: u32, n: u32, bytes: u32) -> String {
    let feds: Vec<String> = (first..first + n)
        .map(|id| format!("{{ id = {id}, mean_bytes = {bytes}, spread_bytes = 64 }}"))
        .collect();
    format!("[{}]", feds.join(", "))
}

/// How long a run of [`config`] takes data, and how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// A second or two of data.
    Short,
    /// Longer, with more data: enough to fill a small disk.
    Flood,
    /// Until stopped (run control), at a modest rate.
    UntilStopped,
}

/// A run of `model` writing to `out` as run `run` (0: the next free one), for `load`.
pub fn config(dir: &Path, model: Model, out: &Path, run: u32, load: Load) -> PathBuf {
    let flood = load == Load::Flood;
    let until_stopped = load == Load::UntilStopped;
    let text = match model {
        Model::Chain | Model::ChainApps => {
            let (duration, rate) = match load {
                Load::Flood => (6.0, 200.0),
                Load::Short => (1.0, 10.0),
                Load::UntilStopped => (0.0, 10.0),
            };
            let mut t = format!(
                "[run]\nnumber = {run}\nduration_s = {duration}\nmetrics_addr = \"\"\noutput_dir = {out:?}\n\
                 [emulator]\nlinks = 2\ntemplate_s = 0.05\n[readout]\nbuffer_s = 1.0\n\
                 [trigger.periodic]\nenabled = true\nrate_hz = {rate}\n\
                 [storage]\nmin_free_mb = 0\n"
            );
            if model == Model::ChainApps {
                t += "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\n";
                t += &loopback_apps(1);
            }
            t
        }
        Model::Evb | Model::EvbApps => {
            let (seconds, bytes) = match load {
                Load::Flood => (4.0, 2048),
                Load::Short => (1.0, 512),
                Load::UntilStopped => (0.0, 512),
            };
            let mut t = format!(
                "duration_s = {seconds}\nmetrics_addr = \"\"\n[evb]\nrun = {run}\noutput = {out:?}\n\
                 min_free_bytes = 0\nevents_per_file = 100\n\
                 trigger_rate_hz = 10000\nbuild_timeout = 1000\nbuilder_units = 2\n\
                 rus = [{}, {}]\n",
                feds(100, 4, bytes),
                feds(200, 4, bytes)
            );
            if load == Load::UntilStopped {
                // Run control's pause (1.5 s in the tests) outlasts both time-outs: a pause
                // that let readout units read ahead, or builder units wait, would show.
                t += "ru_hold_timeout = 1000\n";
            }
            if model == Model::EvbApps {
                t += "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n";
                t += &loopback_topology_apps(&[
                    ("evm", "evm", ""),
                    ("ru-1", "ru", ""),
                    ("bu-0", "bu", ""),
                    ("bu-1", "bu", ""),
                ]);
            }
            t
        }
        Model::Swrod | Model::SwrodApps => {
            let l1as = if flood { 400_000 } else { 2000 };
            // Until stopped: paced, no L1 accept limit. Applications follow the L1A clock:
            // they always have a rate.
            let (rate, l1as) = match (until_stopped, model, flood) {
                (true, _, _) => (2000.0, 0),
                (false, Model::Swrod, _) => (0.0, l1as),
                (false, _, true) => (5000.0, l1as),
                (false, _, false) => (2000.0, l1as),
            };
            let mut t = format!(
                "duration_s = 0\nmetrics_addr = \"\"\n[swrod]\nrun_number = {run}\noutput_dir = {out:?}\n\
                 max_file_mb = 1\nmin_free_mb = 0\ncards = 1\nrobs_per_card = 2\nl1a_rate_hz = {rate:?}\nmax_l1as = {l1as}\n\
                 hlt_accept_every = 1\n[swrod.felix]\nelinks = 16\n"
            );
            if model == Model::SwrodApps {
                // A "not yet" asked again is a network round trip: not every 200 us.
                t = t.replace(
                    "hlt_accept_every = 1\n",
                    "hlt_accept_every = 1\nhlt_retry_us = 2000\n",
                );
                t += "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n";
                t += &loopback_topology_apps(&[
                    ("swrod-0", "swrod", "cards = [0]"),
                    ("hltsv", "hltsv", ""),
                    ("hlt-0", "hlt", ""),
                    ("hlt-1", "hlt", ""),
                ]);
            }
            t
        }
    };
    let path = dir.join(format!("{model:?}-{run}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}
