//! The tally, the smallest model: it runs in one process, as applications and under
//! `swdaq serve` like every model, and it stays one folder — nothing outside
//! `crates/swdaq-app/src/models/tally/` names it but its registration in `models/mod.rs`,
//! this test, the fuzz target of every model's messages and the docs.

mod common;

use common::served::Served;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RATE_HZ: f64 = 2000.0;

fn config(dir: &Path, duration_s: f64, topology: &str) -> PathBuf {
    let path = dir.join("tally.toml");
    std::fs::write(
        &path,
        format!(
            "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [tally]\ncounters = 3\nrate_hz = {RATE_HZ}\n{topology}",
            dir.join("out")
        ),
    )
    .unwrap();
    path
}

/// Each counter counted at its rate over the run's seconds (the whole run: within a tenth,
/// less the start of its threads).
fn counted_at_rate(summary: &Value) {
    let seconds = summary["seconds"].as_f64().unwrap();
    let counters = summary["counters"].as_array().unwrap();
    assert_eq!(counters.len(), 3, "{summary}");
    for c in counters {
        let counted = c["counted"].as_u64().unwrap() as f64;
        assert!(
            counted <= RATE_HZ * seconds && counted >= 0.8 * RATE_HZ * seconds - 200.0,
            "{c} in {seconds} s"
        );
    }
}

#[test]
fn counts_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let summary = common::swdaq_run_json(&config(dir.path(), 1.0, ""));
    assert_eq!(summary["model"], "tally");
    assert_eq!(summary["stop_reason"], "Duration");
    counted_at_rate(&summary);
}

#[test]
fn counts_travel_whole_between_applications() {
    let dir = tempfile::tempdir().unwrap();
    let apps = common::loopback_topology_apps(&[
        ("count-a", "counter", ""),
        ("count-b", "counter", ""),
        ("count-c", "counter", ""),
    ]);
    let summary = common::swdaq_run_json(&config(dir.path(), 2.0, &apps));
    counted_at_rate(&summary);
    let counters = summary["counters"].as_array().unwrap();
    for (i, c) in counters.iter().enumerate() {
        let before = &counters[(i + 2) % 3];
        assert_eq!(c["heard_from"], before["name"], "{summary}");
        assert_eq!(c["heard"], before["counted"], "{summary}");
        assert_eq!(c["heard_final"], true, "{summary}");
    }
    let names: Vec<&str> = counters
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["count-a", "count-b", "count-c"], "{summary}");
    assert_eq!(summary["apps"].as_array().unwrap().len(), 3, "{summary}");
}

#[test]
fn a_kind_of_another_model_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let apps = common::loopback_topology_apps(&[("ru-1", "ru", "")]);
    let out = common::swdaq_run(&config(dir.path(), 1.0, &apps));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ru") && stderr.contains("counter"),
        "{stderr}"
    );
}

#[test]
fn counts_under_swdaq_serve() {
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(&config(dir.path(), 0.0, ""));
    server.ctl(&["configure"]);
    assert_eq!(server.ctl(&["start"])["run_number"], 1);
    std::thread::sleep(Duration::from_millis(1500));
    let summary = server.ctl(&["stop"]);
    assert_eq!(summary["model"], "tally", "{summary}");
    assert_eq!(summary["stop_reason"], "Interrupted", "{summary}");
    counted_at_rate(&summary);
}

/// Source files of the project (not build output, not prose): where a model could be
/// wired in by hand.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if !name.starts_with('.') && !["target", "book", "node_modules"].contains(&&*name) {
                sources(&path, out);
            }
        } else if [
            "rs", "py", "toml", "sh", "js", "html", "yml", "yaml", "json", "h", "c",
        ]
        .iter()
        .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

#[test]
fn the_tally_is_one_folder_and_a_registration() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let folder = root.join("crates/swdaq-app/src/models/tally");
    let this_test = root.join("crates/swdaq/tests/tally.rs");
    let registration = root.join("crates/swdaq-app/src/models/mod.rs");
    // Tests of every model's messages: the fuzz target reads each model's `wire.rs`.
    let every_model_s_test = root.join("fuzz/fuzz_targets/wire_message.rs");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut outside = Vec::new();
    for file in files {
        if file.starts_with(&folder) || file == this_test || file == every_model_s_test {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let names_it = |line: &&str| {
            line.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|word| word.eq_ignore_ascii_case("tally"))
        };
        for line in text.lines().filter(names_it) {
            let registered = file == registration
                && (line.trim() == "pub mod tally;" || line.contains("&tally::TALLY"));
            if !registered {
                outside.push(format!("{}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "the tally is named outside its folder:\n{}",
        outside.join("\n")
    );
}
