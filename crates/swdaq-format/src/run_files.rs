//! Which run a file on disk belongs to, and how a run gets its number, so that no run ever
//! overwrites an earlier run's files.
//!
//! Every file or directory a swdaq model writes for run N has `run` and N in six or more
//! digits in its name, at the start or after `_` (`swdaq_run000007_0000.hdf5`,
//! `run000007_ls0001_index000000.raw`, `run000007_burst000/`, `run000007-logs/`), or is an
//! ATLAS raw file whose name says its run as ATLAS names it
//! (`data_test.00000007.physics_Main.daq.RAW._lb0001._SFO-1._0001.data`). A run's number is claimed once, before anything is written, in every
//! directory it writes to ([`claim_run`]): with no number asked for, the next one after every
//! run found there (files, or the last number claimed, kept in [`LAST_RUN_FILE`] so that a
//! run whose files were all deleted — a filter farm deletes what it has read — is not reused);
//! a number asked for that already has files is refused, naming one. Writers then finish
//! each file with [`rename_no_replace`], so even two processes racing for a number cannot
//! replace a file.
//!
//! What every writer's open file shares besides: when it is flushed so that a killed
//! process leaves it readable ([`FlushPolicy`], [`Unflushed`]), and whether its file system
//! has room for more with the configured reserve left free ([`space_short`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Beside a run's files: the last run number claimed in that directory.
pub const LAST_RUN_FILE: &str = ".swdaq-last-run";

/// Digits a run number has in a file name (at least; a larger number has more).
const RUN_DIGITS: usize = 6;

/// The run a file or directory named `name` belongs to, if its name says so.
pub fn run_of_name(name: &str) -> Option<u32> {
    if let Some(atlas) = crate::eventstorage::RawFileName::parse(name) {
        return Some(atlas.run_number);
    }
    name.match_indices("run").find_map(|(at, _)| {
        let starts_word = at == 0 || name.as_bytes()[at - 1] == b'_';
        let after = &name[at + 3..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        (starts_word && digits >= RUN_DIGITS)
            .then(|| after[..digits].parse().ok())
            .flatten()
    })
}

/// What a directory holds of earlier runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RunsOnDisk {
    /// The highest run number found in a name or in [`LAST_RUN_FILE`].
    pub highest: Option<u32>,
    /// The directory's entries (and its subdirectories': a builder unit writes into its own)
    /// that belong to the run asked about, sorted.
    pub files_of_run: Vec<PathBuf>,
}

impl RunsOnDisk {
    /// Looks at `dir` and its immediate subdirectories for runs; `run` is the run whose
    /// files are listed. A directory that does not exist holds no runs.
    pub fn scan(dir: &Path, run: Option<u32>) -> io::Result<Self> {
        let mut found = Self {
            highest: read_last_run(dir)?,
            files_of_run: Vec::new(),
        };
        for (path, name) in entries(dir)? {
            found.note(&path, &name, run);
            if path.is_dir() && run_of_name(&name).is_none() {
                for (inner, inner_name) in entries(&path)? {
                    found.note(&inner, &inner_name, run);
                }
            }
        }
        found.files_of_run.sort();
        Ok(found)
    }

    fn note(&mut self, path: &Path, name: &str, run: Option<u32>) {
        let Some(n) = run_of_name(name) else { return };
        self.highest = self.highest.max(Some(n));
        if Some(n) == run {
            self.files_of_run.push(path.to_path_buf());
        }
    }
}

/// The entries of `dir` with their names; none when it does not exist.
fn entries(dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    read.map(|e| e.map(|e| (e.path(), e.file_name().to_string_lossy().into_owned())))
        .collect()
}

/// The number in `dir`'s [`LAST_RUN_FILE`]; a file that holds anything else is refused,
/// named, rather than read as "no run yet": the number it should hold is the operator's to
/// restore (or the file to remove, when the runs' own files say enough).
fn read_last_run(dir: &Path) -> io::Result<Option<u32>> {
    let path = dir.join(LAST_RUN_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&bytes);
    match text.trim().parse::<u32>() {
        Ok(run) => Ok(Some(run)),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds {:?}, not the last run number claimed here: write that number into it, or remove it to go by the runs' file names",
                path.display(),
                text.chars().take(40).collect::<String>()
            ),
        )),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunClaimError {
    #[error(
        "run {run} already has files in {dir} ({file}): a run's files are never overwritten; give no run number to take the next free one ({next}), or another number"
    )]
    Taken {
        run: u32,
        dir: PathBuf,
        file: PathBuf,
        next: u32,
    },
    #[error("run numbers are used up in {0}: the highest run found there (in a file name or {LAST_RUN_FILE}) is {max}; give a lower run number with no files, or write to another directory", max = u32::MAX)]
    UsedUp(PathBuf),
    #[error("cannot claim a run number in {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
}

/// Claims a run number in every directory of `dirs` (creating them): `requested` if it has no
/// files in any of them, or, with 0, the next number after every run found in any of them
/// and after `at_least_after` (the last run this process started). The number claimed is
/// kept in each directory's [`LAST_RUN_FILE`].
///
/// Claims are made under an exclusive lock (`flock`) of each directory itself, so two
/// processes claiming at once take different numbers instead of both announcing one and the
/// loser failing on its first file after data taking began.
pub fn claim_run(
    dirs: &[&Path],
    requested: u32,
    at_least_after: Option<u32>,
) -> Result<u32, RunClaimError> {
    // Locked in one order, so two claims over the same directories cannot wait on each other.
    let mut ordered: Vec<&Path> = dirs.to_vec();
    ordered.sort();
    ordered.dedup();
    let _locks = ordered
        .iter()
        .map(|dir| {
            lock_claims(dir).map_err(|source| RunClaimError::Io {
                dir: dir.to_path_buf(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    claim_locked(dirs, requested, at_least_after)
}

/// The longest a claim waits for another process's claim in the same directory (a claim
/// takes a scan of the directory: milliseconds, a second for tens of thousands of files).
const CLAIM_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The directory's claim lock, held until the handle is dropped. The directory itself is
/// locked: no lock file joins the run's files.
fn lock_claims(dir: &Path) -> io::Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let file = std::fs::File::open(dir)?;
    let deadline = Instant::now() + CLAIM_LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "another process has held {}'s run-number lock for {CLAIM_LOCK_WAIT:?} (a stopped swdaq claiming a run number?)",
                        dir.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

fn claim_locked(
    dirs: &[&Path],
    requested: u32,
    at_least_after: Option<u32>,
) -> Result<u32, RunClaimError> {
    let requested = (requested != 0).then_some(requested);
    let mut highest = at_least_after;
    for &dir in dirs {
        let found = RunsOnDisk::scan(dir, requested).map_err(|source| RunClaimError::Io {
            dir: dir.to_path_buf(),
            source,
        })?;
        if let (Some(run), Some(file)) = (requested, found.files_of_run.first()) {
            return Err(RunClaimError::Taken {
                run,
                dir: dir.to_path_buf(),
                file: file.clone(),
                next: found.highest.unwrap_or(0).saturating_add(1),
            });
        }
        highest = highest.max(found.highest);
    }
    let run = match requested {
        Some(run) => run,
        None => match highest {
            Some(h) => h
                .checked_add(1)
                .ok_or_else(|| RunClaimError::UsedUp(dirs[0].to_path_buf()))?,
            None => 1,
        },
    };
    for &dir in dirs {
        write_last_run(dir, run).map_err(|source| RunClaimError::Io {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(run)
}

/// Records `run` as claimed in `dir`, unless a higher run already was.
fn write_last_run(dir: &Path, run: u32) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if read_last_run(dir)?.is_some_and(|last| last >= run) {
        return Ok(());
    }
    let path = dir.join(LAST_RUN_FILE);
    let partial = dir.join(format!("{LAST_RUN_FILE}.{}", std::process::id()));
    std::fs::write(&partial, format!("{run}\n"))?;
    std::fs::rename(&partial, path)
}

/// Gives the finished file `from` its final name `to`, failing with `AlreadyExists` instead
/// of replacing a file already there (a hard link, then the old name removed: both are
/// atomic, and a crash between them leaves two names of one complete file, never a loss).
pub fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::hard_link(from, to) {
        Ok(()) => std::fs::remove_file(from),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists and is never replaced", to.display()),
        )),
        // A file system without hard links: check, then rename (only a race can replace).
        // EPERM: the file system (or its hard-link protection) does not allow the link.
        Err(e) if e.kind() == io::ErrorKind::Unsupported || e.raw_os_error() == Some(1) => {
            if to.symlink_metadata().is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists and is never replaced", to.display()),
                ));
            }
            std::fs::rename(from, to)
        }
        Err(e) => Err(e),
    }
}

/// Creates `path` for writing, failing if anything is already there.
pub fn create_new(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .open(path)
}

/// When an open file is flushed: `interval` after its oldest unflushed record, or once
/// `every_records` wait, whichever comes first. Neither: only at close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    interval: Option<Duration>,
    every_records: Option<u64>,
}

impl FlushPolicy {
    /// Zero turns a bound off.
    pub fn new(interval_ms: u64, every_records: u64) -> Self {
        Self {
            interval: (interval_ms > 0).then(|| Duration::from_millis(interval_ms)),
            every_records: (every_records > 0).then_some(every_records),
        }
    }

    /// Whether files are flushed while open at all.
    pub fn enabled(&self) -> bool {
        self.interval.is_some() || self.every_records.is_some()
    }
}

/// The records written since the last flush.
#[derive(Debug, Default)]
pub struct Unflushed {
    records: u64,
    oldest: Option<Instant>,
}

impl Unflushed {
    pub fn add(&mut self, now: Instant) {
        self.records += 1;
        self.oldest.get_or_insert(now);
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    /// When the oldest unflushed record must be flushed by (none: an interval past the
    /// clock's range never comes).
    pub fn deadline(&self, policy: &FlushPolicy) -> Option<Instant> {
        self.oldest?.checked_add(policy.interval?)
    }

    pub fn due(&self, policy: &FlushPolicy, now: Instant) -> bool {
        policy.every_records.is_some_and(|n| self.records >= n)
            || self.deadline(policy).is_some_and(|d| now >= d)
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The bytes free on `dir`'s file system when writing `needed` more would leave less than
/// `reserve` free; `None` when there is room.
pub fn space_short(dir: &Path, needed: u64, reserve: u64) -> io::Result<Option<u64>> {
    let available = fs4::available_space(dir)?;
    Ok((available < needed.saturating_add(reserve)).then_some(available))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_flush_is_due_by_count_or_by_age() {
        let t0 = Instant::now();
        let policy = FlushPolicy::new(1000, 3);
        let mut pending = Unflushed::default();
        assert!(!pending.due(&policy, t0 + Duration::from_secs(5)));
        pending.add(t0);
        pending.add(t0 + Duration::from_millis(600));
        assert_eq!(pending.deadline(&policy), Some(t0 + Duration::from_secs(1)));
        assert!(!pending.due(&policy, t0 + Duration::from_millis(999)));
        assert!(pending.due(&policy, t0 + Duration::from_millis(1000)));
        pending.add(t0 + Duration::from_millis(700));
        assert!(pending.due(&policy, t0 + Duration::from_millis(700)));
        pending.clear();
        assert_eq!(pending.deadline(&policy), None);
    }

    #[test]
    fn zero_turns_a_bound_off() {
        let t0 = Instant::now();
        let mut pending = Unflushed::default();
        (0..1000).for_each(|_| pending.add(t0));
        let late = t0 + Duration::from_secs(3600);
        assert!(!pending.due(&FlushPolicy::new(0, 0), late));
        assert!(!FlushPolicy::new(0, 0).enabled());
        assert!(!pending.due(&FlushPolicy::new(0, 2000), late));
        assert!(pending.due(&FlushPolicy::new(0, 1000), t0));
        assert!(pending.due(&FlushPolicy::new(1, 0), late));
    }

    #[test]
    fn space_is_short_only_where_the_reserve_would_be_eaten_into() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(space_short(dir.path(), 1, 0).unwrap(), None);
        let available = space_short(dir.path(), 1, u64::MAX).unwrap();
        assert!(available.is_some());
        assert!(space_short(&dir.path().join("gone"), 1, 0).is_err());
    }

    #[test]
    fn every_model_s_names_say_their_run() {
        for (name, run) in [
            ("swdaq_run000007_0000.hdf5", Some(7)),
            ("swdaq_builder-0_run000012_0003.hdf5.writing", Some(12)),
            ("run000003_ls0001_index000000.raw", Some(3)),
            ("run000003_ls0001_EoLS.jsn", Some(3)),
            ("swrod_run000005_0000.raw.part", Some(5)),
            (
                "data_test.00000005.physics_Main.daq.RAW._lb0003._SFO-1._0001.writing",
                Some(5),
            ),
            ("run000001_burst002", Some(1)),
            ("run000009-logs", Some(9)),
            ("run1234567_x", Some(1_234_567)),
            ("runrun000001", None),
            ("run_x_run000002", Some(2)),
            ("bu0", None),
            ("run12_short", None),
            ("prerun000001", None),
            ("truth_pulses.csv", None),
            ("x_run_000001", None),
            (LAST_RUN_FILE, None),
        ] {
            assert_eq!(run_of_name(name), run, "{name}");
        }
    }

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"data").unwrap();
    }

    #[test]
    fn with_no_number_a_run_takes_the_next_free_one_and_keeps_taking_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        assert_eq!(claim_run(&[&out], 0, None).unwrap(), 1);
        // Claimed but no file written (a run that failed at once): still not reused.
        assert_eq!(claim_run(&[&out], 0, None).unwrap(), 2);
        touch(&out.join("bu1/run000010_ls0001_index000000.raw"));
        assert_eq!(claim_run(&[&out], 0, None).unwrap(), 11);
        // The last run this process started counts even where its files are gone.
        assert_eq!(claim_run(&[&out], 0, Some(40)).unwrap(), 41);
    }

    #[test]
    fn a_number_asked_for_that_has_files_is_refused_naming_one() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        touch(&b.join("swdaq_run000004_0000.hdf5"));
        touch(&b.join("swdaq_run000004_0001.hdf5"));
        match claim_run(&[&a, &b], 4, None) {
            Err(RunClaimError::Taken {
                run: 4,
                dir,
                file,
                next: 5,
            }) => {
                assert_eq!(dir, b);
                assert_eq!(file, b.join("swdaq_run000004_0000.hdf5"));
            }
            other => panic!("expected Taken, got {other:?}"),
        }
        // Refused before anything was claimed.
        assert!(!a.join(LAST_RUN_FILE).exists());
        assert_eq!(claim_run(&[&a, &b], 3, None).unwrap(), 3);
        // An earlier number stays allowed when it has no files, and does not lower the mark.
        assert_eq!(claim_run(&[&a, &b], 0, None).unwrap(), 5);
    }

    /// Garbage or invalid UTF-8 in the last-run file is named, with what to do, and no
    /// number is claimed (it was read as "no run yet", so run 1 came again).
    #[test]
    fn a_damaged_last_run_file_is_named_not_read_as_no_run() {
        for content in [&b"garbage"[..], &b"\xff\xfe7"[..], &b""[..]] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(LAST_RUN_FILE), content).unwrap();
            let e = claim_run(&[dir.path()], 0, None).unwrap_err().to_string();
            assert!(e.contains(".swdaq-last-run holds"), "{e}");
            assert!(e.contains("remove it"), "{e}");
        }
    }

    /// Claims racing in one directory take different numbers (one after the other, under
    /// its lock): eight threads, eight numbers.
    #[test]
    fn claims_at_the_same_moment_take_different_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let barrier = std::sync::Barrier::new(8);
        let mut runs: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        claim_run(&[&out], 0, None).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        runs.sort();
        assert_eq!(runs, (1..=8).collect::<Vec<_>>());
    }

    #[test]
    fn a_finished_file_never_replaces_another() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("a.writing"), dir.path().join("a"));
        std::fs::write(&to, b"earlier run").unwrap();
        std::fs::write(&from, b"this run").unwrap();
        let e = rename_no_replace(&from, &to).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&to).unwrap(), b"earlier run");
        assert_eq!(std::fs::read(&from).unwrap(), b"this run");
        std::fs::remove_file(&to).unwrap();
        rename_no_replace(&from, &to).unwrap();
        assert!(!from.exists());
        assert_eq!(std::fs::read(&to).unwrap(), b"this run");
        assert_eq!(
            create_new(&to).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
    }

    proptest! {
        #[test]
        fn any_name_is_read_without_panic(name in ".{0,40}") {
            let _ = run_of_name(&name);
        }

        #[test]
        fn a_run_s_own_names_give_it_back(run: u32, prefix in "[a-z]{0,6}_", index in 0u32..10_000) {
            let name = format!("{prefix}run{run:06}_{index:04}.hdf5");
            prop_assert_eq!(run_of_name(&name), Some(run));
        }
    }
}
