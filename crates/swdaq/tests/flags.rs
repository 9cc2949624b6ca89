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

/// Each model's file and where the flags that differ land in it (`Err`: refused, the message
/// says this); `--duration`, `--out` and `--run` land in `[run]` in every model's file.
struct Case {
    config: Option<&'static str>,
    model_table: Option<&'static str>,
    metrics: Result<&'static str, &'static str>,
    links: Result<&'static str, &'static str>,
}

const CASES: [Case; 6] = [
    Case {
        config: None,
        model_table: None,
        metrics: Ok("run.metrics_addr"),
        links: Ok("emulator.links"),
    },
    Case {
        config: Some("topology-local.toml"),
        model_table: None,
        metrics: Err("each serves its own /metrics"),
        // The applications' links must cover the run's links: a check of the file's keys.
        links: Err("topology.apps.links: links [4, 5, 6, 7] are read out by no application"),
    },
    Case {
        config: Some("evb.toml"),
        model_table: Some("evb"),
        metrics: Ok("run.metrics_addr"),
        links: Err("the event builder reads FEDs, not links"),
    },
    Case {
        config: Some("evb-apps.toml"),
        model_table: Some("evb"),
        metrics: Err("each serves its own /metrics"),
        links: Err("the event builder reads FEDs, not links"),
    },
    Case {
        config: Some("swrod.toml"),
        model_table: Some("swrod"),
        metrics: Ok("run.metrics_addr"),
        links: Ok("swrod.felix.elinks"),
    },
    Case {
        config: Some("swrod-apps.toml"),
        model_table: Some("swrod"),
        metrics: Err("each serves its own /metrics"),
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
        assert_eq!(
            value(&out, "run.duration_s").as_float(),
            Some(7.5),
            "{name}"
        );
        assert_eq!(
            value(&out, "run.output_dir").as_str(),
            Some("/tmp/flag-out"),
            "{name}"
        );
        assert_eq!(value(&out, "run.number").as_integer(), Some(42), "{name}");
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

/// An event-builder and a SW ROD file written before `[run]`: each old spelling is read as
/// its `[run]` key with one line on stderr; the printed file has only `[run]`.
#[test]
fn old_spellings_of_the_run_keys_are_read_with_a_deprecation_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let old_files = [
        (
            "evb-old.toml",
            "duration_s = 3\nmetrics_addr = \"\"\n[evb]\nrun = 17\noutput = \"/tmp/old-evb\"\n",
            ["duration_s", "metrics_addr", "evb.run", "evb.output"],
        ),
        (
            "swrod-old.toml",
            "duration_s = 3\nmetrics_addr = \"\"\n[swrod]\nrun_number = 17\noutput_dir = \"/tmp/old-swrod\"\n",
            [
                "duration_s",
                "metrics_addr",
                "swrod.run_number",
                "swrod.output_dir",
            ],
        ),
    ];
    for (name, text, old_keys) in old_files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = print_config(Some(path.to_str().unwrap()), &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert_eq!(
            value(&out, "run.duration_s").as_float(),
            Some(3.0),
            "{name}"
        );
        assert_eq!(value(&out, "run.number").as_integer(), Some(17), "{name}");
        assert_eq!(value(&out, "run.metrics_addr").as_str(), Some(""), "{name}");
        assert!(
            value(&out, "run.output_dir")
                .as_str()
                .unwrap()
                .starts_with("/tmp/old-")
        );
        assert_eq!(stderr.lines().count(), old_keys.len(), "{name}: {stderr}");
        for key in old_keys {
            assert!(
                stderr.contains(&format!("deprecated: {key} is read as run.")),
                "{name}: {key}: {stderr}"
            );
        }
        let printed = String::from_utf8_lossy(&out.stdout);
        let table: toml::Table = toml::from_str(&printed).unwrap();
        assert!(!table.contains_key("duration_s"), "{printed}");

        let both = dir.path().join(format!("both-{name}"));
        std::fs::write(&both, format!("{text}[run]\nduration_s = 4\n")).unwrap();
        let out = print_config(Some(both.to_str().unwrap()), &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.stdout.is_empty(), "{name}");
        assert!(
            stderr.contains("duration_s and run.duration_s both given"),
            "{name}: {stderr}"
        );
    }
}

/// `swdaq run --help` and `swdaq app --help` list every model with the table that picks it
/// and its application kinds, as the models declare them (not as the help text spells them).
#[test]
fn the_help_lists_every_model_with_its_table_and_kinds() {
    for command in ["run", "app"] {
        let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        for (model, table, kinds) in [
            ("chain", "default", "readout, trigger, dfo, builder"),
            ("evb", "[evb]", "evm, ru, bu"),
            ("swrod", "[swrod]", "swrod, hltsv, hlt"),
        ] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{model} ")))
                .unwrap_or_else(|| panic!("swdaq {command} --help lists no {model}:\n{help}"));
            assert!(
                line.contains(table) && line.ends_with(&format!("application kinds: {kinds}")),
                "{line}"
            );
        }
    }
}
