//! Validates the exposition with the reference parser, Python's `prometheus_client`.
//!
//! Runs the interpreter in `SWDAQ_PYTHON` (the test script's venv, built from
//! `requirements-test.txt`). Unset: skipped with a notice. Set: any failure fails the test.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use swdaq_monitor::{Collector, Registry, Value, render_prometheus};

const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    out.append({
        "name": fam.name,
        "type": fam.type,
        "help": fam.documentation,
        "samples": [[s.name, s.labels, str(s.value)] for s in fam.samples],
    })
print(json.dumps(out))
"#;

#[derive(serde::Deserialize)]
struct ParsedFamily {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    help: String,
    samples: Vec<(String, BTreeMap<String, String>, String)>,
}

#[test]
fn reference_parser_accepts_and_round_trips() {
    let Some(python) = std::env::var_os("SWDAQ_PYTHON") else {
        eprintln!("SKIP: SWDAQ_PYTHON unset; set it to a Python with prometheus_client");
        return;
    };

    let registry = Registry::new();
    let nasty = "quote\" backslash\\ newline\n (paren) é";
    for link in ["0", "1"] {
        let mut b = registry.block("readout-0", &[("link", link), ("note", nasty)]);
        b.counter("swdaq_readout_frames_total", "Frames \\ received\nper link")
            .unwrap()
            .add(1 << 40);
        let g = b
            .gauge("swdaq_readout_buffer_occupancy_ratio", "Fill")
            .unwrap();
        g.set(if link == "0" { f64::NAN } else { -0.5 });
        let h = b
            .histogram(
                "swdaq_readout_request_latency_seconds",
                "Latency",
                &[1e-5, 1e-4, 0.25],
            )
            .unwrap();
        for v in [3e-6, 5e-5, 0.2, 7.0] {
            h.observe(v);
        }
    }
    let mut inf = registry.block("tpg-0", &[]);
    inf.gauge("swdaq_tpg_weird", "Infinite")
        .unwrap()
        .set(f64::INFINITY);
    let snapshot = Collector::new(registry).collect();
    let text = render_prometheus(&snapshot);

    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("SWDAQ_PYTHON is set but cannot be run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write exposition");
    let out = child.wait_with_output().expect("python output");
    assert!(
        out.status.success(),
        "prometheus_client failed:\n{}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Vec<ParsedFamily> = serde_json::from_slice(&out.stdout).expect("parser JSON");

    // One family per name: HELP/TYPE are grouped, never repeated.
    let mut names: Vec<&str> = parsed.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate families: {names:?}");
    let sample_lines = text.lines().filter(|l| !l.starts_with('#')).count();
    let samples: usize = parsed.iter().map(|f| f.samples.len()).sum();
    assert_eq!(samples, sample_lines, "every sample line parsed");

    let family = |name: &str| parsed.iter().find(|f| f.name == name).expect(name);
    let frames = family("swdaq_readout_frames");
    assert_eq!(frames.kind, "counter");
    assert_eq!(frames.help, "Frames \\ received\nper link");
    assert_eq!(frames.samples.len(), 2);
    for (name, labels, value) in &frames.samples {
        assert_eq!(name, "swdaq_readout_frames_total");
        assert_eq!(labels["note"], nasty, "label escaping round-trips");
        assert_eq!(labels["thread"], "readout-0");
        assert_eq!(value.parse::<f64>().unwrap(), (1u64 << 40) as f64);
    }
    let occupancy = family("swdaq_readout_buffer_occupancy_ratio");
    assert_eq!(occupancy.kind, "gauge");
    let values: Vec<f64> = occupancy
        .samples
        .iter()
        .map(|s| s.2.parse().unwrap())
        .collect();
    assert!(values.iter().any(|v| v.is_nan()) && values.contains(&-0.5));
    assert_eq!(family("swdaq_tpg_weird").samples[0].2, "inf");

    let latency = family("swdaq_readout_request_latency_seconds");
    assert_eq!(latency.kind, "histogram");
    let link0: Vec<_> = latency
        .samples
        .iter()
        .filter(|s| s.1["link"] == "0")
        .collect();
    let buckets: Vec<(String, f64)> = link0
        .iter()
        .filter(|s| s.0.ends_with("_bucket"))
        .map(|s| (s.1["le"].clone(), s.2.parse().unwrap()))
        .collect();
    let les: Vec<f64> = buckets.iter().map(|b| b.0.parse().unwrap()).collect();
    assert_eq!(les, [1e-5, 1e-4, 0.25, f64::INFINITY]);
    let counts: Vec<f64> = buckets.iter().map(|b| b.1).collect();
    assert_eq!(counts, [1.0, 2.0, 3.0, 4.0]);
    let get = |suffix: &str| -> f64 {
        link0
            .iter()
            .find(|s| s.0.ends_with(suffix))
            .unwrap()
            .2
            .parse()
            .unwrap()
    };
    assert_eq!(get("_count"), 4.0);
    assert!((get("_sum") - (3e-6 + 5e-5 + 0.2 + 7.0)).abs() < 1e-12);

    // Process health, from /proc where there is one.
    if std::path::Path::new("/proc/self/task").exists() {
        let cpu = family("swdaq_thread_cpu_seconds");
        assert_eq!(cpu.kind, "counter");
        assert!(!cpu.samples.is_empty());
        assert!(cpu.samples.iter().all(|s| s.1.contains_key("tid")));
        assert_eq!(family("swdaq_thread_last_cpu").kind, "gauge");
        assert_eq!(
            family("swdaq_process_resident_memory_bytes").samples.len(),
            1
        );
    }

    // And the snapshot agrees with what was exported.
    let exported: u64 = snapshot
        .families
        .iter()
        .filter(|f| f.name == "swdaq_readout_frames_total")
        .flat_map(|f| &f.series)
        .map(|s| match s.value {
            Value::Counter { total, .. } => total,
            _ => 0,
        })
        .sum();
    assert_eq!(exported, 2 << 40);
}
