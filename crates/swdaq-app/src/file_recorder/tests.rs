use super::*;
use std::path::Path;
use std::time::SystemTime;
use swdaq_format::file_checksum::{FileChecksums, RunningChecksums};
use swdaq_registry::RunStart;

/// Each test its own run numbers: the writers' list is the process's.
fn claimed(location: &Location, run: u32) -> Registry {
    let mut registry = Registry::open(location).unwrap();
    let start = RunStart {
        run_type: "test".into(),
        model: "chain".into(),
        operator: "tests".into(),
        host: "localhost".into(),
        pid: std::process::id(),
        applications: Vec::new(),
        configuration: String::new(),
        software: swdaq_registry::software::get(),
        started_at: SystemTime::now(),
    };
    registry.claim(run, &start, |_| Ok(run)).unwrap();
    registry
}

/// A recorder trying every 20 ms.
fn quick(location: Location, run: u32) -> FileRecorder {
    FileRecorder::every(Duration::from_millis(20), location, run, "test".into())
}

/// Waits (at most 10 s) until `recorder` has failed `attempts` times.
fn failed_within(recorder: &FileRecorder, attempts: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while recorder.failures() < attempts && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        recorder.failures() >= attempts,
        "each failed attempt counted"
    );
}

fn sums(bytes: &[u8]) -> FileChecksums {
    let mut sums = RunningChecksums::default();
    sums.update(bytes);
    sums.finish()
}

/// Polls `registry` for run `run`'s files until `want` are on record, or 10 s.
fn files_within(registry: &mut Registry, run: u32, want: usize) -> Vec<swdaq_registry::FileRow> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let files = registry.files(run).unwrap();
        if files.len() >= want || Instant::now() > deadline {
            return files;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn files_are_on_record_as_they_close_with_checksums_read_back_and_once() {
    let dir = tempfile::tempdir().unwrap();
    let location = Location::Sqlite(dir.path().join("registry.sqlite"));
    let run = 4_200_001;
    let mut registry = claimed(&location, run);
    let recorder = quick(location.clone(), run);
    let written = dir.path().join("a.raw");
    std::fs::write(&written, b"written by swdaq").unwrap();
    file_checksum::note_closed(run, &written, Some(sums(b"written by swdaq")));
    // A file a C library wrote: no checksums from its writer, read back by the recorder.
    let hdf5 = dir.path().join("b.hdf5");
    std::fs::write(&hdf5, b"written by HDF5").unwrap();
    file_checksum::note_closed(run, &hdf5, None);
    let files = files_within(&mut registry, run, 2);
    assert_eq!(files.len(), 2, "on record before the stop: {files:?}");
    let by_path = |p: &Path| {
        files
            .iter()
            .find(|f| f.path == p.display().to_string())
            .unwrap()
    };
    assert_eq!(
        by_path(&hdf5).adler32,
        Some(sums(b"written by HDF5").adler32),
        "recorded only with its checksums read back"
    );
    assert_eq!(by_path(&written).bytes, 16);
    // Closed after the thread's last attempt: recorded by the stop's drain; the ones
    // recorded already stay once.
    recorder.finish(None).unwrap();
    let late = dir.path().join("c.raw");
    std::fs::write(&late, b"late").unwrap();
    let second = FileRecorder::every(Duration::from_secs(3600), location, run, "test".into());
    file_checksum::note_closed(run, &late, Some(sums(b"late")));
    file_checksum::note_closed(run, &written, Some(sums(b"written by swdaq")));
    second.finish(Some(&mut registry)).unwrap();
    let files = registry.files(run).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert!(paths.contains(&late.display().to_string().as_str()));
}

#[test]
fn a_registry_error_is_counted_and_the_files_are_recorded_later() {
    let dir = tempfile::tempdir().unwrap();
    let location = Location::Sqlite(dir.path().join("registry.sqlite"));
    let run = 4_200_002;
    // The run is not on record yet: the registry refuses its files (a foreign key).
    let recorder = quick(location.clone(), run);
    let path = dir.path().join("a.raw");
    std::fs::write(&path, b"kept").unwrap();
    file_checksum::note_closed(run, &path, Some(sums(b"kept")));
    failed_within(&recorder, 2);
    let mut registry = claimed(&location, run);
    let files = files_within(&mut registry, run, 1);
    assert_eq!(files.len(), 1, "tried again until recorded: {files:?}");
    assert_eq!(files[0].adler32, Some(sums(b"kept").adler32));
    recorder.finish(None).unwrap();
    assert_eq!(registry.files(run).unwrap().len(), 1);
}

#[test]
fn files_the_thread_could_not_record_are_recorded_at_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    // The thread's registry cannot be made (its directory is a file): every attempt fails.
    let blocked = dir.path().join("not-a-directory");
    std::fs::write(&blocked, b"").unwrap();
    let run = 4_200_003;
    let recorder = quick(Location::Sqlite(blocked.join("registry.sqlite")), run);
    let path = dir.path().join("a.hdf5");
    std::fs::write(&path, b"read back once").unwrap();
    file_checksum::note_closed(run, &path, None);
    failed_within(&recorder, 1);
    let mut registry = claimed(&Location::Sqlite(dir.path().join("registry.sqlite")), run);
    recorder.finish(Some(&mut registry)).unwrap();
    let files = registry.files(run).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].adler32, Some(sums(b"read back once").adler32));
}
