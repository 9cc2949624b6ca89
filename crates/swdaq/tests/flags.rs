//! `swdaq run`'s shared flags mean the same for every model or are refused in one line saying
//! why; `--print-config` prints the model's whole effective configuration, flags applied,
//! and runs nothing.

use std::path::Path;
use std::process::{Command, Output};

fn print_config(config: Option<&str>, flags: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_swdaq"));
    c.arg("run").arg("--print-config");
    if let Some(config) = config {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs")
            .join(config);
        c.arg("--config").arg(path);
    }
    c.args(flags).output().unwrap()
}

/// The value at a dotted `key` of the printed configuration.
fn value(out: &Output, key: &str) -> toml::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    for part in key.split('.') {
        v = v
            .get(part)
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .clone();
    }
    v
}

/// Each model's file and where each flag lands in it (`None`: refused, the message says this).
struct Case {
    config: Option<&'static str>,
    model_table: Option<&'static str>,
    duration: &'static str,
    out: &'static str,
    run: &'static str,
    metrics: Result<&'static str, &'static str>,
    links: Result<&'static str, &'static str>,
}

const CASES: [Case; 5] = [
    Case {
        config: None,
        model_table: None,
        duration: "run.duration_s",
        out: "run.output_dir",
        run: "run.number",
        metrics: Ok("run.metrics_addr"),
        links: Ok("emulator.links"),
    },
    Case {
        config: Some("topology-local.toml"),
        model_table: None,
        duration: "run.duration_s",
        out: "run.output_dir",
        run: "run.number",
        metrics: Err("each serves its own /metrics"),
        // The applications' links must cover the run's links: a check of the file's keys.
        links: Err("topology.apps.links: links [4, 5, 6, 7] are read out by no application"),
    },
    Case {
        config: Some("evb.toml"),
        model_table: Some("evb"),
        duration: "duration_s",
        out: "evb.output",
        run: "evb.run",
        metrics: Ok("metrics_addr"),
        links: Err("the event builder reads FEDs, not links"),
    },
    Case {
        config: Some("evb-apps.toml"),
        model_table: Some("evb"),
        duration: "duration_s",
        out: "evb.output",
        run: "evb.run",
        metrics: Err("each serves its own /metrics"),
        links: Err("the event builder reads FEDs, not links"),
    },
    Case {
        config: Some("swrod.toml"),
        model_table: Some("swrod"),
        duration: "duration_s",
        out: "swrod.output_dir",
        run: "swrod.run_number",
        metrics: Ok("metrics_addr"),
        links: Ok("swrod.felix.elinks"),
    },
];

/// A refusal: non-zero exit, nothing printed, one line saying why.
fn assert_refused(out: &Output, flag: &str, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && out.stdout.is_empty(),
        "{flag}: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(why), "{flag}: {stderr}");
}

#[test]
fn every_shared_flag_is_applied_or_refused_in_one_line_for_every_model() {
    for case in CASES {
        let name = case.config.unwrap_or("(defaults)");
        let out = print_config(
            case.config,
            &["--duration", "7.5", "--out", "/tmp/flag-out", "--run", "42"],
        );
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(value(&out, case.duration).as_float(), Some(7.5), "{name}");
        assert_eq!(
            value(&out, case.out).as_str(),
            Some("/tmp/flag-out"),
            "{name}"
        );
        assert_eq!(value(&out, case.run).as_integer(), Some(42), "{name}");
        if let Some(table) = case.model_table {
            assert!(
                value(&out, table).is_table(),
                "{name}: the model's table is printed"
            );
        }
        let metrics = print_config(case.config, &["--metrics", "127.0.0.1:9999"]);
        match case.metrics {
            Ok(key) => assert_eq!(value(&metrics, key).as_str(), Some("127.0.0.1:9999")),
            Err(why) => assert_refused(&metrics, "--metrics", why),
        }
        let links = print_config(case.config, &["--links", "8"]);
        match case.links {
            Ok(key) => assert_eq!(value(&links, key).as_integer(), Some(8), "{name}"),
            Err(why) => assert_refused(&links, "--links", why),
        }
    }
}

#[test]
fn print_config_of_a_sw_rod_file_prints_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = print_config(Some("swrod.toml"), &["--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success());
    // The whole configuration: every SW ROD key with its value, read back as the same model.
    let text = String::from_utf8_lossy(&out.stdout);
    for key in [
        "duration_s",
        "hlt_accept_every",
        "[swrod.felix]",
        "ring_slots",
    ] {
        assert!(text.contains(key), "{key} missing from:\n{text}");
    }
    assert!(!out_dir.exists(), "--print-config wrote a run's files");
    assert!(String::from_utf8_lossy(&out.stderr).is_empty());
}
