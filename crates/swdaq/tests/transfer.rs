//! Transfer to permanent storage (#38) end to end: a real run's files reach a real `xrootd`
//! (started here on loopback; skipped with a line where there is none) beside `swdaq run`
//! (`[run.transfer]`), each verified by the server's own Adler-32, which matches the file's,
//! and marked in the registry; `swdaq transfer` catches up a run's backlog to a directory,
//! keeping the local files unless asked to delete them after their verified copy; beside
//! `swdaq serve`, a run's files reach a directory after its stop and `/status` shows the
//! backlog drained.

mod common;
use common::models::{Load, Model, config, feds};
use common::served::Served;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use swdaq_test_xrootd::TestXrootd;

fn swdaq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(args)
        .output()
        .unwrap()
}

fn show(cfg: &Path, number: u64) -> Value {
    let out = swdaq(&[
        "runs",
        "show",
        &number.to_string(),
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn adler32(path: &Path) -> u64 {
    u64::from(adler2::adler32_slice(&std::fs::read(path).unwrap()))
}

/// The run's files on record (with checksums) and its transfers, by path.
fn files_and_transfers(record: &Value) -> (Vec<Value>, Vec<Value>) {
    let files: Vec<Value> = (record["files"].as_array().unwrap().iter())
        .filter(|f| f["adler32"].is_u64())
        .cloned()
        .collect();
    let transfers = record["transfers"].as_array().unwrap().clone();
    assert!(!files.is_empty(), "{record}");
    assert_eq!(files.len(), transfers.len(), "{record}");
    (files, transfers)
}

#[test]
fn a_run_s_files_reach_xrootd_beside_swdaq_run_verified_and_on_record() {
    let Some(server) = TestXrootd::start_or_skip("a run's files reach xrootd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(dir.path(), Model::Chain, &out, 0, Load::Short);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text += &format!(
        "[run.transfer]\ndestination = {:?}\npoll_s = 0.2\nretry_first_s = 0.2\nretry_max_s = 1\nwait_after_run_s = 30\n",
        server.url("/eos/swdaq")
    );
    std::fs::write(&cfg, text).unwrap();
    let run = common::spawn_run(&cfg).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("backlog 0 file(s)"), "{stderr}");
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    let number = summary["run_number"].as_u64().unwrap();
    let record = show(&cfg, number);
    let (files, transfers) = files_and_transfers(&record);
    let export = server.export().join("eos/swdaq");
    for (file, t) in files.iter().zip(&transfers) {
        assert_eq!(t["path"], file["path"], "{t}");
        assert_eq!(t["state"], "verified", "{t}");
        assert_eq!(t["verified_adler32"], file["adler32"], "{t}");
        assert!(t["deleted_at"].is_null(), "kept by default: {t}");
        let local = Path::new(file["path"].as_str().unwrap());
        let copy = export.join(local.strip_prefix(&out).unwrap());
        assert_eq!(
            adler32(&copy),
            file["adler32"].as_u64().unwrap(),
            "{}",
            copy.display()
        );
        assert_eq!(adler32(local), adler32(&copy));
    }
}

#[test]
fn swdaq_transfer_catches_up_a_backlog_and_deletes_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(dir.path(), Model::Chain, &out, 0, Load::Short);
    let number = common::swdaq_run_json(&cfg)["run_number"].as_u64().unwrap();
    let (files, _) = {
        let record = show(&cfg, number);
        let files: Vec<Value> = (record["files"].as_array().unwrap().iter())
            .filter(|f| f["adler32"].is_u64())
            .cloned()
            .collect();
        assert!(
            record["transfers"].as_array().unwrap().is_empty(),
            "{record}"
        );
        (files, ())
    };
    let permanent = dir.path().join("permanent");
    let catch_up = |extra: &[&str]| {
        let mut args = vec![
            "transfer",
            "--config",
            cfg.to_str().unwrap(),
            "--destination",
            permanent.to_str().unwrap(),
            "--time-limit-s",
            "30",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = swdaq(&args);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let done = catch_up(&[]);
    assert_eq!(done["verified"], files.len(), "{done}");
    assert_eq!(
        (done["backlog"]["files"].as_u64(), done["deleted"].as_u64()),
        (Some(0), Some(0)),
        "{done}"
    );
    let record = show(&cfg, number);
    let (files, transfers) = files_and_transfers(&record);
    for (file, t) in files.iter().zip(&transfers) {
        let local = Path::new(file["path"].as_str().unwrap());
        assert!(local.exists(), "kept without --delete-after-verify");
        let copy = permanent.join(local.strip_prefix(&out).unwrap());
        assert_eq!(adler32(&copy), file["adler32"].as_u64().unwrap());
        assert_eq!(t["state"], "verified", "{t}");
    }
    let done = catch_up(&["--delete-after-verify"]);
    assert_eq!(done["deleted"], files.len(), "{done}");
    let record = show(&cfg, number);
    for t in record["transfers"].as_array().unwrap() {
        assert!(t["deleted_at"].is_string(), "{t}");
        let local = Path::new(t["path"].as_str().unwrap());
        assert!(!local.exists(), "deleted after its verified copy");
        assert!(permanent.join(local.strip_prefix(&out).unwrap()).exists());
    }
    // Nothing left: a second catch-up ends at once.
    let done = catch_up(&[]);
    assert_eq!(
        (done["verified"].as_u64(), done["backlog"]["files"].as_u64()),
        (Some(0), Some(0)),
        "{done}"
    );
}

#[test]
fn beside_swdaq_serve_a_run_s_files_are_transferred_after_its_stop() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let permanent = dir.path().join("permanent");
    let cfg = config(dir.path(), Model::Chain, &out, 0, Load::UntilStopped);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text += &format!("[run.transfer]\ndestination = {permanent:?}\npoll_s = 0.2\n");
    std::fs::write(&cfg, text).unwrap();
    let server = Served::start(&cfg);
    server.ctl(&["configure"]);
    let number = server.ctl(&["start"])["run_number"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    server.ctl(&["stop"]);
    let started = Instant::now();
    let status = loop {
        let status = server.ctl(&["status"]);
        let t = &status["transfer"];
        if t["verified"].as_u64() > Some(0) && t["backlog"]["files"] == 0 {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        status["transfer"]["destination"],
        permanent.to_str().unwrap()
    );
    // Run control's /metrics carries the transfer's series, as `swdaq transfer` serves them.
    let metrics = server.metrics();
    let series = |name: &str| {
        let prefix = format!("{name}{{destination={:?},thread=\"transfer\"}} ", permanent);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
    };
    assert!(series("swdaq_transfer_verified_files_total") >= 1.0);
    assert_eq!(series("swdaq_transfer_backlog_files"), 0.0);
    drop(server);
    let record = show(&cfg, number);
    let (files, transfers) = files_and_transfers(&record);
    for (file, t) in files.iter().zip(&transfers) {
        assert_eq!(t["state"], "verified", "{t}");
        let local = Path::new(file["path"].as_str().unwrap());
        assert_eq!(
            adler32(&permanent.join(local.strip_prefix(&out).unwrap())),
            file["adler32"].as_u64().unwrap()
        );
    }
}

/// A long run (`swdaq run` of the event builder, files rolling over ten times a second,
/// lumi sections of 0.4 s) has its closed files on record while it goes on — data files and
/// their `.jsn`, EoLS and definitions — and verified copies of early ones at a directory
/// destination before its stop; after it, every file on record has the bytes and checksums
/// on disk and a verified copy with them, none found corrupt.
#[test]
fn a_run_s_files_are_on_record_and_transferred_as_they_close_jsn_included() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let permanent = dir.path().join("permanent");
    let cfg = dir.path().join("evb.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nnumber = 7\nduration_s = 0\nmetrics_addr = \"\"\noutput_dir = {out:?}\n\
             [run.transfer]\ndestination = {permanent:?}\npoll_s = 0.2\nwait_after_run_s = 30\n\
             [evb]\nmin_free_bytes = 0\nevents_per_file = 100\ntrigger_rate_hz = 2000\n\
             build_timeout = 1000\nbuilder_units = 2\nlumi_section = 400\nrus = [{}, {}]\n",
            feds(100, 1, 512),
            feds(200, 1, 512)
        ),
    )
    .unwrap();
    let mut run = common::spawn_run(&cfg);
    let started = Instant::now();
    let verified_of = |record: &Value, suffix: &str| {
        (record["transfers"].as_array().into_iter().flatten())
            .filter(|t| t["state"] == "verified" && t["path"].as_str().unwrap().ends_with(suffix))
            .count()
    };
    let during = loop {
        assert!(run.try_wait().unwrap().is_none(), "the run ended by itself");
        let shown = swdaq(&[
            "runs",
            "show",
            "7",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ]);
        if shown.status.success() {
            let record: Value = serde_json::from_slice(&shown.stdout).unwrap();
            if verified_of(&record, ".raw") >= 2
                && verified_of(&record, ".jsn") >= 2
                && verified_of(&record, "_EoLS.jsn") >= 1
            {
                break record;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no verified copies of closed files while the run goes on"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(during["stopped_at"].is_null(), "still running: {during}");
    for t in during["transfers"].as_array().unwrap() {
        if t["state"] == "verified" {
            let local = Path::new(t["path"].as_str().unwrap());
            let copy = permanent.join(local.strip_prefix(&out).unwrap());
            assert_eq!(
                Some(adler32(&copy)),
                t["verified_adler32"].as_u64(),
                "{}",
                copy.display()
            );
        }
    }
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGTERM) }, 0);
    let ended = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert!(ended.status.success(), "{stderr}");
    assert!(stderr.contains("backlog 0 file(s)"), "{stderr}");
    assert!(!stderr.contains("corrupted copies"), "{stderr}");
    let record = show(&cfg, 7);
    let (files, transfers) = files_and_transfers(&record);
    let jsn = files
        .iter()
        .filter(|f| f["path"].as_str().unwrap().ends_with(".jsn"));
    assert!(jsn.count() > 2, "{record}");
    for (file, t) in files.iter().zip(&transfers) {
        let local = Path::new(file["path"].as_str().unwrap());
        assert_eq!(t["path"], file["path"]);
        assert_eq!(t["state"], "verified", "{t}");
        assert_eq!(t["verified_adler32"], file["adler32"], "{t}");
        assert_eq!(adler32(local), file["adler32"].as_u64().unwrap(), "{t}");
        let copy = permanent.join(local.strip_prefix(&out).unwrap());
        assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(local).unwrap());
    }
}
