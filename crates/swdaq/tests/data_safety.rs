//! Data safety drills for every dataflow model (the chain, the event builder and the SW ROD,
//! each in one process and as applications), from the binary as a user runs it:
//! - a run never overwrites an earlier run's files: with no number it takes the next free one,
//!   a number that has files is refused before anything starts, naming one;
//! - a disk that fills up mid-run: every event ends in exactly one counter (written or lost),
//!   the summary says the run ended on storage, and what was written stays readable;
//! - a read-only output is named as such, not as a lack of space.
//!
//! The disk drills mount a tmpfs of their own (skipped with a message without the right to
//! mount). One run at a time: the machine has two cores.

mod common;
#[path = "common/disk.rs"]
mod disk;
use common::models::{EVERY_MODEL, Load, Model, config};
use common::swdaq_run;
use disk::{SmallDisk, settled_snapshot, snapshot};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run number `swdaq run` announced ("swdaq run N ...").
fn announced_run(o: &Output) -> u32 {
    let text = stderr(o);
    text.lines()
        .find_map(|l| {
            let n = l.strip_prefix("swdaq run ")?;
            n.split([' ', ':']).next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no run announced in:\n{text}"))
}

fn summary(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "summary not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

/// The files below `dir` whose name, or a directory's on their path, says they are `run`'s
/// (`run000007`, or an ATLAS raw file name's run field).
fn files_of_run(dir: &Path, run: u32) -> Vec<PathBuf> {
    snapshot(dir)
        .into_keys()
        .filter(|p| {
            p.strip_prefix(dir).unwrap().iter().any(|part| {
                swdaq_format::run_files::run_of_name(&part.to_string_lossy()) == Some(run)
            })
        })
        .collect()
}

#[test]
fn no_model_s_run_overwrites_an_earlier_run_s_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let first = swdaq_run(&config(dir.path(), model, &out, 0, Load::Short));
        assert!(first.status.success(), "{model:?}: {}", stderr(&first));
        assert_eq!(announced_run(&first), 1, "{model:?}");
        assert!(!files_of_run(&out, 1).is_empty(), "{model:?}");
        let after_first = snapshot(&out);

        // Again with no number: the next one, and run 1's files exactly as they were.
        let second = swdaq_run(&config(dir.path(), model, &out, 0, Load::Short));
        assert!(second.status.success(), "{model:?}: {}", stderr(&second));
        assert_eq!(announced_run(&second), 2, "{model:?}");
        assert!(!files_of_run(&out, 2).is_empty(), "{model:?}");
        let after_second = snapshot(&out);
        for (path, bytes) in &after_first {
            // The last number claimed, and the run registry, which records every run.
            if path.ends_with(".swdaq-last-run") || path.ends_with(swdaq_registry::SQLITE_FILE) {
                continue;
            }
            assert!(
                after_second.get(path) == Some(bytes),
                "{model:?}: run 2 changed {}",
                path.display()
            );
        }

        // Run 1 asked for by number: refused before anything starts, naming one of its files.
        let refused = swdaq_run(&config(dir.path(), model, &out, 1, Load::Short));
        assert!(!refused.status.success(), "{model:?}");
        let message = stderr(&refused);
        // It names a file or directory of run 1.
        let names_one = files_of_run(&out, 1).iter().any(|f| {
            f.iter().any(|part| {
                let part = part.to_string_lossy();
                swdaq_format::run_files::run_of_name(&part) == Some(1) && message.contains(&*part)
            })
        });
        assert!(
            message.contains("run 1 already has files") && names_one,
            "{model:?}: {message}"
        );
        assert_eq!(
            snapshot(&out),
            after_second,
            "{model:?}: the refused run wrote"
        );
    }
}

#[test]
fn the_chain_s_run_flag_is_refused_too_when_its_run_has_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let config = config(dir.path(), Model::Chain, &out, 0, Load::Short);
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["run", "--config"])
            .arg(&config)
            .args(extra)
            .output()
            .unwrap()
    };
    let first = run(&["--run", "7"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let before = snapshot(&out);
    let again = run(&["--run", "7"]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("run 7 already has files"),
        "{}",
        stderr(&again)
    );
    assert_eq!(snapshot(&out), before);
    // The quick start again and again: each time the next number.
    let next = run(&[]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert_eq!(announced_run(&next), 8);
}

/// What a model's summary says was triggered, written and lost, and why the run ended.
fn accounts(model: Model, s: &Value) -> (u64, u64, u64, String) {
    let u = |v: &Value| {
        v.as_u64()
            .unwrap_or_else(|| panic!("{model:?}: not a count: {v}"))
    };
    match model {
        Model::Chain | Model::ChainApps => {
            let storage = &s["storage"];
            (
                u(&s["trigger"]["decisions"]),
                u(&storage["records_written"]),
                u(&storage["records_not_written"]) + u(&s["records"]["not_stored"]),
                s["stop_reason"].to_string(),
            )
        }
        Model::Evb | Model::EvbApps => {
            assert_eq!(s["unaccounted"], 0, "{model:?}: {s}");
            (
                u(&s["triggered"]),
                u(&s["written"]),
                u(&s["lost"]),
                s["stop_reason"].to_string(),
            )
        }
        Model::Swrod => (
            u(&s["hlt"]["events"]),
            u(&s["stored_events"]),
            u(&s["unwritten_events"]),
            s["storage_error"].to_string(),
        ),
        // Every L1 accept given out: built by an HLT application and stored or unwritten,
        // or lost with an HLT application (by number).
        Model::SwrodApps => (
            u(&s["l1as_to_hlt"]),
            u(&s["stored_events"]),
            u(&s["unwritten_events"]) + u(&s["lost"]),
            s["storage_error"].to_string(),
        ),
    }
}

#[test]
fn a_disk_that_fills_up_leaves_every_event_in_exactly_one_counter() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let Some(disk) = SmallDisk::mount("12m") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let out = disk.path().join("out");
        let run = swdaq_run(&config(dir.path(), model, &out, 0, Load::Flood));
        let s = summary(&run);
        assert!(
            !run.status.success(),
            "{model:?}: the run must fail on a full disk: {s}\n{}",
            stderr(&run)
        );
        let (triggered, written, lost, why) = accounts(model, &s);
        eprintln!("{model:?}: {triggered} triggered = {written} written + {lost} lost; {why}");
        assert!(written > 0 && lost > 0, "{model:?}: {s}");
        assert_eq!(triggered, written + lost, "{model:?}: {s}");
        assert!(
            [
                "No space left on device",
                "not enough free space",
                "below the reserve"
            ]
            .iter()
            .any(|full| why.contains(full)),
            "{model:?}: ended for {why}"
        );
    }
}

#[test]
fn a_read_only_output_is_named_as_such() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let Some(disk) = SmallDisk::mount("4m") else {
            return;
        };
        std::fs::create_dir(disk.path().join("out")).unwrap();
        disk.make_read_only();
        let dir = tempfile::tempdir().unwrap();
        let run = swdaq_run(&config(
            dir.path(),
            model,
            &disk.path().join("out"),
            0,
            Load::Short,
        ));
        assert!(!run.status.success(), "{model:?}");
        let message = stderr(&run);
        assert!(
            message.contains("Read-only file system") && !message.contains("free space"),
            "{model:?}: {message}"
        );
    }
}

/// A run of `model` that goes on until a signal ends it, at a rate a loaded machine keeps.
fn long_run_config(dir: &Path, model: Model, out: &Path) -> PathBuf {
    let config = config(dir, model, out, 0, Load::Flood);
    let text = std::fs::read_to_string(&config).unwrap();
    let long = text
        .replace("duration_s = 6", "duration_s = 0")
        .replace("duration_s = 4", "duration_s = 0")
        .replace("trigger_rate_hz = 10000", "trigger_rate_hz = 2000")
        .replace("max_l1as = 400000", "max_l1as = 100000000")
        .replace("l1a_rate_hz = 0.0", "l1a_rate_hz = 5000.0");
    std::fs::write(&config, long).unwrap();
    config
}

/// `swdaq run` on `config` until it has run `after`, then `signal` (`TERM` or
/// `KILL`) to it; what it printed, once it ended (bounded).
fn run_and_signal(config: &Path, after: std::time::Duration, signal: &str) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--json", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run ends within 60 s of the signal")
        .unwrap()
}

#[test]
fn sigterm_ends_every_model_cleanly_with_its_counts_adding_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let config = long_run_config(dir.path(), model, &out);
        let run = run_and_signal(&config, std::time::Duration::from_secs(3), "TERM");
        assert!(run.status.success(), "{model:?}: {}", stderr(&run));
        let s = summary(&run);
        let (triggered, written, lost, _) = accounts(model, &s);
        assert!(triggered > 0, "{model:?}: {s}");
        assert_eq!((written, lost), (triggered, 0), "{model:?}: {s}");
        if model != Model::Swrod {
            assert_eq!(s["stop_reason"], "Interrupted", "{model:?}: {s}");
        }
        let leftovers: Vec<PathBuf> = settled_snapshot(&out)
            .into_keys()
            .filter(|p| {
                let name = p.to_string_lossy();
                [".tmp", ".part", ".writing"]
                    .iter()
                    .any(|e| name.ends_with(e))
            })
            .collect();
        assert!(leftovers.is_empty(), "{model:?}: left open: {leftovers:?}");
    }
}

/// `swdaq inspect --json` of one file: its report, or why there is none.
fn inspect(path: &Path) -> Result<Value, String> {
    let o = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).map_err(|_| stderr(&o))
}

#[test]
fn sigkill_changes_no_earlier_run_and_leaves_only_files_inspect_reads_or_names() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for model in EVERY_MODEL {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let first = swdaq_run(&config(dir.path(), model, &out, 0, Load::Short));
        assert!(first.status.success(), "{model:?}: {}", stderr(&first));
        let run_1 = snapshot(&out);
        // Killed mid-way with no chance to close anything.
        let config = long_run_config(dir.path(), model, &out);
        let killed = run_and_signal(&config, std::time::Duration::from_secs(3), "KILL");
        assert!(!killed.status.success(), "{model:?}");
        let after = settled_snapshot(&out);
        for (path, bytes) in &run_1 {
            if !path.ends_with(".swdaq-last-run") && !path.ends_with(swdaq_registry::SQLITE_FILE) {
                assert!(
                    after.get(path) == Some(bytes),
                    "{model:?}: {path:?} changed"
                );
            }
        }
        // Every data file of the killed run is read, or named for what it is (left open).
        let mut leftovers = 0;
        for path in after.keys().filter(|p| !run_1.contains_key(*p)) {
            let name = path.file_name().unwrap().to_string_lossy();
            if [".jsn", ".jsd", ".log", ".swdaq-last-run"]
                .iter()
                .any(|e| name.ends_with(e))
                || name.starts_with(swdaq_registry::SQLITE_FILE)
            {
                continue;
            }
            match inspect(path) {
                Ok(report) => {
                    assert!(report["format"].is_string(), "{model:?}: {name}: {report}");
                    leftovers += usize::from(report["left_open"].is_string());
                }
                // Nothing in it to read (killed before its first bytes left the buffer).
                Err(why) => {
                    assert!(why.contains("left open"), "{model:?}: {name}: {why}");
                    leftovers += 1;
                }
            }
        }
        eprintln!("{model:?}: killed run left {leftovers} files open, each named by inspect");
    }
}

/// A counter's total on a `/metrics` page (summed over its series), if it is there.
fn metric_total(page: &str, name: &str) -> Option<u64> {
    let values: Vec<u64> = page
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The SW ROD killed mid-run, as the issue saw it (`configs/swrod.toml` at 200 stored events
/// a second): its open file holds every event its live figures counted stored — they are
/// counted at the flush points that put them in the file — each whole; only what came after
/// the last flush point (at most `flush_interval_ms`) is lost.
#[test]
fn a_killed_sw_rod_s_open_file_holds_every_event_it_had_counted_stored() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/swrod.toml");
    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("l1a_rate_hz = 10000.0", "l1a_rate_hz = 200.0")
        .replace("hlt_accept_every = 10", "hlt_accept_every = 1");
    assert!(text.contains("l1a_rate_hz = 200.0") && text.contains("hlt_accept_every = 1"));
    let config = dir.path().join("swrod.toml");
    std::fs::write(&config, text).unwrap();
    let metrics = format!("127.0.0.1:{}", common::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args([
            "run",
            "--json",
            "--duration",
            "0",
            "--metrics",
            &metrics,
            "--out",
        ])
        .arg(&out)
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A second and a half of events counted stored (several flush points), then the kill at
    // once: nothing can be closed or flushed after the count was read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let stored = loop {
        let page = ureq::get(&format!("http://{metrics}/metrics"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok());
        let stored = page.and_then(|p| metric_total(&p, "swdaq_swrod_stored_events_total"));
        if stored.is_some_and(|n| n >= 300) || std::time::Instant::now() > deadline {
            break stored;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let killed = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    let stored = stored.unwrap_or_else(|| {
        panic!(
            "no stored events counted within 60 s:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(stored >= 300, "{stored} counted stored within 60 s");

    let mut in_files = 0;
    for path in snapshot(&out).into_keys() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".writing") {
            continue;
        }
        // Nothing readable (killed before its first bytes reached the file) holds nothing.
        let Ok(report) = inspect(&path) else {
            eprintln!("{name}: nothing readable");
            continue;
        };
        assert!(report["left_open"].is_string(), "{name}: {report}");
        // Its one problem is the end record a killed writer never wrote: every event whole.
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems.len() == 1
                && problems[0]["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("no file end record"),
            "{name}: {problems:?}"
        );
        in_files += report["events"].as_array().unwrap().len() as u64;
    }
    eprintln!("{stored} events counted stored, {in_files} in the killed run's open files");
    assert!(
        in_files >= stored,
        "{stored} events counted stored, only {in_files} in the files"
    );
}

/// Bytes free on the file system of `path`, as `df` sees them.
fn available_bytes(path: &Path) -> u64 {
    let df = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&df.stdout);
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// The SW ROD (one process, and as applications) on a disk that fills up with a reserve of
/// 1 MiB (`min_free_mb = 1`): the reserve stays free, the run fails naming the lack of space,
/// every file is closed (its end record fits in the reserve), and the summary's stored
/// events are exactly those `swdaq inspect` reads back from them.
#[test]
fn a_sw_rod_on_a_full_disk_keeps_its_reserve_and_stores_what_its_files_hold() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const RESERVE: u64 = 1 << 20;
    for model in [Model::Swrod, Model::SwrodApps] {
        let Some(disk) = SmallDisk::mount("4m") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let out = disk.path().join("out");
        let config = config(dir.path(), model, &out, 0, Load::Flood);
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace("min_free_mb = 0", "min_free_mb = 1")).unwrap();
        let run = swdaq_run(&config);
        let s = summary(&run);
        assert!(!run.status.success(), "{model:?}: {s}\n{}", stderr(&run));
        let (triggered, written, lost, why) = accounts(model, &s);
        assert!(why.contains("not enough free space"), "{model:?}: {why}");
        assert_eq!(triggered, written + lost, "{model:?}: {s}");
        // The run stops at the failure (it went on, every later event unwritten, to the
        // end of its 400 000 L1 accepts).
        assert!(
            s["stop_reason"]["StorageFailed"].is_string(),
            "{model:?}: {s}"
        );
        assert!(
            triggered < 100_000,
            "{model:?}: {triggered} events after the failure"
        );
        assert!(written > 0 && lost > 0, "{model:?}: {s}");
        // Two HLT applications may each pass the check, then both write a flush point.
        let free = available_bytes(disk.path());
        let kept = if model == Model::Swrod {
            RESERVE
        } else {
            RESERVE / 2
        };
        assert!(free >= kept, "{model:?}: {free} bytes left free");

        let mut in_files = 0;
        for path in settled_snapshot(&out).into_keys() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.')
                || name.ends_with(".log")
                || name.starts_with(swdaq_registry::SQLITE_FILE)
            {
                continue;
            }
            assert!(name.ends_with(".data"), "{model:?}: {name} left open");
            let report = inspect(&path).unwrap_or_else(|why| panic!("{name}: {why}"));
            assert_eq!(report["problems"], serde_json::json!([]), "{name}");
            in_files += report["events"].as_array().unwrap().len() as u64;
        }
        eprintln!("{model:?}: {written} stored, {in_files} in the files, {free} bytes free");
        assert_eq!(written, in_files, "{model:?}: {s}");
    }
}
