//! Inputs that are not what a front end writes (issue #33): a link file with a zero tail
//! costs memory by its size, not a frame per eight zero bytes; a FIFO given as a link file,
//! a FED file or to `swdaq inspect` is refused at once instead of blocking for ever.

mod common;

use common::watch::watch;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn swdaq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// Runs `command` to its end, at most `limit`: a blocked process is killed and the test fails.
fn run_bounded(command: &mut Command, limit: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    watch(child, limit).output
}

fn assert_refused_as_fifo(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
}

fn chain_file_config(
    dir: &Path,
    links: &Path,
    real_time: bool,
    duration_s: f64,
) -> std::path::PathBuf {
    let config = dir.join("file.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [source]\nkind = \"file\"\ndirectory = {links:?}\nreal_time = {real_time}\nloop = {real_time}\n\
             [emulator]\nlinks = 1\n",
            dir.join("out")
        ),
    )
    .unwrap();
    config
}

#[test]
fn fifos_as_link_file_fed_file_or_to_inspect_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let links = dir.path().join("links");
    std::fs::create_dir(&links).unwrap();
    mkfifo(&links.join("link0.swraw"));
    let config = chain_file_config(dir.path(), &links, false, 0.0);
    let limit = Duration::from_secs(20);
    assert_refused_as_fifo(&run_bounded(
        swdaq().args(["run", "--config"]).arg(&config),
        limit,
    ));

    let feds = dir.path().join("feds");
    std::fs::create_dir(&feds).unwrap();
    mkfifo(&feds.join("fed0.swraw"));
    let evb = dir.path().join("evb.toml");
    std::fs::write(
        &evb,
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[evb]\noutput = {:?}\n\
             rus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}]]\n\
             [evb.input]\nkind = \"file\"\ndirectory = {feds:?}\n",
            dir.path().join("evb-out")
        ),
    )
    .unwrap();
    assert_refused_as_fifo(&run_bounded(
        swdaq().args(["run", "--config"]).arg(&evb),
        limit,
    ));

    assert_refused_as_fifo(&run_bounded(
        swdaq().arg("inspect").arg(links.join("link0.swraw")),
        limit,
    ));
}

/// Runs the chain on `links` for a second, replaying in real time, and returns its peak RSS.
fn chain_peak_rss_kb(dir: &Path, links: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let config = chain_file_config(dir, links, true, 1.0);
    let child = swdaq()
        .args(["run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = watch(child, Duration::from_secs(60));
    assert!(run.output.status.success(), "{}", run.stderr());
    run.peak_rss_kb
}

#[test]
fn a_zero_tail_on_a_link_file_costs_memory_by_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean");
    let status = swdaq()
        .args(["gen", "--seconds", "0.1", "--links", "1", "--out"])
        .arg(&clean)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    let mut bytes = std::fs::read(clean.join("link0.swraw")).unwrap();
    // 2 MB of zeros: 250 000 records of length 0.
    bytes.resize(bytes.len() + 2_000_000, 0);
    std::fs::write(damaged.join("link0.swraw"), bytes).unwrap();
    let clean_kb = chain_peak_rss_kb(&dir.path().join("run-clean"), &clean);
    let damaged_kb = chain_peak_rss_kb(&dir.path().join("run-damaged"), &damaged);
    // Before: ~7 kB per empty record (a frame's capacity each), +1.8 GB here.
    assert!(
        damaged_kb < clean_kb + 100_000,
        "peak RSS {clean_kb} kB clean, {damaged_kb} kB with the zero tail"
    );
}

/// `swdaq run` of the event builder on two FEDs' files that `swdaq gen --format fed` wrote
/// (1000 events each: 0.01 s at its 100 kHz) and `damage` then changed (it gets the files'
/// directory), its output at most a minute later.
fn evb_on_damaged_fed_files(dir: &Path, json: bool, damage: impl FnOnce(&Path)) -> Output {
    let feds = dir.join("feds");
    let status = swdaq()
        .args([
            "gen",
            "--format",
            "fed",
            "--links",
            "2",
            "--seconds",
            "0.01",
            "--out",
        ])
        .arg(&feds)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    damage(&feds);
    let config = dir.join("evb.toml");
    std::fs::write(
        &config,
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[evb]\noutput = {:?}\n\
             rus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, {{ id = 1, mean_bytes = 1024, spread_bytes = 128 }}]]\n\
             [evb.input]\nkind = \"file\"\ndirectory = {feds:?}\n",
            dir.join("out")
        ),
    )
    .unwrap();
    let mut command = swdaq();
    command.args(["run", "--config"]).arg(&config);
    if json {
        command.arg("--json");
    }
    run_bounded(&mut command, Duration::from_secs(60))
}

/// 1 MB of zeros after a FED file's fragments: 125 000 empty records, none of them a
/// fragment of any event. The run ends with the files, builds exactly the generated events
/// and counts the records.
#[test]
fn a_zero_tail_on_a_fed_file_makes_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let out = evb_on_damaged_fed_files(dir.path(), true, |feds| {
        let fed0 = feds.join("fed0.swraw");
        let mut bytes = std::fs::read(&fed0).unwrap();
        bytes.resize(bytes.len() + 1_000_000, 0);
        std::fs::write(&fed0, bytes).unwrap();
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["built"], 1000, "{s}");
    assert_eq!(s["incomplete"], 0, "{s}");
    let fed = &s["feds"][0];
    assert_eq!(fed["ingest"]["too_short"], 125_000, "{fed}");
    assert_eq!(fed["failures"]["malformed"], 0, "{fed}");
}

/// A FED file cut in the middle of a record: the run names the FED and exits non-zero.
#[test]
fn a_truncated_fed_file_is_named_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = evb_on_damaged_fed_files(dir.path(), false, |feds| {
        let fed1 = feds.join("fed1.swraw");
        let bytes = std::fs::read(&fed1).unwrap();
        std::fs::write(&fed1, &bytes[..bytes.len() / 2 + 3]).unwrap();
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("the input of FED 1 ended part-way"),
        "{stderr}"
    );
    assert!(stdout.contains("input truncated"), "{stdout}");
}
