//! The CMS-style event builder as applications on 127.0.0.1 (`swdaq run` with an `[evb]`
//! configuration and a topology of `evm`, `ru` and `bu` applications): every event built and
//! written, and the fault drills across processes — a builder unit SIGKILLed mid-run (its
//! unsettled events listed lost by number, every other event complete in a closed file) and
//! a readout unit SIGKILLed (later events incomplete, missing that readout unit; none
//! dropped). Files are read back with `swdaq inspect`. One system at a time (two cores).

mod common;
#[path = "common/launched.rs"]
mod launched;
use common::free_port;
use launched::{Run, signal};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const EVENTS_PER_FILE: u64 = 100;

/// 2 readout units x 4 FEDs x 1 KiB, 2 builder units, paced at 2 kHz for `duration_s`.
fn config(dir: &Path, duration_s: f64) -> PathBuf {
    let feds = |first: u32| {
        (first..first + 4)
            .map(|id| format!("{{ id = {id}, mean_bytes = 1024, spread_bytes = 128 }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut t = format!(
        "duration_s = {duration_s}\nmetrics_addr = \"\"\n\
         [evb]\ntrigger_rate_hz = 2000\nbuild_timeout = 1000\nevents_per_file = {EVENTS_PER_FILE}\n\
         min_free_bytes = 0\noutput = {:?}\nrus = [[{}], [{}]]\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n",
        dir.join("out"),
        feds(100),
        feds(200)
    );
    for (name, kind) in [
        ("evm", "evm"),
        ("ru-1", "ru"),
        ("bu-0", "bu"),
        ("bu-1", "bu"),
    ] {
        t += &format!(
            "[[topology.apps]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"tcp://127.0.0.1:{}\"\n",
            free_port()
        );
    }
    let path = dir.join("evb.toml");
    std::fs::write(&path, t).unwrap();
    path
}

/// One event as `swdaq inspect --json` reads it from a closed file.
#[derive(Debug)]
struct Event {
    bu: String,
    incomplete: bool,
    fed_count: u64,
}

/// Every event in the builder units' closed files, by number; each file checked by
/// `swdaq inspect` (CRC32C of every event). Unclosed `.tmp` files are not read.
fn events_in(dir: &Path) -> BTreeMap<u64, Vec<Event>> {
    let mut out: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
    for bu in ["bu-0", "bu-1"] {
        let Ok(entries) = std::fs::read_dir(dir.join("out").join(bu)) else {
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

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn failure_of<'a>(s: &'a Value, app: &str) -> &'a Value {
    &s["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == app)
        .unwrap_or_else(|| panic!("no {app} in {s}"))["failure"]
}

#[test]
fn evb_applications_build_every_event_complete_into_closed_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let s = Run::start(&config(dir.path(), 3.0)).summary();
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
    for app in ["evm", "ru-1", "bu-0", "bu-1"] {
        assert!(failure_of(&s, app).is_null(), "{app}: {s}");
    }
    let events = events_in(dir.path());
    assert_eq!(
        events.keys().copied().collect::<Vec<_>>(),
        (1..=triggered).collect::<Vec<_>>()
    );
    for (n, e) in &events {
        assert_eq!(e.len(), 1, "event {n} written {} times", e.len());
        assert!(!e[0].incomplete && e[0].fed_count == 8, "event {n}: {e:?}");
    }
    // Both builder units took their share.
    for bu in ["bu-0", "bu-1"] {
        assert!(events.values().any(|e| e[0].bu == bu), "{bu} wrote nothing");
    }
}

#[test]
fn a_killed_builder_unit_loses_its_unsettled_events_by_number_and_the_run_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&config(dir.path(), 6.0));
    let victim = run.pid_of("bu-1");
    std::thread::sleep(Duration::from_secs(3));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    assert_eq!(s["builder_units_gone"], serde_json::json!([1]), "{s}");
    assert!(
        failure_of(&s, "bu-1")
            .as_str()
            .unwrap()
            .contains("signal 9"),
        "{s}"
    );
    for app in ["evm", "ru-1", "bu-0"] {
        assert!(failure_of(&s, app).is_null(), "{app}: {s}");
    }
    let lost: Vec<u64> = s["lost_events"].as_array().unwrap().iter().map(u).collect();
    assert!(!lost.is_empty(), "{s}");
    let events = events_in(dir.path());
    let triggered = u(&s["triggered"]);
    // Every event triggered is in a closed file, complete, or listed lost.
    for n in 1..=triggered {
        match events.get(&n) {
            Some(e) => {
                assert_eq!(e.len(), 1, "event {n} written twice: {e:?}");
                assert!(!e[0].incomplete && e[0].fed_count == 8, "event {n}: {e:?}");
            }
            None => assert!(
                lost.binary_search(&n).is_ok(),
                "event {n} neither written nor lost"
            ),
        }
    }
    // Listed lost but in a closed file: only a file closed after the unit's last report.
    let both = lost.iter().filter(|n| events.contains_key(n)).count() as u64;
    assert!(
        both <= EVENTS_PER_FILE,
        "{both} events both written and lost"
    );
    // The survivor went on building after the kill.
    let last_of = |bu: &str| {
        events
            .iter()
            .rev()
            .find(|(_, e)| e[0].bu == bu)
            .map_or(0, |(&n, _)| n)
    };
    assert!(last_of("bu-0") > last_of("bu-1") + 1000, "{s}");
    assert_eq!(u(&s["incomplete"]), 0, "{s}");
}

#[test]
fn a_killed_readout_unit_makes_later_events_incomplete_naming_it_and_drops_none() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&config(dir.path(), 5.0));
    let victim = run.pid_of("ru-1");
    std::thread::sleep(Duration::from_secs(2));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    assert!(
        failure_of(&s, "ru-1")
            .as_str()
            .unwrap()
            .contains("signal 9"),
        "{s}"
    );
    let triggered = u(&s["triggered"]);
    let incomplete = u(&s["incomplete"]);
    assert!(incomplete > 0, "{s}");
    assert_eq!((u(&s["written"]), u(&s["lost"])), (triggered, 0), "{s}");
    // Every incomplete event misses readout unit 1, and only it.
    assert_eq!(
        s["missing_per_ru"],
        serde_json::json!([0, incomplete]),
        "{s}"
    );
    let events = events_in(dir.path());
    assert_eq!(events.len() as u64, triggered, "{s}");
    let first_incomplete = events
        .iter()
        .find(|(_, e)| e[0].incomplete)
        .map(|(&n, _)| n)
        .unwrap();
    for (n, e) in &events {
        assert_eq!(e.len(), 1, "event {n} written twice");
        let expected = if e[0].incomplete { 4 } else { 8 };
        assert_eq!(e[0].fed_count, expected, "event {n}: {e:?}");
        // Complete before the kill, then incomplete from some point on (a few events in
        // flight at the kill may still have had readout unit 1's part).
        if *n < first_incomplete {
            assert!(!e[0].incomplete);
        }
    }
    assert!(
        first_incomplete > 1000,
        "events before the kill are complete"
    );
}
