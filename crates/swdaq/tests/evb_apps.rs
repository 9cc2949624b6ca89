//! The CMS-style event builder as applications on 127.0.0.1 (`swdaq run` with an `[evb]`
//! configuration and a topology of `evm`, `ru` and `bu` applications): every event built and
//! written, and the fault drills across processes — a builder unit SIGKILLed mid-run (the
//! events it was given and left in no closed file listed lost by number, exactly; every other
//! event complete in one closed file; the files it left open named in the summary) and
//! a readout unit SIGKILLed (later events incomplete, missing that readout unit; none
//! dropped). Files are read back with `swdaq inspect`. One system at a time (two cores).

mod common;
#[path = "common/evb.rs"]
mod evb;
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
#[path = "common/summary.rs"]
mod summary;
use common::loopback_topology_apps;
use evb::{BUILDER_UNITS, assert_every_event_written_once, events_in};
use launched::{Run, signal};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use summary::{assert_each_once_or_lost, assert_killed_alone, u};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// 2 readout units (`evm`, `ru-1`) and 2 builder units on 127.0.0.1, for `duration_s`.
fn config(dir: &Path, duration_s: f64) -> PathBuf {
    let apps = loopback_topology_apps(&[
        ("evm", "evm", ""),
        ("ru-1", "ru", ""),
        ("bu-0", "bu", ""),
        ("bu-1", "bu", ""),
    ]);
    evb::config(dir, duration_s, 2, &apps)
}

#[test]
fn evb_applications_build_every_event_complete_into_closed_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let s = Run::start(&config(dir.path(), 3.0)).summary();
    assert_every_event_written_once(dir.path(), &s, &["evm", "ru-1", "bu-0", "bu-1"], 8);
}

#[test]
fn a_killed_builder_unit_loses_exactly_the_events_in_no_closed_file_and_the_run_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&config(dir.path(), 6.0));
    let victim = run.pid_of("bu-1");
    std::thread::sleep(Duration::from_secs(3));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    assert_eq!(s["builder_units_gone"], serde_json::json!([1]), "{s}");
    assert_killed_alone(&s, "bu-1", &["evm", "ru-1", "bu-0"]);
    let lost: Vec<u64> = s["lost_events"].as_array().unwrap().iter().map(u).collect();
    assert!(!lost.is_empty(), "{s}");
    let events = events_in(dir.path(), &BUILDER_UNITS);
    let triggered = u(&s["triggered"]);
    // Every event triggered is either in exactly one closed file, complete, or listed lost:
    // the summary read back what the dead unit closed after its last report.
    assert_each_once_or_lost(
        triggered,
        &lost,
        |n| events.get(&n).map_or(0, Vec::len),
        |n| {
            let e = &events[&n][0];
            assert!(!e.incomplete && e.fed_count == 8, "event {n}: {e:?}");
        },
    );
    assert_eq!(
        (u(&s["written"]), u(&s["lost"])),
        (events.len() as u64, triggered - events.len() as u64),
        "{s}"
    );
    // The files the dead unit left open are named, and none of their events counted.
    let mut open: Vec<String> = std::fs::read_dir(dir.path().join("out/bu-1/run000001"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    open.sort();
    assert!(!open.is_empty());
    let read_back = &s["read_back"];
    assert_eq!(
        (
            &read_back[0]["bu"],
            &read_back[0]["reported"],
            &read_back[0]["partial_files"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(false),
            &serde_json::json!(open)
        ),
        "{s}"
    );
    assert_eq!(read_back.as_array().unwrap().len(), 1, "{s}");
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
    assert_killed_alone(&s, "ru-1", &[]);
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
    let events = events_in(dir.path(), &BUILDER_UNITS);
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
