use super::*;
use proptest::prelude::*;
use swdaq_format::file_checksum::FileChecksums;

/// The checks every database must pass, each given a registry of its own, empty: on SQLite
/// one test each; on PostgreSQL one test, a real server's (started here, skipped with a line
/// where there is none) new database for each check.
macro_rules! on_every_database {
    ($($check:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[test]
                fn $check() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$check(&super::sqlite(dir.path()));
                }
            )*
        }

        #[test]
        fn on_postgresql() {
            let Some(server) = swdaq_test_postgres::TestPostgres::start_or_skip(
                "swdaq-registry's checks on PostgreSQL",
            ) else {
                return;
            };
            $(
                // Shown with a failing check's panic: which one it was.
                println!("on PostgreSQL: {}", stringify!($check));
                $check(&Location::Postgres(server.create_database().unwrap()));
            )*
        }
    };
}

on_every_database!(
    a_run_is_on_record_from_its_claim_and_complete_at_its_stop,
    reopening_keeps_the_schema_and_a_newer_schema_is_refused,
    a_version_1_registry_keeps_its_files_and_then_takes_a_file_without_checksums,
    a_number_asked_for_that_is_on_record_is_refused,
    simultaneous_first_migrations_all_succeed,
    concurrent_claims_never_share_a_number,
    a_run_whose_process_is_gone_is_named_once,
    lists_filter_by_number_type_and_date,
    a_column_changed_by_hand_is_not_panicked_on,
    transfers_are_due_until_verified_and_retried_only_when_due,
    a_file_recorded_again_is_kept_and_a_rewritten_one_is_due_again,
);

fn start() -> RunStart {
    RunStart {
        run_type: "test".into(),
        model: "chain".into(),
        operator: "alice".into(),
        host: "host-a".into(),
        pid: 4_000_000,
        applications: vec![Application {
            name: "chain".into(),
            kind: "chain".into(),
            host: "host-a".into(),
        }],
        configuration: "[run]\nnumber = 0\n".into(),
        software: software::get(),
        started_at: SystemTime::now(),
    }
}

fn sqlite(dir: &Path) -> Location {
    Location::parse("", dir).unwrap()
}

/// What `claim_run` does with no number asked for: the next after what it is told.
fn next_after(after: Option<u32>) -> Result<u32, ClaimError> {
    Ok(after.unwrap_or(0) + 1)
}

fn a_run_is_on_record_from_its_claim_and_complete_at_its_stop(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    let n = r.claim(0, &start(), next_after).unwrap();
    assert_eq!(n, 1);
    let on_record = r.show(1).unwrap().unwrap();
    assert_eq!(on_record.row.stopped_at, None, "not ended before its stop");
    assert_eq!(on_record.row.operator, "alice");
    r.add_files(&[ClosedFile {
        run: 1,
        path: "a.raw".into(),
        checksums: Some(FileChecksums {
            bytes: 9,
            adler32: 0x091E_01DE,
            crc32c: 0xE306_9283,
        }),
        closed_at: SystemTime::now(),
    }])
    .unwrap();
    r.end_run(1, "duration reached", &serde_json::json!({"events": 3}))
        .unwrap();
    let done = r.show(1).unwrap().unwrap();
    assert!(done.row.stopped_at.is_some());
    assert_eq!(done.summary.unwrap()["events"], 3);
    assert_eq!(done.files[0].crc32c, Some(0xE306_9283));
    assert_eq!(done.files[0].adler32, Some(0x091E_01DE));
    r.add_hooks(
        1,
        &[NewHook {
            hook: "post_stop".into(),
            argv: vec!["echo".into(), "done".into()],
            started_at: SystemTime::now(),
            millis: 3,
            ended: serde_json::json!({"ended": "exited", "code": 0}),
            output: "done\n".into(),
            truncated_bytes: 0,
        }],
    )
    .unwrap();
    let hooks = r.show(1).unwrap().unwrap().hooks;
    assert_eq!(hooks[0].argv, ["echo", "done"]);
    assert_eq!(
        (hooks[0].output.as_str(), hooks[0].ended["code"].as_i64()),
        ("done\n", Some(0))
    );
    assert_eq!(r.add_log(None, "bob", "beam lost").unwrap(), 1);
    assert_eq!(r.show(1).unwrap().unwrap().logbook[0].text, "beam lost");
    assert!(r.add_log(Some(7), "bob", "x").is_err(), "no run 7");
}

fn reopening_keeps_the_schema_and_a_newer_schema_is_refused(location: &Location) {
    Registry::open(location)
        .unwrap()
        .claim(0, &start(), next_after)
        .unwrap();
    let mut again = Registry::open(location).unwrap();
    assert_eq!(again.highest().unwrap(), Some(1));
    assert_each_migration_once(&mut again.db);
    again
        .db
        .execute("INSERT INTO schema_version VALUES (99)", &[])
        .unwrap();
    let e = format!("{:#}", Registry::open(location).err().unwrap());
    assert!(e.contains("version 99") && e.contains("newer"), "{e}");
}

fn a_version_1_registry_keeps_its_files_and_then_takes_a_file_without_checksums(
    location: &Location,
) {
    let mut v1 = unmigrated(location);
    v1.batch(schema::MIGRATIONS[0]).unwrap();
    v1.batch(
        "CREATE TABLE schema_version (version BIGINT NOT NULL);
         INSERT INTO schema_version VALUES (1);
         INSERT INTO runs (number, run_type, model, operator, host, pid, applications,
             configuration, software, started_at)
             VALUES (1, 'test', 'chain', 'alice', 'h', 1, '[]', '', '{}', '2026-11-28T00:00:00Z');
         INSERT INTO run_files VALUES (1, 'old.raw', 9, 1, 2, '2026-11-28T00:00:01Z');",
    )
    .unwrap();
    drop(v1);
    let mut r = Registry::open(location).unwrap();
    r.add_files(&[ClosedFile {
        run: 1,
        path: "unread.hdf5".into(),
        checksums: None,
        closed_at: SystemTime::now(),
    }])
    .unwrap();
    let files = r.show(1).unwrap().unwrap().files;
    assert_eq!(files[0].path, "old.raw");
    assert_eq!((files[0].adler32, files[0].crc32c), (Some(1), Some(2)));
    assert_eq!(files[1].path, "unread.hdf5");
    assert_eq!((files[1].adler32, files[1].crc32c), (None, None));
}

fn a_number_asked_for_that_is_on_record_is_refused(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    r.claim(5, &start(), |_| Ok(5)).unwrap();
    let e = r.claim(5, &start(), |_| Ok(5)).unwrap_err().to_string();
    assert!(e.contains("run 5 is already in the run registry"), "{e}");
    // With none asked for, a number the local claim offers that is taken is passed over.
    assert!(r.claim(0, &start(), |_| Ok(5)).is_err());
    assert_eq!(r.claim(0, &start(), next_after).unwrap(), 6);
}

/// `location`'s database opened as it is, its schema not brought up to date.
fn unmigrated(location: &Location) -> Db {
    match location {
        Location::Sqlite(path) => Db::open_sqlite(path),
        Location::Postgres(url) => Db::open_postgres(url),
    }
    .unwrap()
}

/// Servers opening an empty registry at the same moment: every one finds it brought up to
/// date, each migration applied once.
fn simultaneous_first_migrations_all_succeed(location: &Location) {
    let mut connected: Vec<Db> = (0..8).map(|_| unmigrated(location)).collect();
    let all_at_once = std::sync::Barrier::new(connected.len());
    std::thread::scope(|s| {
        for db in &mut connected {
            let all_at_once = &all_at_once;
            s.spawn(move || {
                all_at_once.wait();
                schema::migrate(db).unwrap();
            });
        }
    });
    assert_each_migration_once(&mut connected[0]);
}

/// Claimers that open the registry at once, each its first time: the first of them makes the
/// tables.
fn concurrent_claims_never_share_a_number(location: &Location) {
    let numbers: Vec<u32> = std::thread::scope(|s| {
        let claims: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut r = Registry::open(location).unwrap();
                    // Claimers reading the same highest number offer the same next one:
                    // only the registry's key tells them apart.
                    (0..5)
                        .map(|_| r.claim(0, &start(), next_after))
                        .collect::<Result<Vec<u32>, _>>()
                        .unwrap()
                })
            })
            .collect();
        claims.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    let mut sorted = numbers.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), numbers.len(), "{numbers:?}");
    assert_eq!(sorted, (1..=40).collect::<Vec<_>>());
}

fn a_run_whose_process_is_gone_is_named_once(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    r.claim(0, &start(), next_after).unwrap();
    assert!(r.notice_not_ended("host-a", |_| true).unwrap().is_empty());
    assert!(r.notice_not_ended("host-b", |_| false).unwrap().is_empty());
    let lines = r.notice_not_ended("host-a", |_| false).unwrap();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("run 1 was not ended"), "{lines:?}");
    assert!(r.notice_not_ended("host-a", |_| false).unwrap().is_empty());
    let row = r.show(1).unwrap().unwrap().row;
    assert_eq!(row.stopped_at, None, "still on record as not ended");
    assert!(row.stop_reason.unwrap().starts_with("not ended"));
}

fn lists_filter_by_number_type_and_date(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    for (n, t) in [(1, "physics"), (2, "test"), (3, "physics")] {
        let mut s = start();
        s.run_type = t.into();
        s.started_at = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * n);
        r.claim(n as u32, &s, |_| Ok(n as u32)).unwrap();
    }
    let numbers = |f: RunFilter, r: &mut Registry| -> Vec<u32> {
        r.list(&f).unwrap().iter().map(|x| x.number).collect()
    };
    assert_eq!(numbers(RunFilter::default(), &mut r), [1, 2, 3]);
    let physics = RunFilter {
        run_type: Some("physics".into()),
        ..Default::default()
    };
    assert_eq!(numbers(physics, &mut r), [1, 3]);
    let range = RunFilter {
        from: Some(2),
        to: Some(3),
        ..Default::default()
    };
    assert_eq!(numbers(range, &mut r), [2, 3]);
    let day = RunFilter {
        since: Some(parse_time("1970-01-03", false).unwrap()),
        before: Some(parse_time("1970-01-03", true).unwrap()),
        ..Default::default()
    };
    assert_eq!(numbers(day, &mut r), [2]);
}

/// A table changed by hand under the registry: a value of another type is read as none
/// (SQLite) or refused with its column named (PostgreSQL), never panicked on.
fn a_column_changed_by_hand_is_not_panicked_on(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    r.claim(0, &start(), next_after).unwrap();
    match location {
        Location::Sqlite(_) => {
            r.db.execute("UPDATE runs SET pid = 1.5", &[]).unwrap();
            assert_eq!(r.show(1).unwrap().unwrap().pid, 0);
        }
        Location::Postgres(_) => {
            (r.db)
                .batch("ALTER TABLE runs ALTER COLUMN pid TYPE INTEGER")
                .unwrap();
            let e = format!("{:#}", r.show(1).unwrap_err());
            assert!(e.contains("column pid"), "{e}");
        }
    }
}

#[test]
fn bad_registries_are_named_not_panicked_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.sqlite");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let e = format!(
        "{:#}",
        Registry::open(&Location::Sqlite(path)).err().unwrap()
    );
    assert!(
        e.contains("garbage.sqlite") && e.contains("not a database"),
        "{e}"
    );
    let e = Location::parse("mysql://x/y", dir.path()).unwrap_err();
    assert!(e.contains("mysql://"), "{e}");
    let e = format!(
        "{:#}",
        Registry::open(&Location::Postgres(
            "postgresql://u:secret@127.0.0.1:1/db".into()
        ))
        .err()
        .unwrap()
    );
    assert!(e.contains("cannot connect") && !e.contains("secret"), "{e}");
    let e = format!(
        "{:#}",
        Registry::open(&Location::Postgres("postgresql://h/db?nonsense=1".into()))
            .err()
            .unwrap()
    );
    assert!(e.contains("not a PostgreSQL URL"), "{e}");
}

#[test]
fn a_described_url_keeps_all_but_the_password() {
    let describe = |url: &str| Location::parse(url, Path::new("out")).unwrap().describe();
    assert_eq!(
        describe("postgresql://daq:SECRET@db.example:5432/runs"),
        "postgresql://daq@db.example:5432/runs"
    );
    assert_eq!(
        describe(
            "postgres://daq@db.example/runs?sslmode=require&password=SECRET&connect_timeout=5"
        ),
        "postgresql://daq@db.example:5432/runs",
        "the client's default port"
    );
    assert_eq!(
        describe("postgresql://db-a:5433,db-b:5434/runs?password=SECRET"),
        "postgresql://db-a:5433,db-b:5434/runs"
    );
    assert_eq!(
        describe("postgresql://daq:p%40ss@db.example:5432/runs"),
        "postgresql://daq@db.example:5432/runs"
    );
    assert_eq!(
        describe("postgresql://daq:p@ss@db.example:5432/runs"),
        "postgresql://(a URL that does not parse, not shown)",
        "an unencoded @ in the password"
    );
    assert_eq!(
        describe("postgresql://daq:SECRET@db.example:notaport/runs"),
        "postgresql://(a URL that does not parse, not shown)"
    );
}

proptest! {
    #[test]
    fn any_registry_key_parses_or_is_refused(key in "\\PC{0,60}") {
        let _ = Location::parse(&key, Path::new("out"));
    }

    #[test]
    fn a_described_url_never_shows_its_password(user in "[a-z]{1,8}", password in "[A-Za-z0-9@/?:]{6,12}") {
        for url in [
            format!("postgresql://{user}:{password}@db.example:5432/runs"),
            format!("postgres://{user}@db.example/runs?sslmode=require&password={password}"),
            format!("postgresql://{user}:{password}@db.example/runs?PASSWORD={password}&application_name=daq"),
        ] {
            let described = Location::parse(&url, Path::new("out")).unwrap().describe();
            prop_assert!(!described.contains(&password), "{}", described);
        }
    }

    #[test]
    fn any_time_text_parses_or_is_refused(text in "\\PC{0,30}") {
        let _ = parse_time(&text, true);
    }

    #[test]
    fn dates_sort_as_their_days(a in 0u64..40_000, b in 0u64..40_000) {
        let day = |d: u64| timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(d * 86_400));
        let (ta, tb) = (day(a), day(b));
        prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
        prop_assert_eq!(parse_time(&ta[..10], false).unwrap(), ta);
    }
}

fn assert_each_migration_once(db: &mut Db) {
    let versions = db
        .query("SELECT COUNT(*) FROM schema_version", &[])
        .unwrap();
    assert_eq!(
        versions,
        [[Value::Int(schema::VERSION)]],
        "each migration once"
    );
}

fn transfers_are_due_until_verified_and_retried_only_when_due(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    r.claim(0, &start(), next_after).unwrap();
    let file = |path: &str, checksums: Option<FileChecksums>| ClosedFile {
        run: 1,
        path: path.into(),
        checksums,
        closed_at: SystemTime::now(),
    };
    let sums = FileChecksums {
        bytes: 9,
        adler32: 0x091E_01DE,
        crc32c: 0xE306_9283,
    };
    r.add_files(&[
        file("a.raw", Some(sums)),
        file("b.raw", Some(sums)),
        file("c.h5", None),
    ])
    .unwrap();
    let dest = "root://127.0.0.1:1094//data";
    let now = SystemTime::now();
    let due = r.transfers_due(dest, now, false, 10).unwrap();
    assert_eq!(
        due.len(),
        2,
        "a file without checksums is never due: {due:?}"
    );
    assert_eq!((due[0].state, due[0].attempts), (TransferState::Pending, 0));
    let backlog = r.transfer_backlog(dest).unwrap();
    assert_eq!(
        backlog,
        Backlog {
            files: 2,
            bytes: 18,
            failed: 0,
            unverifiable: 1
        }
    );
    let later = now + Duration::from_secs(60);
    r.record_transfer(
        1,
        "a.raw",
        dest,
        &TransferUpdate {
            state: TransferState::Retrying,
            attempts: 1,
            last_error: Some("connection refused".into()),
            verified_adler32: None,
            tried_at: now,
            next_try_at: Some(later),
        },
    )
    .unwrap();
    let due: Vec<String> = (r.transfers_due(dest, now, false, 10).unwrap())
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert_eq!(due, ["b.raw"], "a failed one waits for its back-off");
    let due = r.transfers_due(dest, later, false, 10).unwrap();
    assert_eq!((due[0].path.as_str(), due[0].attempts), ("a.raw", 1));
    assert_eq!(r.transfer_backlog(dest).unwrap().failed, 1);
    for path in ["a.raw", "b.raw"] {
        r.record_transfer(
            1,
            path,
            dest,
            &TransferUpdate {
                state: TransferState::Verified,
                attempts: 2,
                last_error: None,
                verified_adler32: Some(0x091E_01DE),
                tried_at: later,
                next_try_at: None,
            },
        )
        .unwrap();
    }
    assert!(r.transfers_due(dest, later, false, 10).unwrap().is_empty());
    assert_eq!(r.transfer_backlog(dest).unwrap().files, 0);
    assert_eq!(
        r.transfers_due(dest, later, true, 10).unwrap().len(),
        2,
        "verified and kept: due for a transfer that deletes"
    );
    assert_eq!(r.verified_kept(dest).unwrap().len(), 2);
    r.record_deleted(1, "a.raw", dest).unwrap();
    assert_eq!(r.verified_kept(dest).unwrap().len(), 1);
    let rows = r.show(1).unwrap().unwrap().transfers;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].verified_adler32, Some(0x091E_01DE));
    assert!(rows[0].deleted_at.is_some() && rows[1].deleted_at.is_none());
    assert!(rows[0].first_tried_at < rows[0].last_tried_at, "{rows:?}");
    assert_eq!(
        r.transfer_backlog("/elsewhere").unwrap().files,
        2,
        "another destination has its own backlog"
    );
}

fn a_file_recorded_again_is_kept_and_a_rewritten_one_is_due_again(location: &Location) {
    let mut r = Registry::open(location).unwrap();
    r.claim(0, &start(), next_after).unwrap();
    let sums = |bytes: u64, adler32: u32| FileChecksums {
        bytes,
        adler32,
        crc32c: adler32 ^ 0xffff,
    };
    let file = |path: &str, checksums: FileChecksums| ClosedFile {
        run: 1,
        path: path.into(),
        checksums: Some(checksums),
        closed_at: SystemTime::now(),
    };
    let (first, rewritten) = (sums(9, 0x1111), sums(12, 0x2222));
    r.add_files(&[file("a.raw", first), file("ls1_EoLS.jsn", first)])
        .unwrap();
    let dest = "/copies";
    let now = SystemTime::now();
    for path in ["a.raw", "ls1_EoLS.jsn"] {
        attempt(&mut r, path, TransferState::Verified, 1, Some(0x1111));
    }
    // The same file again (a retry after an error, the stop's drain): nothing changes.
    r.add_files(&[file("a.raw", first)]).unwrap();
    assert!(r.transfers_due(dest, now, false, 10).unwrap().is_empty());
    let files = r.files(1).unwrap();
    assert_eq!((files.len(), files[0].adler32), (2, Some(0x1111)));
    // Rewritten: its row takes the new checksums, its transfer is pending again and names
    // the copy verified before as superseded.
    r.add_files(&[file("ls1_EoLS.jsn", rewritten)]).unwrap();
    let files = r.files(1).unwrap();
    assert_eq!(
        (files[1].path.as_str(), files[1].bytes, files[1].adler32),
        ("ls1_EoLS.jsn", 12, Some(0x2222))
    );
    let due = r.transfers_due(dest, now, false, 10).unwrap();
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(
        (
            due[0].path.as_str(),
            due[0].adler32,
            due[0].state,
            due[0].attempts
        ),
        ("ls1_EoLS.jsn", 0x2222, TransferState::Pending, 0)
    );
    assert_eq!(due[0].superseded, Some(0x1111));
    assert_eq!(r.transfer_backlog(dest).unwrap().files, 1);
    // A copy of the older version verified after the rewrite was recorded is due all the
    // same: only a copy with the file's checksum on record counts.
    attempt(
        &mut r,
        "ls1_EoLS.jsn",
        TransferState::Verified,
        1,
        Some(0x1111),
    );
    assert_eq!(r.transfers_due(dest, now, false, 10).unwrap().len(), 1);
    assert!(
        r.verified_kept(dest)
            .unwrap()
            .iter()
            .all(|c| c.path == "a.raw")
    );
    // A failed attempt keeps the superseded copy's checksum; the new one's verification
    // ends it.
    attempt(&mut r, "ls1_EoLS.jsn", TransferState::Retrying, 1, None);
    assert_eq!(
        r.transfers_due(dest, now, false, 10).unwrap()[0].superseded,
        Some(0x1111)
    );
    attempt(
        &mut r,
        "ls1_EoLS.jsn",
        TransferState::Verified,
        2,
        Some(0x2222),
    );
    assert!(r.transfers_due(dest, now, false, 10).unwrap().is_empty());
    assert_eq!(r.transfer_backlog(dest).unwrap().files, 0);
}

/// Records an attempt at run 1's `path` to `/copies` (a failed one: "refused").
fn attempt(
    r: &mut Registry,
    path: &str,
    state: TransferState,
    attempts: u32,
    verified_adler32: Option<u32>,
) {
    let failed = state == TransferState::Retrying;
    let update = TransferUpdate {
        state,
        attempts,
        last_error: failed.then(|| "refused".to_string()),
        verified_adler32,
        tried_at: SystemTime::now(),
        next_try_at: None,
    };
    r.record_transfer(1, path, "/copies", &update).unwrap();
}
