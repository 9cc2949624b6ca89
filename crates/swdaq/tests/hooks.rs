//! `[run.hooks]` end to end with the real binary: a failing `pre_start` refuses the start
//! with its output and the run's record says so; `post_stop` sees the run's number and stop
//! reason; a hook past its time limit is killed and its transition goes on as specified,
//! in bounded time; `swdaq runs show` lists what the hooks printed; `swdaq serve` runs the
//! same hooks around its configure, start and stop.

mod common;
use common::served::Served;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A one-second run of the chain writing to `dir/out`, with `hooks` as `[run.hooks]`.
fn config(dir: &Path, hooks: &str) -> PathBuf {
    let path = dir.join("run.toml");
    std::fs::write(
        &path,
        format!(
            "[run]\nduration_s = 1\nmetrics_addr = \"\"\noutput_dir = {:?}\n\n[run.hooks]\n{hooks}\n",
            dir.join("out")
        ),
    )
    .unwrap();
    path
}

fn runs_show(config: &Path, number: u64, json: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_swdaq"));
    command
        .args(["runs", "show", &number.to_string(), "--config"])
        .arg(config);
    if json {
        command.arg("--json");
    }
    command.output().unwrap()
}

fn record(config: &Path, number: u64) -> Value {
    let out = runs_show(config, number, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "hdf5" || x == "writing"))
        .collect()
}

#[test]
fn a_failing_pre_start_refuses_the_start_with_its_output_on_record() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        r#"pre_start = ["sh", "-c", "echo no beam permit for run $SWDAQ_RUN_NUMBER; exit 3"]"#,
    );
    let out = common::swdaq_run(&cfg);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("start refused") && stderr.contains("no beam permit for run 1"),
        "{stderr}"
    );
    assert!(data_files(dir.path()).is_empty(), "no data taken");
    let run = record(&cfg, 1);
    let reason = run["stop_reason"].as_str().unwrap();
    assert!(reason.contains("pre_start"), "{run}");
    let hooks = run["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{run}");
    assert_eq!(hooks[0]["hook"], "pre_start");
    assert_eq!(hooks[0]["ended"]["code"], 3);
    assert!(
        hooks[0]["output"]
            .as_str()
            .unwrap()
            .contains("no beam permit")
    );
}

#[test]
fn post_stop_sees_the_run_number_and_stop_reason_and_runs_show_lists_every_hook() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.txt");
    let cfg = config(
        dir.path(),
        &format!(
            r#"pre_configure = ["echo", "configuring"]
post_start = ["sh", "-c", "echo started run $SWDAQ_RUN_NUMBER"]
post_stop = ["sh", "-c", "echo \"$SWDAQ_RUN_NUMBER|$SWDAQ_STOP_REASON|$SWDAQ_TRANSITION\" > '{}'; echo stopped"]"#,
            seen.display()
        ),
    );
    let summary = common::swdaq_run_json(&cfg);
    let number = summary["run_number"].as_u64().unwrap();
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        seen.trim(),
        format!(
            "{number}|{}|stop",
            summary["stop_reason_text"].as_str().unwrap()
        )
    );
    let shown = runs_show(&cfg, number, false);
    let text = String::from_utf8_lossy(&shown.stdout);
    let lines: Vec<&str> = text.lines().collect();
    for (hook, printed) in [
        ("pre_configure", "configuring".to_string()),
        ("post_start", format!("started run {number}")),
        ("post_stop", "stopped".to_string()),
    ] {
        let at = lines.iter().position(|l| l.trim_start().starts_with(hook));
        let at = at.unwrap_or_else(|| panic!("{hook} not shown: {text}"));
        assert!(lines[at].contains("exited with status 0"), "{text}");
        assert_eq!(lines[at + 1].trim(), format!("| {printed}"), "{text}");
    }
}

#[test]
fn hooks_past_their_time_limit_are_killed_and_the_transition_goes_as_specified() {
    let dir = tempfile::tempdir().unwrap();
    // A pre_start past its limit refuses the start, soon after the limit.
    let refused = config(
        dir.path(),
        "timeout_s = 0.5\npre_start = [\"sleep\", \"30\"]",
    );
    let started = Instant::now();
    let out = common::swdaq_run(&refused);
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{stderr}");
    let run = record(&refused, 1);
    assert_eq!(run["hooks"][0]["ended"]["how"], "timed_out", "{run}");

    // A post_stop past its limit does not undo the stop: the run ends well.
    let after = config(
        dir.path(),
        "timeout_s = 0.5\npost_stop = [\"sleep\", \"30\"]",
    );
    let started = Instant::now();
    let out = common::swdaq_run(&after);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let run = record(&after, 2);
    assert!(run["stopped_at"].is_string(), "{run}");
    assert_eq!(run["hooks"][0]["hook"], "post_stop");
    assert_eq!(run["hooks"][0]["ended"]["how"], "timed_out", "{run}");
}

/// Under `swdaq serve`: the configure hooks run at configure; a refusing `pre_start` answers
/// the start with its output, the run on record as refused and the server still configured;
/// with the permit, the next run takes data and every hook of it is on record.
#[test]
fn under_swdaq_serve_a_refusing_pre_start_answers_the_start_and_every_hook_is_on_record() {
    let dir = tempfile::tempdir().unwrap();
    let permit = dir.path().join("permit");
    let cfg = dir.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[run]
duration_s = 60
metrics_addr = ""
output_dir = {out:?}

[run.hooks]
pre_configure = ["echo", "checking HV"]
pre_start = ["sh", "-c", "test -e '{permit}' || {{ echo no beam permit for run $SWDAQ_RUN_NUMBER; exit 3; }}"]
post_start = ["sh", "-c", "echo started run $SWDAQ_RUN_NUMBER"]
pre_stop = ["sh", "-c", "echo stopping: $SWDAQ_STOP_REASON"]
post_stop = ["sh", "-c", "echo stopped run $SWDAQ_RUN_NUMBER"]
"#,
            out = dir.path().join("out"),
            permit = permit.display()
        ),
    )
    .unwrap();
    let server = Served::start(&cfg);
    server.ctl(&["configure"]);
    let refused = server.ctl_output(&["start"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("start refused") && said.contains("no beam permit for run 1"),
        "{said}"
    );
    assert_eq!(server.ctl(&["status"])["state"], "configured");
    assert!(data_files(dir.path()).is_empty(), "no data taken");

    std::fs::write(&permit, "").unwrap();
    let number = server.ctl(&["start"])["run_number"].as_u64().unwrap();
    assert_eq!(number, 2);
    std::thread::sleep(Duration::from_millis(1500));
    server.ctl(&["stop"]);
    drop(server);
    assert!(!data_files(dir.path()).is_empty(), "run 2 took data");

    let refused = record(&cfg, 1);
    assert!(
        refused["stop_reason"]
            .as_str()
            .unwrap()
            .contains("pre_start"),
        "{refused}"
    );
    let hooks_of = |run: &Value| -> Vec<(String, i64, String)> {
        run["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["hook"].as_str().unwrap().to_owned(),
                    h["ended"]["code"].as_i64().unwrap_or(-1),
                    h["output"].as_str().unwrap().trim().to_owned(),
                )
            })
            .collect()
    };
    // The configure hooks prepared the first run started after them.
    assert_eq!(
        hooks_of(&refused),
        [
            ("pre_configure".into(), 0, "checking HV".into()),
            ("pre_start".into(), 3, "no beam permit for run 1".into()),
        ]
    );
    let taken = record(&cfg, 2);
    let hooks = hooks_of(&taken);
    let names: Vec<&str> = hooks.iter().map(|(h, _, _)| h.as_str()).collect();
    assert_eq!(
        names,
        ["pre_start", "post_start", "pre_stop", "post_stop"],
        "{taken}"
    );
    assert!(hooks.iter().all(|(_, code, _)| *code == 0), "{taken}");
    assert_eq!(hooks[1].2, "started run 2");
    assert!(hooks[2].2.starts_with("stopping: "), "{taken}");
    assert_eq!(hooks[3].2, "stopped run 2");
}
