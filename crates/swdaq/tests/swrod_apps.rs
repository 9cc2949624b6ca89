//! The ATLAS-style SW ROD as applications on 127.0.0.1 (`swdaq run` with a `[swrod]`
//! configuration and a topology of `swrod`, `hltsv` and `hlt` applications): every L1 accept
//! built and stored once, and the fault drills across processes — an HLT application
//! SIGKILLed mid-run (the events it was given and left in no closed file listed lost by
//! number, exactly; every other event complete in one closed file; the files it left open
//! named), a `swrod` application SIGKILLed (its ROBs named missing in every later event; the
//! run goes on, no event dropped), and garbage or another protocol version on an inbox
//! (refused and counted) before a SIGTERM that stops everything cleanly. Files are read back
//! with `swdaq inspect`. One system at a time (two cores).

mod common;
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
#[path = "common/summary.rs"]
mod summary;
#[path = "common/swrod.rs"]
mod swrod;
use common::loopback_swrod_apps;
use launched::{Run, signal};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use summary::{assert_each_once_or_lost, assert_killed_alone, u};
use swrod::{HLTS, assert_every_event_stored_once, events_in};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Cards 0 and 1 in `swrod-0` and `swrod-1`, the supervisor and two HLT applications on
/// 127.0.0.1, for `duration_s` (0: until stopped).
fn config(dir: &Path, duration_s: f64) -> PathBuf {
    swrod::config(dir, duration_s, &loopback_swrod_apps())
}

const APPS: [&str; 5] = ["swrod-0", "swrod-1", "hltsv", "hlt-0", "hlt-1"];

#[test]
fn sw_rod_applications_build_and_store_every_l1_accept_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let s = Run::start(&config(dir.path(), 3.0)).summary();
    assert_eq!(s["stop_reason"], "Duration", "{s}");
    assert_every_event_stored_once(dir.path(), &s, &APPS);
    // The cards ran on after the supervisor's last L1 accept, never short of it.
    for card in s["cards"].as_array().unwrap() {
        assert!(u(&card["l1as"]) >= u(&s["l1as_to_hlt"]), "{s}");
    }
    assert!(u(&s["samples"]) > 0, "{s}");
}

#[test]
fn a_killed_hlt_application_loses_exactly_the_events_in_no_closed_file_and_the_run_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&config(dir.path(), 6.0));
    let victim = run.pid_of("hlt-1");
    std::thread::sleep(Duration::from_secs(3));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    assert_eq!(s["hlts_gone"], serde_json::json!([1]), "{s}");
    assert_killed_alone(&s, "hlt-1", &["swrod-0", "swrod-1", "hltsv", "hlt-0"]);
    let lost: Vec<u64> = s["lost_events"].as_array().unwrap().iter().map(u).collect();
    assert!(!lost.is_empty(), "{s}");
    let events = events_in(dir.path(), &HLTS);
    let l1as = u(&s["l1as_to_hlt"]);
    // Every L1 accept given out is in exactly one closed file, complete, or listed lost: the
    // summary read back what the dead application closed after it last settled.
    assert_each_once_or_lost(
        l1as,
        &lost,
        |n| events.get(&n).map_or(0, Vec::len),
        |n| {
            let e = &events[&n][0];
            assert!(
                e.robs == 4 && e.missing_robs.is_empty(),
                "event {n}: {e:?}; summary {s}"
            );
        },
    );
    assert_eq!(u(&s["hlt"]["incomplete_events"]), 0, "{s}");
    assert_eq!(
        (u(&s["stored_events"]), u(&s["lost"])),
        (events.len() as u64, l1as - events.len() as u64),
        "{s}"
    );
    // What the dead application built counts as built; the truth holds over all of it.
    assert_eq!(
        u(&s["hlt"]["events"]) + u(&s["events_of_unreported_hlts"]) + u(&s["lost"]),
        l1as,
        "{s}"
    );
    assert_eq!(s["truth"]["nothing_silently_dropped"], true, "{s}");
    // The file it left open is named, and none of its events counted.
    let open: Vec<String> = std::fs::read_dir(dir.path().join("out/hlt-1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".writing"))
        .collect();
    let read_back = &s["read_back"];
    assert_eq!(read_back.as_array().unwrap().len(), 1, "{s}");
    assert_eq!(
        read_back[0]["duplicate_events"],
        serde_json::json!([]),
        "{s}"
    );
    assert_eq!(
        (
            &read_back[0]["hlt"],
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
    // The survivor went on with every L1 accept after the kill.
    let last_of = |hlt: &str| {
        events
            .iter()
            .rev()
            .find(|(_, e)| e[0].hlt == hlt)
            .map_or(0, |(&n, _)| n)
    };
    assert!(last_of("hlt-0") > last_of("hlt-1") + 2000, "{s}");
}

#[test]
fn a_killed_swrod_application_s_robs_are_missing_from_every_later_event_and_none_is_dropped() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&config(dir.path(), 5.0));
    let victim = run.pid_of("swrod-1");
    std::thread::sleep(Duration::from_secs(2));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    assert_eq!(s["stop_reason"], "Duration", "the run goes on: {s}");
    assert_killed_alone(&s, "swrod-1", &["swrod-0", "hltsv", "hlt-0", "hlt-1"]);
    let l1as = u(&s["l1as_to_hlt"]);
    assert_eq!((u(&s["stored_events"]), u(&s["lost"])), (l1as, 0), "{s}");
    let incomplete = u(&s["hlt"]["incomplete_events"]);
    assert!(incomplete > 1000, "{s}");
    let events = events_in(dir.path(), &HLTS);
    assert_eq!(events.len() as u64, l1as, "{s}");
    // swrod-1 had card 1: ROBs 0x710002 and 0x710003, and only they are ever missing.
    let its_robs = vec![0x0071_0002, 0x0071_0003];
    let first_incomplete = events
        .iter()
        .find(|(_, e)| !e[0].missing_robs.is_empty())
        .map(|(&n, _)| n)
        .unwrap();
    // The last event that did not miss both: complete, or asked while swrod-1 still answered
    // for one of its ROBs (in flight at the kill).
    let last_not_both = events
        .iter()
        .rev()
        .find(|(_, e)| e[0].missing_robs != its_robs)
        .map(|(&n, _)| n)
        .unwrap();
    for (n, e) in &events {
        assert_eq!(e.len(), 1, "event {n} stored twice");
        // Every ROB is in the event, a missing one as a stand-in that names it.
        assert_eq!(e[0].robs, 4, "event {n}: {e:?}");
        assert!(
            e[0].missing_robs.iter().all(|r| its_robs.contains(r)),
            "event {n} misses a ROB of another application: {e:?}"
        );
    }
    // Complete before the kill, missing both ROBs after it; only the events in flight at the
    // kill (a few hundred milliseconds of them at most) may go either way.
    assert!(
        first_incomplete > 1000,
        "events before the kill are complete"
    );
    assert!(
        last_not_both < first_incomplete + 1000,
        "{last_not_both} {first_incomplete}"
    );
    assert!(l1as - last_not_both > 1000, "the run went on: {s}");
}

#[test]
fn garbage_and_another_protocol_version_are_refused_and_sigterm_stops_cleanly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), 0.0);
    let address_of = |app: &str| {
        std::fs::read_to_string(&config)
            .unwrap()
            .split(&format!("name = \"{app}\""))
            .nth(1)
            .and_then(|t| t.split('"').nth(3).map(str::to_owned))
            .unwrap()
    };
    let run = Run::start(&config);
    run.pid_of("hlt-1");
    std::thread::sleep(Duration::from_secs(3));
    let context = zmq::Context::new();
    for app in ["hltsv", "swrod-0"] {
        let raw = context.socket(zmq::PUSH).unwrap();
        raw.set_linger(1000).unwrap();
        raw.connect(&address_of(app)).unwrap();
        raw.send(&b"GET / HTTP/1.1\r\n\r\n"[..], 0).unwrap();
        let mut foreign = b"SWDQ".to_vec();
        foreign.extend_from_slice(&[99, 0, 0, 0, 1, 0, 0, 0, 0]);
        raw.send(foreign, 0).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    signal(run.child.id(), libc::SIGTERM);
    let s = run.summary();
    assert_eq!(s["stop_reason"], "Interrupted", "{s}");
    assert_eq!(u(&s["refused_messages"]["garbage"]), 2, "{s}");
    assert_eq!(u(&s["refused_messages"]["version"]), 2, "{s}");
    assert_every_event_stored_once(dir.path(), &s, &APPS);
    let leftovers: Vec<_> = HLTS
        .iter()
        .flat_map(|h| std::fs::read_dir(dir.path().join("out").join(h)).unwrap())
        .filter_map(|e| e.ok())
        .filter(|e| e.path().to_string_lossy().ends_with(".writing"))
        .collect();
    assert!(leftovers.is_empty(), "every file closed and renamed");
}
