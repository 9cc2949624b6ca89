//! Crash safety: a writer killed (SIGKILL) at random points leaves a `.writing` file from which
//! every record flushed before the kill reads back whole and `inspect` lists them, saying the
//! file was not closed. The writer is the `crash_writer` example, which `cargo test` builds.
//! `SWDAQ_CRASH_KILLS=N` kills N times instead of 20 (for longer local runs);
//! `SWDAQ_CRASH_MAX_RECORDS=N` lets files grow to N records instead of 40 (HDF5's metadata
//! cache starts evicting after a few hundred); `SWDAQ_CRASH_SEED` repeats a run.

use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use swdaq_store::RecordFileReader;
use swdaq_store::inspect::{inspect, render};
use swdaq_store::sample::track_record;

const FLUSH_EVERY_RECORDS: u64 = 4;

fn crash_writer() -> PathBuf {
    // Integration tests run from target/<profile>/deps; examples are built next to it.
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/crash_writer");
    assert!(
        path.exists(),
        "{} is missing: run the whole package's tests (`cargo test -p swdaq-store`), which build the examples",
        path.display()
    );
    path
}

/// Starts a writer in `dir`, kills it once it has printed `records` records plus `extra` (so in
/// the middle of a later write or flush), and returns the last record it said was written.
fn write_and_kill(dir: &Path, records: u64, extra: Duration) -> u64 {
    let mut child = Command::new(crash_writer())
        .arg(dir)
        .arg(FLUSH_EVERY_RECORDS.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = 0;
    while last < records {
        last = lines
            .next()
            .expect("the writer ended")
            .unwrap()
            .parse()
            .unwrap();
    }
    std::thread::sleep(extra);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Lines written before the kill are still in the pipe.
    lines
        .map_while(Result::ok)
        .fold(last, |_, l| l.parse().unwrap())
}

fn the_writing_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with(".hdf5.writing"));
    files[0].clone()
}

#[test]
fn every_flushed_record_survives_a_kill_at_random_points() {
    let setting = |name, default| std::env::var(name).map_or(default, |n| n.parse().unwrap());
    let kills: u64 = setting("SWDAQ_CRASH_KILLS", 20);
    let max_records: u64 = setting("SWDAQ_CRASH_MAX_RECORDS", 40);
    let seed: u64 =
        std::env::var("SWDAQ_CRASH_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    println!("SWDAQ_CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let base = std::env::temp_dir().join(format!("swdaq-crash-{}", std::process::id()));
    for kill in 0..kills {
        let dir = base.join(kill.to_string());
        let records = rng.random_range(1..=max_records);
        let extra = Duration::from_micros(rng.random_range(0..3000));
        let printed = write_and_kill(&dir, records, extra);
        let flushed = printed / FLUSH_EVERY_RECORDS * FLUSH_EVERY_RECORDS;
        let path = the_writing_file(&dir);
        let context = format!(
            "kill {kill} after record {printed} (+{extra:?}), {}",
            path.display()
        );

        let reader = RecordFileReader::open(&path).unwrap_or_else(|e| panic!("{context}: {e}"));
        let ids = reader.record_ids().unwrap();
        assert!(
            ids.len() as u64 >= flushed,
            "{context}: {} records listed",
            ids.len()
        );
        for id in ids.iter().take(flushed as usize) {
            let read = reader
                .read_record(id)
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(read, track_record(id.trigger_number).record, "{context}");
        }
        assert_eq!(
            ids.iter()
                .take(flushed as usize)
                .map(|id| id.trigger_number)
                .collect::<Vec<_>>(),
            (1..=flushed).collect::<Vec<_>>(),
            "{context}"
        );
        drop(reader);

        let report = inspect(&path, None).unwrap_or_else(|e| panic!("{context}: {e}"));
        assert!(report.attributes.closing_timestamp.is_none());
        let readable = report.readable_records();
        assert!(
            readable >= flushed as usize,
            "{context}: {readable} readable"
        );
        let text = render(&report);
        assert!(
            text.contains(&format!(
                "not closed (writer stopped or killed), {readable} records readable"
            )),
            "{context}: {text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::remove_dir_all(&base).unwrap();
}
