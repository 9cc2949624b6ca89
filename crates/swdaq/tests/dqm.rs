//! `swdaq dqm` offline over the event builder's files (#37): a run's histograms saved as the
//! reference; a run of the same detector with another seed is judged with no histogram Bad;
//! a run whose FED 1 sends fragments twice as large is judged with that FED's size histogram
//! Bad, first in the list, and the others not Bad.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the event builder (2 FEDs, FED 1's fragments of `fed1_bytes`) into `dir/<name>`;
/// its FRD files.
fn run(dir: &Path, name: &str, seed: u64, fed1_bytes: u32) -> Vec<PathBuf> {
    let out = dir.join(name);
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = 30\nmetrics_addr = \"\"\noutput_dir = {out:?}\n\
             [evb]\nbuilder_units = 1\nmax_events = 5000\npaced = false\nseed = {seed}\n\
             min_free_bytes = 0\nrus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, \
             {{ id = 1, mean_bytes = {fed1_bytes}, spread_bytes = 128 }}]]\n"
        ),
    )
    .unwrap();
    let done = common::swdaq_run(&config);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let files: Vec<PathBuf> = std::fs::read_dir(out.join("bu0/run000001"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "raw"))
        .collect();
    assert!(!files.is_empty());
    files
}

fn dqm(args: &[&str], files: &[PathBuf]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .arg("dqm")
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (name, quality) of each verdict, in the order given.
fn flags(report: &Value) -> Vec<(String, String)> {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let name = v["name"].as_str().unwrap().to_owned();
            (name, v["verdict"]["quality"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn a_grown_fed_is_bad_against_the_reference_and_a_like_run_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference.json");
    let saved = dqm(
        &["--json", "--save", reference.to_str().unwrap()],
        &run(dir.path(), "reference", 1, 1024),
    );
    let events: u64 = saved["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["events"].as_u64().unwrap())
        .sum();
    assert_eq!(events, 5000);
    let names: Vec<&str> = saved["histograms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "event_size",
            "fed_size_0000",
            "fed_size_0001",
            "feds_per_event"
        ]
    );

    let against = ["--json", "--reference", reference.to_str().unwrap()];
    let like = flags(&dqm(&against, &run(dir.path(), "like", 2, 1024)));
    assert!(like.iter().all(|(_, q)| q != "Bad"), "{like:?}");

    let grown = flags(&dqm(&against, &run(dir.path(), "grown", 3, 2048)));
    assert_eq!(grown[0].1, "Bad", "{grown:?}");
    let bad: Vec<&str> = grown
        .iter()
        .filter(|(_, q)| q == "Bad")
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(
        bad.contains(&"fed_size_0001") && !bad.contains(&"fed_size_0000"),
        "{grown:?}"
    );

    // The reference is never replaced.
    let again = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["dqm", "--save", reference.to_str().unwrap()])
        .args(run(dir.path(), "again", 4, 1024))
        .output()
        .unwrap();
    assert!(!again.status.success());
}
