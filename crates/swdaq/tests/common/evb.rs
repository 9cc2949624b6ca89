//! The event builder's multi-process tests share this: its run file and what its builder
//! units left on disk, read back with `swdaq inspect --json`.

use crate::summary::{failure_of, u};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const EVENTS_PER_FILE: u64 = 100;

/// The builder-unit applications every test topology has.
pub const BUILDER_UNITS: [&str; 2] = ["bu-0", "bu-1"];

/// Readout unit `ru`'s 4 FEDs of about 1 KiB (ids `100 * (ru + 1)` on).
fn feds(ru: u32) -> String {
    let first = 100 * (ru + 1);
    (first..first + 4)
        .map(|id| format!("{{ id = {id}, mean_bytes = 1024, spread_bytes = 128 }}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `readout_units` readout units x 4 FEDs x 1 KiB, paced at 2 kHz for `duration_s`, files
/// under `dir/out`; `topology` holds the `[[topology.hosts]]` and `[[topology.apps]]`.
pub fn config(dir: &Path, duration_s: f64, readout_units: u32, topology: &str) -> PathBuf {
    let rus: Vec<String> = (0..readout_units)
        .map(|ru| format!("[{}]", feds(ru)))
        .collect();
    let t = format!(
        "duration_s = {duration_s}\nmetrics_addr = \"\"\n\
         [evb]\ntrigger_rate_hz = 2000\nbuild_timeout = 1000\nevents_per_file = {EVENTS_PER_FILE}\n\
         min_free_bytes = 0\noutput = {:?}\nrus = [{}]\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{topology}",
        dir.join("out"),
        rus.join(", ")
    );
    let path = dir.join("evb.toml");
    std::fs::write(&path, t).unwrap();
    path
}

/// One event as `swdaq inspect --json` reads it from a closed file.
#[derive(Debug)]
pub struct Event {
    pub bu: String,
    pub incomplete: bool,
    pub fed_count: u64,
}

/// Every event in the closed files of builder units `bus`, by number; each file checked by
/// `swdaq inspect` (CRC32C of every event). Unclosed `.tmp` files are not read.
pub fn events_in(dir: &Path, bus: &[&str]) -> BTreeMap<u64, Vec<Event>> {
    let mut out: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
    for &bu in bus {
        let Ok(entries) = std::fs::read_dir(dir.join("out").join(bu).join("run000001")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "raw") {
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
                assert!(e["crc_ok"].as_bool().unwrap(), "{e}");
                out.entry(e["event"].as_u64().unwrap())
                    .or_default()
                    .push(Event {
                        bu: bu.into(),
                        incomplete: e["incomplete"].as_bool().unwrap(),
                        fed_count: e["fed_count"].as_u64().unwrap(),
                    });
            }
        }
    }
    out
}

/// A run that lost nothing: every event triggered is in exactly one closed file of `bu-0` or
/// `bu-1`, complete with its `feds` FED fragments, CRC32C good; both builder units wrote a
/// share; the summary counts them all built and written, and none of `apps` failed.
pub fn assert_every_event_written_once(dir: &Path, s: &Value, apps: &[&str], feds: u64) {
    let triggered = u(&s["triggered"]);
    assert!(triggered > 1000, "{s}");
    assert_eq!(
        (
            u(&s["built"]),
            u(&s["written"]),
            u(&s["incomplete"]),
            u(&s["lost"])
        ),
        (triggered, triggered, 0, 0),
        "{s}"
    );
    for app in apps {
        assert!(failure_of(s, app).is_null(), "{app}: {s}");
    }
    let events = events_in(dir, &BUILDER_UNITS);
    assert_eq!(
        events.keys().copied().collect::<Vec<_>>(),
        (1..=triggered).collect::<Vec<_>>()
    );
    for (n, e) in &events {
        assert_eq!(e.len(), 1, "event {n} written {} times", e.len());
        assert!(
            !e[0].incomplete && e[0].fed_count == feds,
            "event {n}: {e:?}"
        );
    }
    for bu in BUILDER_UNITS {
        assert!(events.values().any(|e| e[0].bu == bu), "{bu} wrote nothing");
    }
}
