//! The transfer's loop, on its own thread (the agent beside a run) or the caller's (`swdaq
//! transfer`, catching up a backlog): ask the registry for the files due, put each one,
//! record what it did, delete a verified file's local copy when configured, then wait for the
//! next poll — every wait bounded and cut short by a stop. Nothing on the data path waits
//! for it: the writers only ever reach the registry, at the run's stop.

use crate::destination::{self, Limits};
use crate::state::{self, Outcome};
use crate::stop::Stop;
use crate::{Metrics, Settings};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use swdaq_registry::{Backlog, Location, Registry, TransferCandidate};

/// Files asked of the registry per pass.
const PER_PASS: u32 = 64;

/// What the agent last saw, for a caller to show or wait on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub backlog: Backlog,
    /// Files put and verified since the start.
    pub verified: u64,
    /// Attempts that failed since the start.
    pub failures: u64,
    /// Corrupted copies found at the destination (and replaced).
    pub corrupt_found: u64,
    pub deleted: u64,
    pub last_error: Option<String>,
    /// Passes finished (a caller waiting for the agent to have looked since).
    pub passes: u64,
}

/// The transfer beside a run: its own thread, stopped within a bounded time.
pub struct Agent {
    stop: Stop,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Starts the agent's thread; `metrics` (a monitoring block of its own) gets its counters.
    pub fn start(
        settings: Settings,
        location: Location,
        metrics: Option<Metrics>,
    ) -> std::io::Result<Self> {
        let stop = Stop::default();
        let status = Arc::new(Mutex::new(Status::default()));
        let (s, st) = (stop.clone(), Arc::clone(&status));
        let thread = std::thread::Builder::new()
            .name("transfer".into())
            .spawn(move || {
                let mut worker = Worker::new(settings, location, s, st, metrics);
                while !worker.stop.requested() {
                    let _ = worker.pass();
                    worker.stop.wait(worker.settings.poll);
                }
            })?;
        Ok(Self {
            stop,
            status,
            thread: Some(thread),
        })
    }

    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits up to `limit` for a pass begun after this call that leaves no backlog; whether
    /// one did.
    pub fn wait_empty(&self, limit: Duration) -> bool {
        let after = self.status().passes + 1;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let s = self.status();
            if s.passes > after && s.backlog.files == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Asks the agent to stop (a running copy is killed) and waits up to `limit` for its
    /// thread; an error when it did not end in time (it is then left to end on its own).
    pub fn stop(mut self, limit: Duration) -> Result<Status, String> {
        self.stop.request();
        let deadline = Instant::now() + limit;
        if let Some(thread) = self.thread.take() {
            while !thread.is_finished() {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "the transfer did not stop within {:.1} s",
                        limit.as_secs_f64()
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = thread.join();
        }
        Ok(self.status())
    }
}

/// An agent dropped without [`Agent::stop`] (an early return) is stopped all the same,
/// its thread waited for a bounded time, so no `xrdcp` outlives the process.
impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.request();
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + DROP_WAIT;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// How long dropping an agent waits for its thread.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// Catches up the backlog in the caller's thread until it is empty (nothing left to copy,
/// or to delete when configured), `limit` has passed or `stop` is asked for.
pub fn catch_up(
    settings: Settings,
    location: Location,
    limit: Duration,
    stop: Stop,
    metrics: Option<Metrics>,
) -> Status {
    let deadline = Instant::now() + limit;
    let status = Arc::new(Mutex::new(Status::default()));
    let mut worker = Worker::new(settings, location, stop, Arc::clone(&status), metrics);
    loop {
        let left = worker.pass();
        if left == Some(0) || worker.stop.requested() {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        // Waits are the poll's, so a file retrying after its back-off is seen soon after.
        worker.stop.wait(worker.settings.poll.min(deadline - now));
    }
    status.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Checks every verified copy whose local file is kept against the destination's Adler-32
/// again: one gone or corrupted since is put back to `pending` (copied again by the next
/// pass). One line per such file.
pub fn recheck(
    settings: &Settings,
    location: &Location,
    stop: &Stop,
) -> anyhow::Result<Vec<String>> {
    let mut registry = Registry::open(location)?;
    let key = settings.destination.describe();
    let limits = Limits {
        copy: settings.copy_timeout,
        query: settings.query_timeout,
        stop,
    };
    let mut lines = Vec::new();
    for file in registry.verified_kept(&key)? {
        if stop.requested() {
            break;
        }
        let relative = relative(
            Path::new(&file.path),
            file.run,
            settings.output_dir.as_deref(),
        );
        let target = settings.destination.target(&relative);
        let found = destination::checksum(&settings.destination, &target, &limits)
            .map_err(|e| anyhow::anyhow!(e))?;
        if found == Some(file.adler32) {
            continue;
        }
        let why = match found {
            Some(c) => format!(
                "{target}: the verified copy's Adler-32 is now {c:08x}, the file's {:08x}: corrupted, to be copied again",
                file.adler32
            ),
            None => format!("{target}: the verified copy is gone: to be copied again"),
        };
        registry.record_transfer(
            file.run,
            &file.path,
            &key,
            &swdaq_registry::TransferUpdate {
                state: swdaq_registry::TransferState::Pending,
                attempts: file.attempts,
                last_error: Some(why.clone()),
                verified_adler32: None,
                tried_at: SystemTime::now(),
                next_try_at: None,
            },
        )?;
        lines.push(why);
    }
    Ok(lines)
}

struct Worker {
    settings: Settings,
    location: Location,
    destination_key: String,
    registry: Option<Registry>,
    stop: Stop,
    status: Arc<Mutex<Status>>,
    metrics: Option<Metrics>,
}

impl Worker {
    fn new(
        settings: Settings,
        location: Location,
        stop: Stop,
        status: Arc<Mutex<Status>>,
        metrics: Option<Metrics>,
    ) -> Self {
        Self {
            destination_key: settings.destination.describe(),
            settings,
            location,
            registry: None,
            stop,
            status,
            metrics,
        }
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn error(&self, why: String) {
        if let Some(m) = &self.metrics {
            m.errors.inc();
        }
        self.update(|s| s.last_error = Some(why));
    }

    /// One pass over the files due; what is left to do afterwards (`None`: the registry
    /// could not be asked).
    fn pass(&mut self) -> Option<u64> {
        let left = self.try_pass();
        self.update(|s| s.passes += 1);
        match left {
            Ok(left) => Some(left),
            Err(e) => {
                // Opened again at the next pass (a server gone, a lock held too long).
                self.registry = None;
                self.error(format!("{e:#}"));
                None
            }
        }
    }

    fn try_pass(&mut self) -> anyhow::Result<u64> {
        if self.registry.is_none() {
            self.registry = Some(Registry::open(&self.location)?);
        }
        let delete = self.settings.delete_after_verify;
        loop {
            let due = self
                .registry
                .as_mut()
                .expect("opened above")
                .transfers_due(&self.destination_key, SystemTime::now(), delete, PER_PASS)?;
            let many = due.len() == PER_PASS as usize;
            for file in &due {
                if self.stop.requested() {
                    break;
                }
                self.one(file)?;
            }
            if !many || self.stop.requested() {
                break;
            }
        }
        let key = self.destination_key.clone();
        let backlog = self.registry().transfer_backlog(&key)?;
        let undeleted = if delete {
            self.registry().verified_kept(&key)?.len() as u64
        } else {
            0
        };
        if let Some(m) = &self.metrics {
            m.backlog_files.set(backlog.files as f64);
            m.backlog_bytes.set(backlog.bytes as f64);
            m.backlog_failed.set(backlog.failed as f64);
        }
        let left = backlog.files + undeleted;
        self.update(|s| s.backlog = backlog);
        Ok(left)
    }

    fn registry(&mut self) -> &mut Registry {
        self.registry.as_mut().expect("opened at the pass's start")
    }

    /// One file: put, recorded, deleted locally when verified and configured.
    fn one(&mut self, file: &TransferCandidate) -> anyhow::Result<()> {
        let local = PathBuf::from(&file.path);
        let copied = LocalFile::of(&local);
        let relative = relative(&local, file.run, self.settings.output_dir.as_deref());
        let limits = Limits {
            copy: self.settings.copy_timeout,
            query: self.settings.query_timeout,
            stop: &self.stop,
        };
        let outcome = match destination::put(
            &self.settings.destination,
            &local,
            &relative,
            file.adler32,
            file.superseded,
            &limits,
        ) {
            Ok(put) => {
                if let Some(found) = put.replaced_corrupt {
                    if let Some(m) = &self.metrics {
                        m.corrupt_found.inc();
                    }
                    self.update(|s| s.corrupt_found += 1);
                    self.error(format!(
                        "{}: a corrupted copy (Adler-32 {found:08x}, the file's {:08x}) was at the destination: replaced",
                        self.settings.destination.target(&relative),
                        file.adler32
                    ));
                }
                if let Some(m) = &self.metrics {
                    m.copied_bytes.add(put.copied_bytes);
                    m.verified.inc();
                }
                Outcome::Verified {
                    adler32: put.adler32,
                }
            }
            Err(why) => {
                if let Some(m) = &self.metrics {
                    m.failures.inc();
                }
                self.update(|s| s.failures += 1);
                self.error(format!("{}: {why}", file.path));
                Outcome::Failed(why)
            }
        };
        if self.stop.requested() && matches!(outcome, Outcome::Failed(_)) {
            // Stopped mid-copy: not an attempt of the file's, tried again as it was.
            return Ok(());
        }
        let attempts = if file.state == swdaq_registry::TransferState::Verified {
            // A kept verified file checked again before its deletion.
            file.attempts.saturating_sub(1)
        } else {
            file.attempts
        };
        let update =
            state::after_attempt(attempts, &outcome, &self.settings.retry, SystemTime::now());
        let key = self.destination_key.clone();
        self.registry()
            .record_transfer(file.run, &file.path, &key, &update)?;
        if let Outcome::Verified { .. } = outcome {
            self.update(|s| s.verified += 1);
        }
        if state::may_delete(&update, self.settings.delete_after_verify) {
            // A file its writer replaced since the copy began (a rewritten `.jsn`) is a new
            // version, not on record yet: kept, and copied once it is.
            if copied.is_some() && LocalFile::of(&local) != copied {
                self.error(format!(
                    "{}: verified, but not deleted: it changed since its copy (a new version, copied once it is on record)",
                    file.path
                ));
                return Ok(());
            }
            match std::fs::remove_file(&local) {
                Ok(()) => {
                    self.registry().record_deleted(file.run, &file.path, &key)?;
                    if let Some(m) = &self.metrics {
                        m.deleted.inc();
                    }
                    self.update(|s| s.deleted += 1);
                }
                // Already gone (deleted by hand): on record as deleted all the same.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.registry().record_deleted(file.run, &file.path, &key)?;
                }
                Err(e) => self.error(format!("{}: verified, but not deleted: {e}", file.path)),
            }
        }
        Ok(())
    }
}

/// What tells one version of a local file from another: a file replaced by a rename has
/// another inode, one written again in place another size or modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LocalFile {
    device: u64,
    inode: u64,
    bytes: u64,
    modified_ns: i128,
}

impl LocalFile {
    /// `None`: no file there (gone, or never readable).
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            device: m.dev(),
            inode: m.ino(),
            bytes: m.size(),
            modified_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// Where a file goes under the destination: its path under the run's output directory when
/// it is in it (a builder unit's `bu0/run000001/...` kept), else `runNNNNNN/<file name>`.
pub fn relative(local: &Path, run: u32, output_dir: Option<&Path>) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(dir) = output_dir
        && let Ok(rest) = absolute(local).strip_prefix(absolute(dir))
        && !rest.as_os_str().is_empty()
        && rest
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return rest.display().to_string();
    }
    let name = local
        .file_name()
        .map_or_else(|| "unnamed".into(), |n| n.to_string_lossy().into_owned());
    format!("run{run:06}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_keeps_its_place_under_the_output_directory() {
        let out = Path::new("/data/out");
        assert_eq!(
            relative(Path::new("/data/out/bu0/run000003/x.raw"), 3, Some(out)),
            "bu0/run000003/x.raw"
        );
        assert_eq!(
            relative(Path::new("/else/y.hdf5"), 3, Some(out)),
            "run000003/y.hdf5"
        );
        assert_eq!(relative(Path::new("/data/out/z"), 12, None), "run000012/z");
    }

    #[test]
    fn a_file_replaced_or_written_again_is_another_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run000001_ls0001_EoLS.jsn");
        std::fs::write(&path, b"{\"events\": 10}").unwrap();
        let first = LocalFile::of(&path).unwrap();
        assert_eq!(
            LocalFile::of(&path).as_ref(),
            Some(&first),
            "unchanged: the same"
        );
        // Replaced as the event builder replaces an EoLS: written aside and renamed over it,
        // the same size (told apart by its inode).
        let aside = dir.path().join("EoLS.jsn.writing");
        std::fs::write(&aside, b"{\"events\": 11}").unwrap();
        std::fs::rename(&aside, &path).unwrap();
        let second = LocalFile::of(&path).unwrap();
        assert_eq!(second.bytes, first.bytes);
        assert_ne!(second, first);
        // Written again in place, longer.
        std::fs::write(&path, b"{\"events\": 110}").unwrap();
        assert_ne!(LocalFile::of(&path).as_ref(), Some(&second));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(LocalFile::of(&path), None);
    }
}
