//! `swdaq run` with a topology: the chain as separate processes on 127.0.0.1, started,
//! stopped and summarised by `swdaq run`, and the faults it must survive: a builder or a
//! readout application killed mid-run, garbage and foreign protocol versions on an inbox,
//! SIGTERM to `swdaq run`. Each test boots a real multi-process system; they run one at a
//! time (the machine has two cores).

mod common;
use common::loopback_apps;
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
use launched::{Run, signal};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use swdaq_store::RecordFileReader;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A topology of 2 readout applications (one link each), trigger, dfo and `builders`
/// builders on loopback, run for `duration_s` (0: until stopped).
fn topology(dir: &Path, duration_s: f64, builders: usize, extra: &str) -> PathBuf {
    let mut t = format!(
        "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
         [emulator]\nlinks = 2\n[trigger.periodic]\nrate_hz = 20.0\n\
         [topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\nsend_timeout_ms = 500\n{extra}\n",
        dir.join("data")
    );
    t += &loopback_apps(builders);
    let path = dir.join("topology.toml");
    std::fs::write(&path, t).unwrap();
    path
}

/// Every record in the run's HDF5 files (closed ones), by trigger number.
fn records_in(dir: &Path) -> Vec<(String, u64, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir.join("data")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "hdf5") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            for r in RecordFileReader::open(&path).unwrap().records().unwrap() {
                let h = r.unwrap().header;
                out.push((name.clone(), h.trigger_number, h.status_bits));
            }
        }
    }
    out.sort_by_key(|r| r.1);
    out
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn applications_on_loopback_build_every_record_once_each_builder_its_own_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let s = Run::start(&topology(dir.path(), 4.0, 2, "")).summary();
    let decisions = u(&s["trigger"]["decisions"]);
    assert!(decisions >= 40, "{s}");
    assert_eq!(u(&s["records"]["complete"]), decisions, "{s}");
    let d = &s["dataflow"];
    let assigned: Vec<u64> = d["assigned"].as_array().unwrap().iter().map(u).collect();
    assert!(assigned.iter().all(|&n| n > 0), "both builders work: {d}");
    assert_eq!(assigned.iter().sum::<u64>(), decisions);
    assert!(d["lost"].as_array().unwrap().is_empty());
    let records = records_in(dir.path());
    let numbers: Vec<u64> = records.iter().map(|r| r.1).collect();
    assert_eq!(
        numbers,
        (1..=decisions).collect::<Vec<_>>(),
        "one record per decision"
    );
    for b in ["builder-0", "builder-1"] {
        assert!(
            records
                .iter()
                .any(|r| r.0.starts_with(&format!("swdaq_{b}_run")))
        );
    }
    assert!(records.iter().all(|r| r.2 == 0), "every record complete");
    let logs = dir.path().join("data/run000001-logs");
    for app in [
        "readout-0",
        "readout-1",
        "trigger",
        "dfo",
        "builder-0",
        "builder-1",
    ] {
        let log = std::fs::read_to_string(logs.join(format!("{app}.log"))).unwrap();
        assert!(
            log.contains(&format!("swdaq app {app}: done")),
            "{app}: {log}"
        );
    }
}

#[test]
fn a_killed_builder_loses_no_record_silently_and_the_run_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&topology(dir.path(), 7.0, 2, ""));
    let victim = run.pid_of("builder-1");
    std::thread::sleep(Duration::from_secs(4));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    let d = &s["dataflow"];
    assert_eq!(d["builders_gone"], serde_json::json!([1]), "{d}");
    let done: u64 = d["done"].as_array().unwrap().iter().map(u).sum();
    let lost = d["lost"].as_array().unwrap().len() as u64;
    let decisions = u(&s["trigger"]["decisions"]);
    assert_eq!(
        done + lost,
        decisions,
        "every decision stored or counted lost: {d}"
    );
    let builder1 = s["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "builder-1")
        .unwrap();
    assert!(
        builder1["failure"].as_str().unwrap().contains("signal 9"),
        "{builder1}"
    );
    // Builder 0 went on and took over: its records are after the kill too.
    let after_kill = u(&d["assigned"][0]) > u(&d["done"][1]);
    assert!(after_kill, "{d}");
}

#[test]
fn a_killed_readout_makes_later_records_incomplete_naming_its_links() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(&topology(dir.path(), 7.0, 1, ""));
    let victim = run.pid_of("readout-1");
    std::thread::sleep(Duration::from_secs(4));
    signal(victim, libc::SIGKILL);
    let s = run.summary();
    let r = &s["records"];
    assert!(
        u(&r["complete"]) > 0,
        "records before the kill are complete: {r}"
    );
    let incomplete = u(&r["timed_out"]) + u(&r["data_missing"]);
    assert!(incomplete > 0, "{r}");
    let missing = r["missing_by_source"].as_object().unwrap();
    assert!(
        missing.keys().all(|k| k.ends_with("0x00000001")),
        "only link 1's sources are missing: {r}"
    );
    assert!(missing.contains_key("Detector_Readout:0x00000001"), "{r}");
    let decisions = u(&s["trigger"]["decisions"]);
    assert_eq!(u(&r["complete"]) + incomplete, decisions, "{s}");
}

#[test]
fn sigterm_stops_every_application_cleanly_and_garbage_is_refused() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = topology(dir.path(), 0.0, 1, "");
    let trigger_address = std::fs::read_to_string(&config)
        .unwrap()
        .split("name = \"trigger\"")
        .nth(1)
        .and_then(|t| t.split('"').nth(3).map(str::to_owned))
        .unwrap();
    let run = Run::start(&config);
    run.pid_of("builder-0");
    std::thread::sleep(Duration::from_secs(3));
    let context = zmq::Context::new();
    let raw = context.socket(zmq::PUSH).unwrap();
    raw.set_linger(1000).unwrap();
    raw.connect(&trigger_address).unwrap();
    raw.send(&b"GET / HTTP/1.1\r\n\r\n"[..], 0).unwrap();
    let mut foreign = b"SWDQ".to_vec();
    foreign.extend_from_slice(&[99, 0, 0, 0, 1, 0, 0, 0, 0]);
    raw.send(foreign, 0).unwrap();
    drop(raw);
    std::thread::sleep(Duration::from_millis(500));
    signal(run.child.id(), libc::SIGTERM);
    let s = run.summary();
    assert_eq!(s["stop_reason"], "Interrupted");
    assert_eq!(u(&s["refused_messages"]["garbage"]), 1, "{s}");
    assert_eq!(u(&s["refused_messages"]["version"]), 1, "{s}");
    assert!(
        s["apps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["failure"].is_null()),
        "{s}"
    );
    let decisions = u(&s["trigger"]["decisions"]);
    assert_eq!(u(&s["records"]["complete"]), decisions, "{s}");
    assert_eq!(records_in(dir.path()).len() as u64, decisions);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().to_string_lossy().ends_with(".writing"))
        .collect();
    assert!(leftovers.is_empty(), "every file closed and renamed");
}

/// A builder stopped (SIGSTOP) while the run goes on: the launcher waits `stop_timeout_s`
/// for it at the stop while the readouts still read, so the summary's rates are over the
/// time data was read, start to last application stopped (they were over the time to the
/// stop only: 7763 MB/s from two links of ~220 MB/s).
#[test]
fn a_stopped_builder_makes_no_rate_over_the_wrong_duration() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = topology(
        dir.path(),
        2.0,
        1,
        "stop_timeout_s = 4\npeer_timeout_ms = 60000",
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("peer_timeout_ms = 1000\n", "")).unwrap();
    let run = Run::start(&config);
    let victim = run.pid_of("builder-0");
    run.wait_started();
    signal(victim, libc::SIGSTOP);
    let (status, out, stderr) = run.wait();
    let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{status}: {e}: {stderr}"));
    let bytes: u64 = s["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| u(&l["bytes"]))
        .sum();
    let seconds = s["seconds"].as_f64().unwrap();
    let mb_per_s = bytes as f64 / 1e6 / seconds;
    eprintln!("{bytes} bytes over {seconds:.1} s: {mb_per_s:.0} MB/s ({status})");
    // Two emulated WIBEth links: 2 x 64 channels x 2 MHz / 32 ticks x 7200 bytes / 64 = 220 MB/s each.
    assert!(
        mb_per_s < 2.0 * 220.0 * 1.1,
        "{mb_per_s:.0} MB/s over {seconds} s"
    );
}
