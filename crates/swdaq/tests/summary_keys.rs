//! `swdaq run --json` keeps its keys: tools read summaries, so a key once there stays (issue
//! #34: the runtime's summary envelope must not drop any). Each model, in one process and as
//! applications, runs briefly; every key path of its summary (objects descended, arrays by
//! their elements, maps keyed by data left whole) must include the golden list in
//! `tests/summary_keys/<model>.txt`. Keys added are allowed and printed; to take them into the
//! golden list, run with `SWDAQ_BLESS_SUMMARY_KEYS=1`.

mod common;
use common::models::{EVERY_MODEL, Load, Model, config};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Objects whose keys are data (source ids, refusal reasons, application names), not schema.
const KEYED_BY_DATA: [&str; 5] = [
    "refused_messages",
    "undelivered",
    "records.missing_by_source",
    "records.lacking_data_by_source",
    "truth.faults",
];

fn key_paths(value: &Value, path: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) if !KEYED_BY_DATA.contains(&path) => {
            for (key, v) in map {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                out.insert(child.clone());
                key_paths(v, &child, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                key_paths(item, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

fn summary_of(model: Model) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), model, &dir.path().join("out"), 0, Load::Short);
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{model:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_model_s_summary_keeps_its_keys() {
    let golden_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/summary_keys");
    let bless = std::env::var_os("SWDAQ_BLESS_SUMMARY_KEYS").is_some();
    let mut missing = Vec::new();
    for model in EVERY_MODEL {
        let mut keys = BTreeSet::new();
        key_paths(&summary_of(model), "", &mut keys);
        let golden_path = golden_dir.join(format!("{model:?}.txt").to_lowercase());
        if bless {
            let text: String = keys.iter().map(|k| format!("{k}\n")).collect();
            std::fs::write(&golden_path, text).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&golden_path)
            .unwrap_or_else(|e| panic!("{}: {e}", golden_path.display()));
        let golden: BTreeSet<String> = golden.lines().map(str::to_owned).collect();
        let added: Vec<&String> = keys.difference(&golden).collect();
        if !added.is_empty() {
            eprintln!("{model:?}: keys added (allowed): {added:?}");
        }
        missing.extend(golden.difference(&keys).map(|k| format!("{model:?}: {k}")));
    }
    assert!(
        missing.is_empty(),
        "summary keys that tools may read are gone:\n{}",
        missing.join("\n")
    );
}
