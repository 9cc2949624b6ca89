//! Transfers against real destinations and a real registry (SQLite): an XRootD server started
//! here on loopback (skipped with a line where there is none) and a directory. Each test's
//! files are written here, their checksums computed by `swdaq-format`'s reading of them, and
//! recorded as a run's files as the writers would at the stop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use swdaq_format::file_checksum::{ClosedFile, read_checksums};
use swdaq_registry::{Application, Location, Registry, RunStart, TransferState};
use swdaq_test_xrootd::TestXrootd;
use swdaq_transfer::{Agent, Backoff, Destination, Settings, Stop, catch_up, recheck};

/// A run on record in a new SQLite registry under `dir`, with `sizes.len()` files of those
/// sizes in `dir/out`; the registry's location and the files.
fn run_with_files(dir: &Path, sizes: &[usize]) -> (Location, Vec<PathBuf>) {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let location = Location::parse("", &out).unwrap();
    let mut registry = Registry::open(&location).unwrap();
    let start = RunStart {
        run_type: "test".into(),
        model: "chain".into(),
        operator: "test".into(),
        host: "here".into(),
        pid: std::process::id(),
        applications: vec![Application {
            name: "chain".into(),
            kind: "chain".into(),
            host: "here".into(),
        }],
        configuration: String::new(),
        software: swdaq_registry::software::get(),
        started_at: SystemTime::now(),
    };
    let run = registry.claim(0, &start, |_| Ok(1)).unwrap();
    let mut paths = Vec::new();
    let mut closed = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let path = out.join(format!("swdaq_run000001_{i:04}.raw"));
        let bytes: Vec<u8> = (0..size).map(|b| (b * 31 + i * 7) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        closed.push(ClosedFile {
            run,
            path: path.clone(),
            checksums: Some(read_checksums(&path).unwrap()),
            closed_at: SystemTime::now(),
        });
        paths.push(path);
    }
    registry.add_files(&closed).unwrap();
    registry
        .end_run(run, "test", &serde_json::json!({}))
        .unwrap();
    (location, paths)
}

fn settings(destination: Destination, out: &Path) -> Settings {
    Settings {
        retry: Backoff {
            first: Duration::from_millis(200),
            max: Duration::from_secs(1),
        },
        poll: Duration::from_millis(100),
        copy_timeout: Duration::from_secs(20),
        query_timeout: Duration::from_secs(5),
        output_dir: Some(out.to_path_buf()),
        ..Settings::new(destination)
    }
}

fn transfers(location: &Location) -> Vec<swdaq_registry::TransferRow> {
    Registry::open(location).unwrap().transfers(1).unwrap()
}

/// Every file has a verified row, and its copy under `copies` has its bytes.
fn all_verified_with_matching_copies(location: &Location, files: &[PathBuf], copies: &Path) {
    let rows = transfers(location);
    assert_eq!(rows.len(), files.len(), "{rows:?}");
    for (row, file) in rows.iter().zip(files) {
        assert_eq!(row.state, TransferState::Verified, "{row:?}");
        let name = file.file_name().unwrap();
        let copy = read_checksums(&copies.join(name)).unwrap();
        assert_eq!(row.verified_adler32, Some(copy.adler32), "{row:?}");
        if file.exists() {
            assert_eq!(read_checksums(file).unwrap(), copy, "{}", file.display());
        }
        assert!(row.verified_at.is_some(), "{row:?}");
    }
    let parts: Vec<_> = std::fs::read_dir(copies)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".swdaq-part"))
        .collect();
    assert!(parts.is_empty(), "copies under way left: {parts:?}");
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn files_reach_xrootd_verified_and_a_corrupted_copy_is_copied_again() {
    let Some(server) = TestXrootd::start_or_skip("files reach xrootd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (location, files) = run_with_files(dir.path(), &[1000, 300_000, 0]);
    let dest = Destination::parse(&server.url("/eos/raw")).unwrap();
    let s = settings(dest, &dir.path().join("out"));
    // A copy already at one file's final name, corrupted (a transfer of an older swdaq, a
    // disk's fault): detected by its checksum and replaced.
    let copies = server.export().join("eos/raw");
    let name = files[1].file_name().unwrap().to_str().unwrap();
    server.write_behind(&format!("/eos/raw/{name}"), b"not the file");
    let status = catch_up(
        s.clone(),
        location.clone(),
        Duration::from_secs(30),
        Stop::default(),
        None,
    );
    assert_eq!(status.backlog.files, 0, "{status:?}");
    assert_eq!(
        (status.verified, status.corrupt_found),
        (3, 1),
        "{status:?}"
    );
    all_verified_with_matching_copies(&location, &files, &copies);
    assert!(
        files.iter().all(|f| f.exists()),
        "kept: no delete configured"
    );

    // A verified copy corrupted afterwards: a recheck finds it, the next pass copies again.
    let victim = copies.join(files[0].file_name().unwrap());
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[10] ^= 0xff;
    server.write_behind(
        &format!(
            "/eos/raw/{}",
            files[0].file_name().unwrap().to_str().unwrap()
        ),
        &bytes,
    );
    // A rewrite with a time of its own: the server keeps a checksum with the modification
    // time it was computed for and recomputes it only for a file changed since (a change in
    // the same second, or one that keeps the time, it does not see).
    let later = SystemTime::now() + Duration::from_secs(2);
    (std::fs::File::options().write(true).open(&victim).unwrap())
        .set_modified(later)
        .unwrap();
    let found = recheck(&s, &location, &Stop::default()).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("corrupted"), "{found:?}");
    let row = &transfers(&location)[0];
    assert_eq!(row.state, TransferState::Pending, "{row:?}");
    let status = catch_up(
        s,
        location.clone(),
        Duration::from_secs(30),
        Stop::default(),
        None,
    );
    assert_eq!(status.verified, 1, "{status:?}");
    all_verified_with_matching_copies(&location, &files, &copies);
}

#[test]
fn a_transfer_interrupted_by_the_server_stopping_resumes_once_it_is_back() {
    let Some(mut server) = TestXrootd::start_or_skip("an interrupted transfer") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // One large file, copied long enough to be cut, then small ones.
    let (location, files) = run_with_files(dir.path(), &[128 << 20, 5000, 6000]);
    let dest = Destination::parse(&server.url("/raw")).unwrap();
    let agent = Agent::start(
        settings(dest, &dir.path().join("out")),
        location.clone(),
        None,
    )
    .unwrap();
    let copies = server.export().join("raw");
    let big = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let part = copies.join(format!("{big}.swdaq-part"));
    // Cut mid-copy when the copy under way shows (or, on a machine that copied it before
    // we looked, at once).
    let started = Instant::now();
    while !part.exists() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let cut_mid_copy = part.exists() && !copies.join(&big).exists();
    server.stop();
    wait_until(
        "a failed attempt on record",
        Duration::from_secs(30),
        || agent.status().backlog.failed >= 1,
    );
    let rows = transfers(&location);
    assert!(
        rows.iter().any(|r| r.state == TransferState::Retrying
            && r.attempts >= 1
            && r.last_error.is_some()
            && r.next_try_at.is_some()),
        "{rows:?}"
    );
    if cut_mid_copy {
        assert!(
            !copies.join(&big).exists(),
            "a half copy under the final name"
        );
    } else {
        eprintln!("note: the large file was copied before the server was stopped");
    }
    let backlog = agent.status().backlog;
    assert!(backlog.files >= 1 && backlog.failed >= 1, "{backlog:?}");
    server.restart().unwrap();
    assert!(
        agent.wait_empty(Duration::from_secs(40)),
        "{:?}",
        agent.status()
    );
    let stopped = Instant::now();
    let status = agent.stop(Duration::from_secs(5)).unwrap();
    assert!(stopped.elapsed() < Duration::from_secs(5));
    assert_eq!(status.backlog.files, 0, "{status:?}");
    all_verified_with_matching_copies(&location, &files, &copies);
    assert!(transfers(&location)[0].attempts >= 2);
}

#[test]
fn nothing_is_deleted_before_it_is_verified_and_with_delete_configured_it_is_after() {
    let Some(mut server) = TestXrootd::start_or_skip("delete after verify") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (location, files) = run_with_files(dir.path(), &[4000, 9000]);
    let dest = Destination::parse(&server.url("/raw")).unwrap();
    let s = Settings {
        delete_after_verify: true,
        ..settings(dest, &dir.path().join("out"))
    };
    // The server down: every attempt fails, nothing is deleted.
    server.stop();
    let status = catch_up(
        s.clone(),
        location.clone(),
        Duration::from_millis(1500),
        Stop::default(),
        None,
    );
    assert!(status.failures >= 2 && status.deleted == 0, "{status:?}");
    assert!(files.iter().all(|f| f.exists()));
    // Back, but one file changed on disk since its checksums were recorded: its copy does
    // not verify, and it is kept; the other is deleted after its verified copy.
    server.restart().unwrap();
    std::fs::write(&files[1], b"changed after its close").unwrap();
    let status = catch_up(
        s.clone(),
        location.clone(),
        Duration::from_secs(3),
        Stop::default(),
        None,
    );
    assert_eq!((status.verified, status.deleted), (1, 1), "{status:?}");
    assert!(!files[0].exists() && files[1].exists());
    let rows = transfers(&location);
    assert!(
        rows[0].deleted_at.is_some() && rows[0].state == TransferState::Verified,
        "{rows:?}"
    );
    assert_eq!(rows[1].state, TransferState::Retrying, "{rows:?}");
    assert!(rows[1].deleted_at.is_none(), "{rows:?}");
    let copy = server
        .export()
        .join("raw")
        .join(files[0].file_name().unwrap());
    assert_eq!(
        rows[0].verified_adler32,
        Some(read_checksums(&copy).unwrap().adler32)
    );
}

#[test]
fn a_directory_destination_gets_verified_copies_and_deletes_only_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (location, files) = run_with_files(dir.path(), &[1, 70_000, 2_000_000]);
    let copies = dir.path().join("permanent");
    let dest = Destination::parse(copies.to_str().unwrap()).unwrap();
    let s = settings(dest, &dir.path().join("out"));
    let status = catch_up(
        s.clone(),
        location.clone(),
        Duration::from_secs(30),
        Stop::default(),
        None,
    );
    assert_eq!(
        (status.verified, status.deleted, status.backlog.files),
        (3, 0, 0),
        "{status:?}"
    );
    all_verified_with_matching_copies(&location, &files, &copies);
    assert!(files.iter().all(|f| f.exists()), "kept by default");
    let s = Settings {
        delete_after_verify: true,
        ..s
    };
    let status = catch_up(
        s,
        location.clone(),
        Duration::from_secs(30),
        Stop::default(),
        None,
    );
    assert_eq!(status.deleted, 3, "{status:?}");
    assert!(files.iter().all(|f| !f.exists()));
    all_verified_with_matching_copies(&location, &files, &copies);
    assert!(transfers(&location).iter().all(|r| r.deleted_at.is_some()));
}

/// A file its writer rewrote after its copy was verified (an event builder's EoLS `.jsn`),
/// recorded again with its new checksums: copied again, and verified, and the older copy it
/// replaces is not counted corrupt. A file recorded again unchanged is not copied again.
#[test]
fn a_rewritten_file_is_copied_again_and_its_older_copy_is_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (location, files) = run_with_files(dir.path(), &[100, 200]);
    let copies = dir.path().join("permanent");
    let dest = Destination::parse(copies.to_str().unwrap()).unwrap();
    let s = settings(dest, &dir.path().join("out"));
    let catch = || {
        catch_up(
            s.clone(),
            location.clone(),
            Duration::from_secs(30),
            Stop::default(),
            None,
        )
    };
    assert_eq!(catch().verified, 2);
    std::fs::write(&files[0], b"rewritten with more lumi sections' files").unwrap();
    let recorded = |path: &Path| ClosedFile {
        run: 1,
        path: path.to_path_buf(),
        checksums: Some(read_checksums(path).unwrap()),
        closed_at: SystemTime::now(),
    };
    Registry::open(&location)
        .unwrap()
        .add_files(&[recorded(&files[0]), recorded(&files[1])])
        .unwrap();
    let status = catch();
    assert_eq!(
        (status.verified, status.corrupt_found, status.failures),
        (1, 0, 0),
        "only the rewritten file, not corrupt: {status:?}"
    );
    assert_eq!(status.backlog.files, 0, "{status:?}");
    all_verified_with_matching_copies(&location, &files, &copies);
    assert_eq!(
        std::fs::read(copies.join(files[0].file_name().unwrap())).unwrap(),
        b"rewritten with more lumi sections' files"
    );
}
