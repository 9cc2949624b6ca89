//! The SW ROD's multi-process tests share this: its run file and the events its HLT
//! applications left on disk, read back with `swdaq inspect --json`.

use crate::summary::{failure_of, u};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The HLT applications every test topology has.
pub const HLTS: [&str; 2] = ["hlt-0", "hlt-1"];

/// ROBs per card in every test: card `c` has ROBs `0x710000 + 2c` and `+ 1`.
pub const ROBS_PER_CARD: u32 = 2;

/// 2 FELIX cards x 2 ROBs x 8 e-links, L1 accepts at 2 kHz for `duration_s`, every event
/// stored, files of 1 MB under `dir/out`; `topology` holds the `[[topology.hosts]]` and
/// `[[topology.apps]]`. The HLT waits up to 10 s for a fragment: on a loaded machine the
/// emulated cards may run seconds behind the supervisor's L1A clock, which real front ends
/// never do, and a test of the dataflow must not fail on that.
pub fn config(dir: &Path, duration_s: f64, topology: &str) -> PathBuf {
    let t = format!(
        "duration_s = {duration_s}\nmetrics_addr = \"\"\n\
         [swrod]\noutput_dir = {:?}\nmax_file_mb = 1\ncards = 2\nrobs_per_card = {ROBS_PER_CARD}\n\
         l1a_rate_hz = 2000.0\nhlt_accept_every = 1\nhlt_retry_us = 2000\nhlt_give_up_ms = 10000\nsample_every = 7\n\
         [swrod.felix]\nelinks = 16\nchunk_min = 8\nchunk_max = 60\necr_every = 1000\nseed = 3\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{topology}",
        dir.join("out"),
    );
    let path = dir.join("swrod.toml");
    std::fs::write(&path, t).unwrap();
    path
}

/// One event as `swdaq inspect --json` reads it from a closed file.
#[derive(Debug)]
pub struct Event {
    pub hlt: String,
    pub robs: u64,
    pub missing_robs: Vec<u64>,
}

/// Every event in the closed files of HLT applications `hlts`, by global id; each file
/// checked by `swdaq inspect`. Files left being written (`.writing`) are not read.
pub fn events_in(dir: &Path, hlts: &[&str]) -> BTreeMap<u64, Vec<Event>> {
    let mut out: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
    for &hlt in hlts {
        let Ok(entries) = std::fs::read_dir(dir.join("out").join(hlt)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') || name.ends_with(".writing") {
                continue;
            }
            let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
                .args(["inspect", "--json"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(inspect.status.success(), "{}: {inspect:?}", path.display());
            let report: Value = serde_json::from_slice(&inspect.stdout).unwrap();
            for e in report["events"].as_array().unwrap() {
                out.entry(u(&e["global_id"])).or_default().push(Event {
                    hlt: hlt.into(),
                    robs: u(&e["robs"]),
                    missing_robs: e["missing_robs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(u)
                        .collect(),
                });
            }
        }
    }
    out
}

/// A run that lost nothing: every L1 accept given to the HLT is an event in exactly one
/// closed file of `hlt-0` or `hlt-1` with every ROB; both HLT applications stored a share;
/// the summary counts them all built and stored, its truth holds, none of `apps` failed.
pub fn assert_every_event_stored_once(dir: &Path, s: &Value, apps: &[&str]) {
    let l1as = u(&s["l1as_to_hlt"]);
    assert!(l1as > 1000, "{s}");
    assert_eq!(
        (
            u(&s["hlt"]["events"]),
            u(&s["hlt"]["complete_events"]),
            u(&s["stored_events"]),
            u(&s["lost"]),
        ),
        (l1as, l1as, l1as, 0),
        "{s}"
    );
    assert_eq!(s["truth"]["ok"], true, "{:#}", s["truth"]);
    for app in apps {
        assert!(failure_of(s, app).is_null(), "{app}: {s}");
    }
    let events = events_in(dir, &HLTS);
    assert_eq!(
        events.keys().copied().collect::<Vec<_>>(),
        (1..=l1as).collect::<Vec<_>>()
    );
    for (n, e) in &events {
        assert_eq!(e.len(), 1, "event {n} stored {} times", e.len());
        assert!(
            e[0].robs == 4 && e[0].missing_robs.is_empty(),
            "event {n}: {e:?}"
        );
    }
    for hlt in HLTS {
        assert!(
            events.values().any(|e| e[0].hlt == hlt),
            "{hlt} stored nothing"
        );
    }
}
