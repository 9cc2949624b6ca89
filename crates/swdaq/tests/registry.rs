//! The run registry (#38) end to end: every model's run — one process and as applications —
//! is on record with its files, whose sizes and checksums (Adler-32, CRC32C) match the files'
//! bytes as computed here by other crates than the writers'; every such file names the run's
//! registry and software as the record has them, as `swdaq inspect` shows; a SIGKILLed run
//! stays on record as not ended, with the files it closed while it ran, and the next start
//! says so; `swdaq ctl log` reaches `swdaq runs show`. With a real PostgreSQL server (started by the test, skipped with a line where
//! there is none) the same, and two `swdaq serve` sharing it never hand out one number.

mod common;
use common::models::{EVERY_MODEL, Load, Model, config};
use common::served::Served;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use swdaq_test_postgres::TestPostgres;

fn swdaq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(args)
        .output()
        .unwrap()
}

/// `swdaq runs show N --json` of the registry `config` names.
fn runs_show(config: &Path, number: u64) -> Output {
    swdaq(&[
        "runs",
        "show",
        &number.to_string(),
        "--json",
        "--config",
        config.to_str().unwrap(),
    ])
}

/// [`runs_show`] that must succeed: what is on record of run `number`.
fn show(config: &Path, number: u64) -> Value {
    let out = runs_show(config, number);
    assert!(
        out.status.success(),
        "swdaq runs show failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_model_s_run_is_on_record_with_its_files_and_their_checksums() {
    for model in EVERY_MODEL {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = config(dir.path(), model, &out, 0, Load::Short);
        let sqlite = out.join("swdaq-runs.sqlite").display().to_string();
        a_run_is_on_record_with_its_files(model, &cfg, &sqlite);
    }
}

#[test]
fn a_run_with_a_postgresql_registry_is_on_record_there_with_its_files() {
    let Some(server) = TestPostgres::start_or_skip("a run with a PostgreSQL registry") else {
        return;
    };
    // In one process, and as applications each adding the files it closed.
    for model in [Model::Chain, Model::ChainApps] {
        let url = server.create_database().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = with_registry(config(dir.path(), model, &out, 0, Load::Short), Some(&url));
        let number = a_run_is_on_record_with_its_files(model, &cfg, &url);
        assert!(
            !out.join("swdaq-runs.sqlite").exists(),
            "{model:?}: an SQLite registry beside the PostgreSQL one"
        );
        let listed = swdaq(&["runs", "--json", "--registry", &url]);
        assert!(listed.status.success(), "{listed:?}");
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
        assert_eq!(listed[0]["number"], number, "{listed}");
        let shown = swdaq(&[
            "runs",
            "show",
            &number.to_string(),
            "--json",
            "--registry",
            &url,
        ]);
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(
            shown,
            show(&cfg, number),
            "--registry and --config read one record"
        );
    }
}

/// `config` with its `[run]` naming `registry` (`None`: as it is, with the output
/// directory's SQLite file).
fn with_registry(config: PathBuf, registry: Option<&str>) -> PathBuf {
    let Some(registry) = registry else {
        return config;
    };
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with("[run]\n"), "{text}");
    let text = text.replacen("[run]\n", &format!("[run]\nregistry = {registry:?}\n"), 1);
    std::fs::write(&config, text).unwrap();
    config
}

/// Runs `cfg` (of `model`) to its end and checks its record in the registry it names
/// (`registry`, as its files must name it): the summary, the configuration, the software,
/// the applications, and every file on disk with its size, checksums and provenance. Its
/// run number.
fn a_run_is_on_record_with_its_files(model: Model, cfg: &Path, registry: &str) -> u64 {
    let summary = common::swdaq_run_json(cfg);
    let number = summary["run_number"].as_u64().unwrap();
    let record = show(cfg, number);
    assert_eq!(record["number"], number, "{model:?}");
    assert!(record["stopped_at"].is_string(), "{model:?}: {record}");
    assert_eq!(
        record["stop_reason"], summary["stop_reason_text"],
        "{model:?}"
    );
    assert_eq!(record["summary"], summary, "{model:?}");
    assert_eq!(record["run_type"], "test");
    assert!(record["configuration"].as_str().unwrap().contains("[run]"));
    assert!(
        record["software"]["commit"].as_str().unwrap().len() >= 40,
        "{record}"
    );
    let apps = record["applications"].as_array().unwrap();
    assert!(!apps.is_empty(), "{model:?}");
    let files = record["files"].as_array().unwrap();
    assert!(
        !files.is_empty(),
        "{model:?}: no files on record: {}",
        summary["storage"]
    );
    let mut checked = 0;
    for f in files {
        let path = Path::new(f["path"].as_str().unwrap());
        // The event builder's filter-farm stand-in deletes the files it has read.
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        assert_eq!(f["bytes"], bytes.len() as u64, "{}", path.display());
        assert_eq!(
            f["adler32"],
            adler2::adler32_slice(&bytes),
            "{}",
            path.display()
        );
        assert_eq!(f["crc32c"], crc32c::crc32c(&bytes), "{}", path.display());
        // The event builder's bookkeeping (`.jsn`, `jsd/` definitions): on record and
        // transferred with the data, its provenance shown with its data file's.
        if path.extension().is_some_and(|e| e == "jsn" || e == "jsd") {
            continue;
        }
        assert_eq!(
            inspected_provenance(path, number),
            provenance_of(&record, registry),
            "{model:?}: {}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked > 0, "{model:?}: no file on record is on disk");
    number
}

/// What every file of a run must name: the run's software and type as `record` has them,
/// and its registry.
fn provenance_of(record: &Value, registry: &str) -> Value {
    let software = &record["software"];
    serde_json::json!({
        "version": software["version"],
        "git_commit": software["commit"],
        "build_profile": software["profile"],
        "build_flags": software["flags"],
        "run_registry": registry,
        "run_type": record["run_type"],
    })
}

/// The provenance `swdaq inspect --json` reports of the file of run `number` at `path`,
/// whatever its format (an FRD file's is its `.jsn`'s, with the run number, checked here),
/// after checking its text report shows each fact.
fn inspected_provenance(path: &Path, number: u64) -> Value {
    let path_text = path.to_str().unwrap();
    let out = swdaq(&["inspect", "--json", path_text]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{path_text}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let facts = if let Some(hdf5) = report["attributes"]["provenance"].as_object() {
        hdf5.clone()
    } else if let Some(pairs) = report["head"]["provenance"].as_array() {
        (pairs.iter())
            .map(|pair| (pair[0].as_str().unwrap().to_string(), pair[1].clone()))
            .collect()
    } else {
        let mut frd = report["provenance"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(frd.remove("run_number"), Some(number.into()), "{report}");
        frd
    };
    let text = String::from_utf8_lossy(&swdaq(&["inspect", path_text]).stdout).into_owned();
    for (name, value) in &facts {
        let line = format!("provenance {name}: {}", value.as_str().unwrap());
        assert!(text.contains(&line), "{line:?} not in\n{text}");
    }
    Value::Object(facts)
}

/// Waits (bounded) until run `number` of `config`'s registry is on record.
fn wait_on_record(config: &Path, number: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = runs_show(config, number);
        if out.status.success() {
            return;
        }
        assert!(Instant::now() < deadline, "run {number} never on record");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_killed_run_is_on_record_as_not_ended_and_the_next_start_says_so() {
    a_killed_run_is_named_at_the_next_start(None);
}

#[test]
fn a_killed_run_is_on_record_as_not_ended_in_postgresql_and_the_next_start_says_so() {
    let Some(server) = TestPostgres::start_or_skip("a killed run in PostgreSQL") else {
        return;
    };
    a_killed_run_is_named_at_the_next_start(Some(&server.create_database().unwrap()));
}

/// A chain run SIGKILLed while it takes data, then a short one, with `registry` (`None`: the
/// output directory's SQLite file).
fn a_killed_run_is_named_at_the_next_start(registry: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let registered = |cfg| with_registry(cfg, registry);
    let until_stopped = registered(config(
        dir.path(),
        Model::Chain,
        &out,
        0,
        Load::UntilStopped,
    ));
    // Files of 2 records: several close while the run goes on.
    let text = std::fs::read_to_string(&until_stopped).unwrap();
    let text = text.replace("[storage]\n", "[storage]\nmax_records_per_file = 2\n");
    std::fs::write(&until_stopped, text).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--json", "--config"])
        .arg(&until_stopped)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_on_record(&until_stopped, 1);
    // Its closed files are on record as they close, so a killed run keeps them.
    let started = Instant::now();
    while show(&until_stopped, 1)["files"].as_array().unwrap().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no closed file on record while the run goes on"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    let killed = show(&until_stopped, 1);
    assert!(killed["stopped_at"].is_null(), "{killed}");
    assert!(killed["stop_reason"].is_null(), "{killed}");
    for f in killed["files"].as_array().unwrap() {
        // HDF5 files: checksums read back after their close, recorded only with them.
        let bytes = std::fs::read(f["path"].as_str().unwrap()).unwrap();
        assert_eq!(f["bytes"], bytes.len() as u64, "{f}");
        assert_eq!(f["adler32"], adler2::adler32_slice(&bytes), "{f}");
    }

    let short = registered(config(dir.path(), Model::Chain, &out, 0, Load::Short));
    let next = common::swdaq_run(&short);
    assert!(next.status.success());
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert!(stderr.contains("run 1 was not ended"), "{stderr}");
    let summary: Value = serde_json::from_slice(&next.stdout).unwrap();
    assert_eq!(summary["run_number"], 2);
    let killed = show(&short, 1);
    assert!(killed["stopped_at"].is_null(), "{killed}");
    assert!(
        killed["stop_reason"]
            .as_str()
            .unwrap()
            .starts_with("not ended"),
        "{killed}"
    );
    // Named once: the start after says nothing of it.
    let again = common::swdaq_run(&short);
    assert!(!String::from_utf8_lossy(&again.stderr).contains("was not ended"));
}

#[test]
fn a_logbook_entry_from_ctl_appears_in_runs_show() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(dir.path(), Model::Chain, &out, 0, Load::UntilStopped);
    let server = Served::start(&cfg);
    let ctl = |args: &[&str]| server.ctl(args);
    ctl(&["configure"]);
    let started = ctl(&["start"]);
    let number = started["run_number"].as_u64().unwrap();
    // Long enough for records, and a file closed at the stop.
    std::thread::sleep(Duration::from_secs(2));
    let logged = ctl(&["log", "beam lost at 02:14", "--author", "shifter"]);
    assert_eq!(logged["run_number"], number);
    ctl(&["stop"]);
    ctl(&["log", "after the stop, to the last run"]);
    drop(server);
    let record = show(&cfg, number);
    let entries = record["logbook"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{record}");
    assert_eq!(entries[0]["text"], "beam lost at 02:14");
    assert_eq!(entries[0]["author"], "shifter");
    assert_eq!(entries[1]["text"], "after the stop, to the last run");
    assert!(record["stopped_at"].is_string(), "{record}");
    assert!(!record["files"].as_array().unwrap().is_empty(), "{record}");
}

#[test]
fn a_bad_registry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, vec![0x42; 4096]).unwrap();
    let out = swdaq(&["runs", "--registry", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.sqlite") && stderr.contains("not a database"),
        "{stderr}"
    );
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nduration_s = 1\nmetrics_addr = \"\"\noutput_dir = {:?}\nregistry = \"postgresql://nobody@127.0.0.1:1/runs\"\n",
            dir.path().join("out")
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = common::swdaq_run(&cfg);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run registry postgresql://nobody@127.0.0.1:1/runs"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn two_servers_sharing_a_postgresql_registry_never_hand_out_one_number() {
    // Each with an SQLite registry in its own output directory, two servers know nothing of
    // each other's runs: the same numbers, round after round.
    let apart = numbers_of_simultaneous_starts(None, 2);
    assert!(
        apart.iter().all(|(a, b)| a == b),
        "separate registries: {apart:?}"
    );
    let Some(server) = TestPostgres::start_or_skip("two servers sharing a PostgreSQL registry")
    else {
        return;
    };
    let url = server.create_database().unwrap();
    let shared = numbers_of_simultaneous_starts(Some(&url), 5);
    let mut numbers: Vec<u64> = shared.iter().flat_map(|&(a, b)| [a, b]).collect();
    numbers.sort();
    numbers.dedup();
    assert_eq!(
        numbers.len(),
        2 * shared.len(),
        "one number twice: {shared:?}"
    );
    let listed = swdaq(&["runs", "--json", "--registry", &url]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let on_record: Vec<u64> = (listed.as_array().unwrap().iter())
        .map(|run| {
            assert!(run["stopped_at"].is_string(), "{run}");
            run["number"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(on_record, numbers, "every run of both servers on record");
}

/// Two `swdaq serve`, each writing to a directory of its own with `registry` (`None`: an
/// SQLite file in that directory), both asked to start at the same moment, `rounds` times
/// (each run stopped before the next round): the run numbers each round's starts got.
fn numbers_of_simultaneous_starts(registry: Option<&str>, rounds: usize) -> Vec<(u64, u64)> {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let servers: Vec<Served> = (dirs.iter())
        .map(|dir| {
            let out = dir.path().join("out");
            let cfg = config(dir.path(), Model::Chain, &out, 0, Load::UntilStopped);
            Served::start(&with_registry(cfg, registry))
        })
        .collect();
    let clients: Vec<_> = servers.iter().map(Served::client).collect();
    let ask = |client: &swdaq_app::control::client::Client, path: &str| {
        (client
            .post(path, None)
            .and_then(|answer| answer.into_result()))
        .unwrap_or_else(|e| panic!("POST {path}: {e:#}"))
    };
    for client in &clients {
        ask(client, "/configure");
    }
    let both_at_once = std::sync::Barrier::new(clients.len());
    (0..rounds)
        .map(|_| {
            let numbers: Vec<u64> = std::thread::scope(|s| {
                let starts: Vec<_> = (clients.iter())
                    .map(|client| {
                        s.spawn(|| {
                            both_at_once.wait();
                            ask(client, "/start")["run_number"].as_u64().unwrap()
                        })
                    })
                    .collect();
                starts.into_iter().map(|s| s.join().unwrap()).collect()
            });
            for client in &clients {
                ask(client, "/stop");
            }
            (numbers[0], numbers[1])
        })
        .collect()
}
