//! A run's closed files on record as they close (#38), not only at its stop: a thread owned
//! by the run takes the files its writers closed (`file_checksum::note_closed`: a writer
//! only pushes to that list), reads back the checksums a C library's writer could not
//! compute (HDF5), off the writers' threads, and only then adds them to the run registry —
//! so the transfer to permanent storage, which sees a file only through its row, never
//! copies or deletes a file whose checksums are not known. About once a second
//! ([`INTERVAL`]); at the stop, [`FileRecorder::finish`] records what is left.
//!
//! A registry error is counted and said on stderr, and the files stay to be recorded at the
//! next attempt or at the stop: never lost, never a panic. Recording a file again is a no-op
//! (`Registry::add_files`), so a file given to the registry twice — an attempt whose answer
//! was lost, the stop's drain after a thread that did not answer in time — is on record once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_format::file_checksum::{self, ClosedFile};
use swdaq_registry::{Location, Registry};

/// How often the thread takes the closed files.
pub const INTERVAL: Duration = Duration::from_millis(500);

/// How long the stop waits for the thread's attempt under way (a registry server that does
/// not answer): then the stop records the thread's files itself.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Records run `run`'s closed files on its own thread until [`FileRecorder::finish`].
pub struct FileRecorder {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Option<Registry>>>,
    location: Location,
    run: u32,
    who: String,
}

struct Shared {
    /// Files taken from the writers' list and not yet on record, in the order they closed.
    pending: Mutex<Vec<ClosedFile>>,
    stop: Mutex<bool>,
    wake: Condvar,
    /// Attempts that failed (the registry could not be opened or refused a file).
    failures: AtomicU64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Vec<ClosedFile>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FileRecorder {
    /// Starts recording run `run`'s closed files in the registry at `location`; `who` names
    /// the process in what it says (`swdaq run`, `swdaq app bu0`).
    pub fn start(location: Location, run: u32, who: String) -> Self {
        Self::every(INTERVAL, location, run, who)
    }

    fn every(interval: Duration, location: Location, run: u32, who: String) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Vec::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            failures: AtomicU64::new(0),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            let location = location.clone();
            let who = who.clone();
            std::thread::Builder::new()
                .name("file-recorder".into())
                .spawn(move || {
                    let mut registry = None;
                    while !wait_stop(&shared, interval) {
                        record_pending(&shared, &mut registry, &location, run, &who);
                    }
                    registry
                })
                .ok()
        };
        if thread.is_none() {
            eprintln!("{who}: run {run}: no thread to record files as they close: at the stop");
        }
        Self {
            shared,
            thread,
            location,
            run,
            who,
        }
    }

    /// Attempts that failed so far.
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// Stops the thread (waiting at most a few seconds for an attempt under way) and
    /// records every closed file of the run not on record yet: `registry`, or the thread's
    /// own connection, or one opened here.
    pub fn finish(mut self, registry: Option<&mut Registry>) -> anyhow::Result<()> {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        let deadline = Instant::now() + STOP_WAIT;
        let mut own = None;
        if let Some(thread) = self.thread.take() {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                own = thread.join().ok().flatten();
            } else {
                eprintln!(
                    "{}: run {}: the file recorder did not answer within {} s: its files are recorded at the stop",
                    self.who,
                    self.run,
                    STOP_WAIT.as_secs()
                );
            }
        }
        let mut files = self.shared.pending().clone();
        files.extend(file_checksum::take_closed(self.run));
        read_back(&mut files, self.run, &self.who);
        let failures = self.failures();
        if failures > 0 && !files.is_empty() {
            eprintln!(
                "{}: run {}: {failures} attempts to record files failed during the run: {} files recorded at the stop",
                self.who,
                self.run,
                files.len()
            );
        }
        if files.is_empty() {
            return Ok(());
        }
        let registry = match (registry, own.as_mut()) {
            (Some(given), _) => given,
            (None, Some(own)) => own,
            (None, None) => own.insert(Registry::open(&self.location)?),
        };
        registry.add_files(&files)?;
        self.shared.pending().clear();
        Ok(())
    }
}

impl Drop for FileRecorder {
    /// A recorder dropped without [`FileRecorder::finish`] (an error path) stops its thread.
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
    }
}

/// Waits `interval` or until the stop; whether to stop.
fn wait_stop(shared: &Shared, interval: Duration) -> bool {
    let stop = shared.stop.lock().unwrap_or_else(|e| e.into_inner());
    let (stop, _) = shared
        .wake
        .wait_timeout_while(stop, interval, |stop| !*stop)
        .unwrap_or_else(|e| e.into_inner());
    *stop
}

/// One attempt: the newly closed files joined to those waiting, their missing checksums read
/// back, then all added to the registry; on an error they wait for the next attempt, with
/// the checksums read.
fn record_pending(
    shared: &Shared,
    registry: &mut Option<Registry>,
    location: &Location,
    run: u32,
    who: &str,
) {
    let mut files = {
        let mut pending = shared.pending();
        pending.extend(file_checksum::take_closed(run));
        pending.clone()
    };
    if files.is_empty() {
        return;
    }
    read_back(&mut files, run, who);
    let recorded = match registry {
        Some(registry) => registry.add_files(&files),
        None => {
            Registry::open(location).and_then(|opened| registry.insert(opened).add_files(&files))
        }
    };
    let mut pending = shared.pending();
    // Only this thread takes from the front; a stop that gave up waiting for it may have
    // taken them all meanwhile (so never more than there are).
    let taken = files.len().min(pending.len());
    match recorded {
        Ok(()) => drop(pending.drain(..taken)),
        Err(e) => {
            let failures = shared.failures.fetch_add(1, Ordering::Relaxed) + 1;
            // Opened again at the next attempt (a server restarted).
            *registry = None;
            pending.splice(..taken, files);
            // Said at the first failures and then ever more rarely: a registry down for an
            // hour is not 7200 lines.
            if failures.is_power_of_two() {
                eprintln!(
                    "{who}: run {run}: closed files not recorded yet (attempt {failures} failed, tried again, and at the stop): {e:#}"
                );
            }
        }
    }
}

/// Reads back the checksums the writers could not compute; a file that cannot be read is
/// recorded without them, and said.
fn read_back(files: &mut [ClosedFile], run: u32, who: &str) {
    for (path, e) in file_checksum::read_missing_checksums(files) {
        eprintln!(
            "{who}: run {run}: {} is recorded with no checksum: cannot read it back: {e}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests;
