//! Storage of the SW ROD run as an ATLAS SFO stores a stream: ATLAS EventStorage files
//! ([`swdaq_format::eventstorage`]) named as ATLAS names them, one sequence of files per
//! luminosity block (file numbers from 1; a new file when the current one would pass
//! `max_file_bytes`), each file a head, a data separator before every event and an end
//! record; a block's last file says so in its end record.
//!
//! A file is written as `NAME._NNNN.writing` (created only if nothing has that name) and
//! renamed to `NAME._NNNN.data` when closed, never over an existing file: a reader never
//! sees a file being written as finished, and no run's file replaces another's.
//!
//! Crash safety as the chain's HDF5 files have it (`swdaq-store`'s `durable`): events wait in
//! memory only until a flush point — `flush_interval_ms` after the oldest of them, once
//! `flush_every_records` wait, when 8 MiB have gathered, at close — and are
//! then written to the file with one write, whole, and counted stored. A killed writer's
//! `.writing` file therefore holds every event of its last flush point, each whole (the end
//! record comes only at close). With `sync_to_disk` each flush point and close also waits
//! until the bytes are on the device, and a created or renamed file's name too, so a power
//! cut loses no more.
//!
//! Before a flush point writes, the file system must keep `min_free_bytes` free after the
//! events and the file's end record: otherwise (and on any write error) the events waiting
//! are not written (counted unwritten), the file is cut back to its last flush point and
//! closed with what it holds, and the error names it. A file that cannot even be closed
//! stays `.writing`, its flushed events still counted stored (`swdaq inspect` reads them).

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use swdaq_format::eventstorage::{
    DATA_SEPARATOR_WORDS, FILE_END_WORDS, FORMAT_VERSION, FileEnd, FileHead, FileStart,
    RawFileName, RunParameters, data_separator, date_time, megabytes, provenance_strings,
};
use swdaq_format::file_checksum::{self, RunningChecksums};
use swdaq_format::provenance::Provenance;
use swdaq_format::run_files::{self, FlushPolicy, Unflushed};

/// Bytes of events an open file gathers before they are written even with no flush point
/// due: the memory each open file may hold (every flush bound 0: the only bound).
const MAX_PENDING_BYTES: usize = 8 << 20;
const SEPARATOR_BYTES: u64 = (DATA_SEPARATOR_WORDS * 4) as u64;
const END_BYTES: u64 = (FILE_END_WORDS * 4) as u64;

/// What every file of the run says of itself, and how it reaches the disk.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSettings {
    pub dir: PathBuf,
    pub run_number: u32,
    /// The project tag, first field of the file names (ATLAS's default: `data_test`).
    pub project: String,
    pub stream_type: String,
    pub stream_name: String,
    /// The writing application's name in the file names and head (ATLAS: `SFO-N`).
    pub app_name: String,
    /// A new file when the current one would pass this size.
    pub max_file_bytes: u64,
    /// When an open file's waiting events are written to it.
    pub flush: FlushPolicy,
    /// Power loss: flush points and closes wait until the bytes are on the device.
    pub sync_to_disk: bool,
    /// Free space every write leaves on the file system (after the file's end record).
    pub min_free_bytes: u64,
    /// The run and the software, as metadata strings after ATLAS's own in every file's head
    /// (`eventstorage::provenance_strings`); `None` writes ATLAS's alone.
    pub provenance: Option<Provenance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFile {
    /// Its final name; a file that could not be closed, its `.writing` name.
    pub path: PathBuf,
    pub lumi_block: u32,
    /// The file's number in its luminosity block's sequence, from 1.
    pub file_number: u32,
    pub events: u64,
    /// Events that carry status: a ROB missing, or one missing e-links.
    pub flagged_events: u64,
    /// The file's size.
    pub bytes: u64,
}

/// One luminosity block's sequence of files.
#[derive(Default)]
struct Sequence {
    files: u32,
    /// Events given a block number in the sequence, and their bytes.
    events: u32,
    data_bytes: u64,
    open: Option<OpenFile>,
}

struct OpenFile {
    file: File,
    writing: PathBuf,
    /// What the file holds: its head and the events of every flush point so far.
    stored: StoredFile,
    /// Bytes of those events (the end record's data size).
    data_bytes: u64,
    /// Events since the last flush point, each after its data separator.
    pending: Vec<u8>,
    pending_flagged: u64,
    pending_data_bytes: u64,
    unflushed: Unflushed,
    /// Of the bytes written, in file order (each write appends).
    sums: RunningChecksums,
}

impl OpenFile {
    /// A flush point: the waiting events written after the file's last whole event (if the
    /// file system keeps its reserve), synced with `sync_to_disk`; then they are the file's.
    fn flush(&mut self, s: &FileSettings) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let needed = self.pending.len() as u64 + END_BYTES;
        check_space(&s.dir, needed, s.min_free_bytes).map_err(|e| with_path(&self.writing, e))?;
        self.file
            .write_all_at(&self.pending, self.stored.bytes)
            .and_then(|()| sync_if(s.sync_to_disk, &self.file))
            .map_err(|e| with_path(&self.writing, e))?;
        self.sums.update(&self.pending);
        self.stored.events += self.unflushed.records();
        self.stored.flagged_events += self.pending_flagged;
        self.stored.bytes += self.pending.len() as u64;
        self.data_bytes += self.pending_data_bytes;
        self.clear_pending();
        Ok(())
    }

    /// After a failed flush point: the waiting events are not written, and the file is cut
    /// back to its last flush point (a write that failed half-way leaves part of an event).
    fn drop_pending(&mut self) {
        // Should the cut fail too, the file ends in part of an event, which `swdaq inspect`
        // names as such; the events before it are whole, and the error is already told.
        let _ = self.file.set_len(self.stored.bytes);
        self.clear_pending();
    }

    fn clear_pending(&mut self) {
        self.pending.clear();
        self.pending_flagged = 0;
        self.pending_data_bytes = 0;
        self.unflushed.clear();
    }

    /// The end record after the file's events, then its final name.
    fn close(&mut self, end: &FileEnd, s: &FileSettings) -> io::Result<()> {
        let end = end.to_bytes();
        self.file
            .write_all_at(&end, self.stored.bytes)
            .and_then(|()| sync_if(s.sync_to_disk, &self.file))
            .map_err(|e| with_path(&self.writing, e))?;
        self.stored.bytes += END_BYTES;
        self.sums.update(&end);
        run_files::rename_no_replace(&self.writing, &self.stored.path)
            .map_err(|e| with_path(&self.writing, e))?;
        file_checksum::note_closed(s.run_number, &self.stored.path, Some(self.sums.finish()));
        sync_directory_if(s)
    }
}

pub struct EventFiles {
    settings: FileSettings,
    sequences: BTreeMap<u32, Sequence>,
    /// Files closed under their final name.
    pub closed: Vec<StoredFile>,
    /// Files an error left `.writing`, with the events they hold.
    pub left_open: Vec<StoredFile>,
    /// Events given to be written that are in no file (an error named why).
    pub unwritten: u64,
    /// Events written to the files at flush points so far, and their bytes.
    pub flushed_events: u64,
    pub flushed_bytes: u64,
}

impl EventFiles {
    pub fn new(settings: FileSettings) -> io::Result<Self> {
        std::fs::create_dir_all(&settings.dir)?;
        Ok(Self {
            settings,
            sequences: BTreeMap::new(),
            closed: Vec::new(),
            left_open: Vec::new(),
            unwritten: 0,
            flushed_events: 0,
            flushed_bytes: 0,
        })
    }

    /// Gives one event of `lumi_block` (`flagged`: it carries status) to its file, written
    /// there at its flush point (this one, if due). After an error, the events it was
    /// waiting with, and this one, are unwritten.
    pub fn write(&mut self, lumi_block: u32, event: &[u8], flagged: bool) -> io::Result<()> {
        let placed = u32::try_from(event.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "event over 4 GiB"))
            .and_then(|size| {
                self.make_room(lumi_block, event.len() as u64)
                    .map(|()| size)
            });
        let size = match placed {
            Ok(size) => size,
            Err(e) => {
                self.unwritten += 1;
                return Err(e);
            }
        };
        let seq = self.sequences.get_mut(&lumi_block).expect("made room");
        let f = seq.open.as_mut().expect("opened");
        seq.events += 1;
        seq.data_bytes += event.len() as u64;
        f.pending
            .extend_from_slice(&data_separator(seq.events, size));
        f.pending.extend_from_slice(event);
        f.pending_flagged += u64::from(flagged);
        f.pending_data_bytes += event.len() as u64;
        let now = Instant::now();
        f.unflushed.add(now);
        if f.unflushed.due(&self.settings.flush, now) || f.pending.len() >= MAX_PENDING_BYTES {
            return self.flush(lumi_block);
        }
        Ok(())
    }

    /// An open file of `lumi_block` with room for an event of `bytes`: the current one
    /// closed first if the event would take it past `max_file_bytes`.
    fn make_room(&mut self, lumi_block: u32, bytes: u64) -> io::Result<()> {
        let max = self.settings.max_file_bytes;
        let full = self
            .sequences
            .get(&lumi_block)
            .and_then(|s| s.open.as_ref())
            .is_some_and(|f| {
                let events = f.stored.events + f.unflushed.records();
                let size = f.stored.bytes + f.pending.len() as u64;
                events > 0 && size + SEPARATOR_BYTES + bytes + END_BYTES > max
            });
        if full {
            self.close_file(lumi_block, false)?;
        }
        let seq = self.sequences.entry(lumi_block).or_default();
        if seq.open.is_none() {
            seq.files += 1;
            seq.open = Some(open_file(&self.settings, lumi_block, seq.files)?);
        }
        Ok(())
    }

    /// A flush point of `lumi_block`'s open file; if it fails, the file is closed with what
    /// it held before.
    fn flush(&mut self, lumi_block: u32) -> io::Result<()> {
        let flushed = self.flush_open(lumi_block);
        if flushed.is_err() {
            // The error that stopped the flush is the one to tell, not the close's.
            let _ = self.close_file(lumi_block, false);
        }
        flushed
    }

    /// A flush point of `lumi_block`'s open file; if it fails, its waiting events are
    /// unwritten and the file holds what it held before.
    fn flush_open(&mut self, lumi_block: u32) -> io::Result<()> {
        let Some(seq) = self.sequences.get_mut(&lumi_block) else {
            return Ok(());
        };
        let Some(f) = seq.open.as_mut() else {
            return Ok(());
        };
        let (events, bytes) = (f.unflushed.records(), f.pending_data_bytes);
        let flushed = f.flush(&self.settings);
        if flushed.is_ok() {
            self.flushed_events += events;
            self.flushed_bytes += bytes;
        } else {
            f.drop_pending();
            // Block numbers go on from the last event written.
            seq.events -= events as u32;
            seq.data_bytes -= bytes;
            self.unwritten += events;
        }
        flushed
    }

    /// When the oldest waiting event of any open file must be written by: the caller calls
    /// [`Self::flush_due`] then if nothing else comes.
    pub fn flush_deadline(&self) -> Option<Instant> {
        self.sequences
            .values()
            .filter_map(|s| s.open.as_ref()?.unflushed.deadline(&self.settings.flush))
            .min()
    }

    /// Every flush point due now; the first error.
    pub fn flush_due(&mut self) -> io::Result<()> {
        let now = Instant::now();
        let due: Vec<u32> = self
            .sequences
            .iter()
            .filter(|(_, s)| {
                s.open
                    .as_ref()
                    .is_some_and(|f| f.unflushed.due(&self.settings.flush, now))
            })
            .map(|(&lb, _)| lb)
            .collect();
        let mut result = Ok(());
        for lb in due {
            let flushed = self.flush(lb);
            if result.is_ok() {
                result = flushed;
            }
        }
        result
    }

    /// Closes the open file of `lumi_block`, the last of its sequence when `last`: its
    /// waiting events written, its end record, its final name. Events that could not be
    /// written are unwritten; a file that could not be closed stays `.writing`.
    fn close_file(&mut self, lumi_block: u32, last: bool) -> io::Result<()> {
        let flushed = self.flush_open(lumi_block);
        let Some(seq) = self.sequences.get_mut(&lumi_block) else {
            return Ok(());
        };
        let Some(mut f) = seq.open.take() else {
            return Ok(());
        };
        let (date, time) = date_time(unix_seconds());
        let end = FileEnd {
            date,
            time,
            events_in_file: f.stored.events as u32,
            data_in_file_mb: megabytes(f.data_bytes),
            events_in_sequence: seq.events,
            data_in_sequence_mb: megabytes(seq.data_bytes),
            status: u32::from(last),
        };
        let closed = f.close(&end, &self.settings);
        match closed {
            Ok(()) => self.closed.push(f.stored),
            Err(_) => self.left_open.push(StoredFile {
                path: f.writing,
                ..f.stored
            }),
        }
        flushed.and(closed)
    }

    /// Every event of `lumi_block` has been written: its last file is closed as such.
    pub fn end_lumi_block(&mut self, lumi_block: u32) -> io::Result<()> {
        let closed = self.close_file(lumi_block, true);
        self.sequences.remove(&lumi_block);
        closed
    }

    /// Closes every open file; the first error.
    pub fn close_all(&mut self) -> io::Result<()> {
        let blocks: Vec<u32> = self.sequences.keys().copied().collect();
        let mut result = Ok(());
        for lb in blocks {
            let closed = self.end_lumi_block(lb);
            if result.is_ok() {
                result = closed;
            }
        }
        result
    }

    /// Closes every open file: the files written (closed, then any left `.writing`), the
    /// events in none, and the first error closing them.
    pub fn finish(mut self) -> (Vec<StoredFile>, u64, io::Result<()>) {
        let result = self.close_all();
        let mut files = self.closed;
        files.extend(self.left_open);
        (files, self.unwritten, result)
    }
}

/// What the HLT hands storage, in order.
pub enum ToStorage {
    Event {
        /// The L1 accept's number in the run.
        global_id: u64,
        lumi_block: u32,
        bytes: Vec<u8>,
        /// A ROB missing, or one missing e-links.
        flagged: bool,
    },
    LumiBlockEnded(u32),
}

/// What storage did: the files and their events, the events not written and why.
pub struct Stored {
    /// Events in the files (closed, or left `.writing` by an error).
    pub events: u64,
    pub flagged: u64,
    pub bytes: u64,
    pub files: Vec<StoredFile>,
    pub unwritten: u64,
    pub error: Option<String>,
}

/// What storage tells as it goes ([`store_telling`]).
pub enum Told<'a> {
    /// A flush point wrote this many more events (of these bytes) to their files.
    Flushed { events: u64, bytes: u64 },
    /// These events (global ids) are in a file just closed.
    Stored(Vec<u64>),
    /// The first failure: every event after it is unwritten.
    Failed(&'a str),
}

/// Stores every event `input` gives, closing a luminosity block's files once the HLT has
/// ended it; after a failure the rest are counted unwritten, so each event is stored (in a
/// file) or unwritten, never neither.
pub fn store(files: EventFiles, input: Receiver<ToStorage>) -> Stored {
    store_telling(files, input, |_| {})
}

/// [`store`], telling `told` of each flush point, of each closed file's events and of the
/// first failure as they happen (an HLT application's supervisor settles its events by
/// them). Waiting for events, it wakes for the next flush point due.
pub fn store_telling(
    mut files: EventFiles,
    input: Receiver<ToStorage>,
    mut told: impl FnMut(Told<'_>),
) -> Stored {
    let mut error: Option<String> = None;
    let mut after_failure = 0;
    // The events given to each luminosity block's open file, in order: the first of them
    // are those a closed file holds.
    let mut open: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut telling = Telling::default();
    loop {
        let message = match files.flush_deadline() {
            Some(due) => match input.recv_deadline(due) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match input.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            },
        };
        let (written, event) = match message {
            None => (files.flush_due(), None),
            Some(ToStorage::Event { .. }) if error.is_some() => {
                after_failure += 1;
                continue;
            }
            Some(ToStorage::Event {
                global_id,
                lumi_block,
                bytes,
                flagged,
            }) => (
                files.write(lumi_block, &bytes, flagged),
                Some((lumi_block, global_id)),
            ),
            Some(ToStorage::LumiBlockEnded(lb)) => (files.end_lumi_block(lb), None),
        };
        // A file closes before the event that would not fit is given to the next.
        telling.tell(&files, &mut open, &mut told);
        match (written, event) {
            (Ok(()), Some((lb, id))) => open.entry(lb).or_default().push(id),
            (Ok(()), None) => {}
            (Err(e), _) => fail(&mut error, &e, &mut told),
        }
    }
    let closed = files.close_all();
    telling.tell(&files, &mut open, &mut told);
    if let Err(e) = closed {
        fail(&mut error, &e, &mut told);
    }
    let (files, unwritten, _) = files.finish();
    Stored {
        events: files.iter().map(|f| f.events).sum(),
        flagged: files.iter().map(|f| f.flagged_events).sum(),
        bytes: files.iter().map(|f| f.bytes).sum(),
        unwritten: unwritten + after_failure,
        files,
        error,
    }
}

/// Tells the first failure only: every event after it is unwritten anyway.
fn fail(error: &mut Option<String>, e: &io::Error, told: &mut dyn FnMut(Told<'_>)) {
    if error.is_none() {
        told(Told::Failed(&e.to_string()));
        *error = Some(e.to_string());
    }
}

/// How far [`store_telling`] has told what its files did.
#[derive(Default)]
struct Telling {
    flushed_events: u64,
    flushed_bytes: u64,
    closed: usize,
    left_open: usize,
}

impl Telling {
    /// Tells the flush points and closed files since the last call; the events of a file
    /// left `.writing` are stored, but never told (nothing closed holds them).
    fn tell(
        &mut self,
        files: &EventFiles,
        open: &mut BTreeMap<u32, Vec<u64>>,
        told: &mut dyn FnMut(Told<'_>),
    ) {
        if files.flushed_events > self.flushed_events {
            told(Told::Flushed {
                events: files.flushed_events - self.flushed_events,
                bytes: files.flushed_bytes - self.flushed_bytes,
            });
            (self.flushed_events, self.flushed_bytes) = (files.flushed_events, files.flushed_bytes);
        }
        // The file's events are the first given to it; the rest were unwritten.
        let mut held = |f: &StoredFile| {
            let mut ids = open.remove(&f.lumi_block).unwrap_or_default();
            ids.truncate(f.events as usize);
            ids
        };
        for f in &files.closed[self.closed..] {
            told(Told::Stored(held(f)));
        }
        for f in &files.left_open[self.left_open..] {
            held(f);
        }
        (self.closed, self.left_open) = (files.closed.len(), files.left_open.len());
    }
}

fn open_file(s: &FileSettings, lumi_block: u32, file_number: u32) -> io::Result<OpenFile> {
    let name = RawFileName {
        project: s.project.clone(),
        run_number: s.run_number,
        stream_type: s.stream_type.clone(),
        stream_name: s.stream_name.clone(),
        lumi_block,
        app_name: s.app_name.clone(),
        sequence: file_number,
    };
    let writing = s.dir.join(name.writing());
    let (date, time) = date_time(unix_seconds());
    let head = FileHead {
        start: FileStart {
            version: FORMAT_VERSION,
            file_number,
            date,
            time,
            size_limit_data_blocks: 0,
            size_limit_mb: (s.max_file_bytes >> 20) as u32,
        },
        app_name: s.app_name.clone(),
        file_name_core: name.core(),
        metadata: [
            format!("GUID={}", guid()),
            format!("Stream={}", name.stream()),
            format!("Project={}", s.project),
            format!("LumiBlock={lumi_block}"),
        ]
        .into_iter()
        .chain(s.provenance.iter().flat_map(provenance_strings))
        .collect(),
        run: RunParameters {
            run_number: s.run_number,
            rec_enable: 1,
            ..RunParameters::default()
        },
    }
    .to_bytes();
    check_space(&s.dir, head.len() as u64 + END_BYTES, s.min_free_bytes)
        .map_err(|e| with_path(&writing, e))?;
    let file = run_files::create_new(&writing).map_err(|e| with_path(&writing, e))?;
    // Readable (with no events) from the start, its name kept with `sync_to_disk`.
    file.write_all_at(&head, 0)
        .and_then(|()| sync_if(s.sync_to_disk, &file))
        .map_err(|e| with_path(&writing, e))?;
    sync_directory_if(s)?;
    let mut sums = RunningChecksums::default();
    sums.update(&head);
    Ok(OpenFile {
        file,
        stored: StoredFile {
            path: s.dir.join(name.finished()),
            lumi_block,
            file_number,
            events: 0,
            flagged_events: 0,
            bytes: head.len() as u64,
        },
        writing,
        data_bytes: 0,
        pending: Vec::new(),
        pending_flagged: 0,
        pending_data_bytes: 0,
        unflushed: Unflushed::default(),
        sums,
    })
}

/// Room on `dir`'s file system for `needed` more bytes with `reserve` left free.
fn check_space(dir: &Path, needed: u64, reserve: u64) -> io::Result<()> {
    let short = run_files::space_short(dir, needed, reserve).map_err(|e| {
        let why = format!("cannot read the free space of {}: {e}", dir.display());
        io::Error::new(e.kind(), why)
    })?;
    match short {
        None => Ok(()),
        Some(available) => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "not enough free space in {}: {available} bytes left, {needed} to write plus the {reserve}-byte reserve (min_free_mb)",
                dir.display()
            ),
        )),
    }
}

/// With `sync_to_disk`: waits until `file`'s bytes are on the device.
fn sync_if(sync_to_disk: bool, file: &File) -> io::Result<()> {
    if sync_to_disk {
        file.sync_data()?;
    }
    Ok(())
}

/// With `sync_to_disk`: waits until the directory's entries (a created or renamed file's
/// name) are on the device.
fn sync_directory_if(s: &FileSettings) -> io::Result<()> {
    if s.sync_to_disk {
        File::open(&s.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| with_path(&s.dir, e))?;
    }
    Ok(())
}

/// A random (version 4) GUID as POOL writes one: `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX`.
fn guid() -> String {
    let r: u128 = rand::random::<u128>() & !(0xF << 76 | 0x3 << 62) | 0x4 << 76 | 0x2 << 62;
    let h = format!("{r:032X}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An I/O error that names the file it happened to.
fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::eventstorage::{Record, Records};

    fn settings(dir: &Path, max_file_bytes: u64) -> FileSettings {
        FileSettings {
            dir: dir.to_owned(),
            run_number: 3,
            project: "data_test".into(),
            stream_type: "physics".into(),
            stream_name: "Main".into(),
            app_name: "SFO-1".into(),
            max_file_bytes,
            flush: FlushPolicy::new(0, 0),
            sync_to_disk: false,
            min_free_bytes: 0,
            provenance: None,
        }
    }

    /// Each file's head, events (block number, first byte) and end record.
    fn read(path: &Path) -> (FileHead, Vec<(u32, u8)>, FileEnd) {
        let bytes = std::fs::read(path).unwrap();
        let (head, at) = FileHead::parse(&bytes).unwrap();
        let mut events = Vec::new();
        let mut end = None;
        for r in Records::new(&bytes, at) {
            match r {
                Record::Event {
                    block_number, data, ..
                } => events.push((block_number, data[0])),
                Record::End { end: e, .. } => end = Some(e),
                Record::Damaged { why, .. } => panic!("{why}"),
            }
        }
        (head, events, end.unwrap())
    }

    /// The events an open file holds as it lies on disk: each whole, none damaged.
    fn events_in_open_file(dir: &Path) -> Vec<u8> {
        let writing = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".writing"))
            .expect("an open file");
        let bytes = std::fs::read(writing).unwrap();
        let (_, at) = FileHead::parse(&bytes).unwrap();
        Records::new(&bytes, at)
            .map(|r| match r {
                Record::Event { data, .. } => data[0],
                other => panic!("an open file holds events only: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_open_file_holds_every_event_of_its_last_flush_point_by_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = EventFiles::new(FileSettings {
            flush: FlushPolicy::new(0, 4),
            ..settings(dir.path(), 1 << 20)
        })
        .unwrap();
        for i in 0..10u8 {
            files.write(1, &[i; 96], false).unwrap();
            let flushed = (u64::from(i) + 1) / 4 * 4;
            assert_eq!(files.flushed_events, flushed, "after event {i}");
            assert_eq!(files.flushed_bytes, flushed * 96);
            assert_eq!(
                events_in_open_file(dir.path()),
                (0..flushed as u8).collect::<Vec<_>>()
            );
        }
        // The waiting events are written at close, with the end record after them.
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        assert_eq!((written[0].events, unwritten), (10, 0));
        let (_, events, end) = read(&written[0].path);
        assert_eq!(events.len(), 10);
        assert_eq!(end.events_in_file, 10);
    }

    #[test]
    fn with_no_flush_bound_events_are_written_every_8_mib() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = EventFiles::new(settings(dir.path(), 1 << 30)).unwrap();
        let event = vec![7; 1 << 20];
        for i in 1..=9u64 {
            files.write(1, &event, false).unwrap();
            // The eighth event's separator takes the waiting bytes past 8 MiB.
            assert_eq!(files.flushed_events, if i < 8 { 0 } else { 8 }, "event {i}");
        }
        assert_eq!(events_in_open_file(dir.path()).len(), 8);
    }

    #[test]
    fn an_idle_writer_flushes_by_the_interval_and_tells_it() {
        let dir = tempfile::tempdir().unwrap();
        let files = EventFiles::new(FileSettings {
            flush: FlushPolicy::new(50, 0),
            ..settings(dir.path(), 1 << 20)
        })
        .unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (flushes_tx, flushes) = crossbeam_channel::unbounded();
        let writer = std::thread::spawn(move || {
            store_telling(files, rx, |t| {
                if let Told::Flushed { events, bytes } = t {
                    flushes_tx.send((events, bytes)).unwrap();
                }
            })
        });
        for i in 0..3u8 {
            tx.send(ToStorage::Event {
                global_id: u64::from(i) + 1,
                lumi_block: 1,
                bytes: vec![i; 64],
                flagged: false,
            })
            .unwrap();
        }
        // Nothing more comes: the writer wakes for the flush point of its own accord.
        let told = flushes.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(told, Ok((3, 3 * 64)));
        assert_eq!(events_in_open_file(dir.path()), vec![0, 1, 2]);
        drop(tx);
        let stored = writer.join().unwrap();
        assert_eq!((stored.events, stored.unwritten), (3, 0));
        assert!(
            flushes.try_recv().is_err(),
            "nothing was left to flush at close"
        );
    }

    #[test]
    fn without_room_above_the_reserve_nothing_is_written_and_the_error_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = EventFiles::new(FileSettings {
            min_free_bytes: u64::MAX / 2,
            ..settings(dir.path(), 1 << 20)
        })
        .unwrap();
        let e = files.write(1, &[1; 96], false).unwrap_err().to_string();
        assert!(
            e.contains("not enough free space") && e.contains("._lb0001._SFO-1._0001.writing"),
            "{e}"
        );
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        assert_eq!((written.len(), unwritten), (0, 1));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no file made"
        );
    }

    /// Each closed file's events are told once, when it closes (by size, by the end of its
    /// luminosity block, at the end of the run); the events of a file that could not be
    /// closed never are, and the first failure is told at once.
    #[test]
    fn storage_tells_each_event_once_its_file_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let event = |global_id: u64, lumi_block| ToStorage::Event {
            global_id,
            lumi_block,
            bytes: vec![global_id as u8; 96],
            flagged: false,
        };
        // Two blocks interleaved; block 1 ends after event 20, block 2 with the run.
        for id in 1..=20 {
            tx.send(event(id, 1 + u32::from(id % 2 == 0))).unwrap();
        }
        tx.send(ToStorage::LumiBlockEnded(1)).unwrap();
        tx.send(event(21, 2)).unwrap();
        drop(tx);
        let files = EventFiles::new(settings(dir.path(), 1000)).unwrap();
        let mut told = Vec::new();
        let stored = store_telling(files, rx, |t| match t {
            Told::Stored(ids) => told.push(ids),
            Told::Flushed { .. } => {}
            Told::Failed(e) => panic!("{e}"),
        });
        let mut all: Vec<u64> = told.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (1..=21).collect::<Vec<_>>(), "{told:?}");
        assert_eq!(told.len(), stored.files.len(), "one telling a closed file");
        for (ids, file) in told.iter().zip(&stored.files) {
            assert_eq!(ids.len() as u64, file.events, "{told:?}");
        }
        assert_eq!((stored.events, stored.unwritten), (21, 0));

        let out = dir.path().join("gone");
        let (tx, rx) = crossbeam_channel::unbounded();
        for id in 1..=12 {
            tx.send(event(id, 1)).unwrap();
        }
        drop(tx);
        let files = EventFiles::new(settings(&out, 1000)).unwrap();
        // The directory is gone before the first file can open: nothing is told stored.
        std::fs::remove_dir(&out).unwrap();
        let (mut settled, mut failures) = (Vec::new(), 0);
        let stored = store_telling(files, rx, |t| match t {
            Told::Stored(ids) => settled.extend(ids),
            Told::Flushed { .. } => {}
            Told::Failed(_) => failures += 1,
        });
        assert!(settled.is_empty(), "{settled:?}");
        assert_eq!(failures, 1, "told once, at once");
        assert_eq!(stored.events + stored.unwritten, 12);
        assert!(stored.error.is_some());
    }

    #[test]
    fn each_lumi_block_is_a_sequence_of_files_rolled_over_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = EventFiles::new(settings(dir.path(), 2000)).unwrap();
        for i in 0..25u8 {
            files
                .write(1 + u32::from(i >= 20), &[i; 96], i == 3)
                .unwrap();
        }
        files.end_lumi_block(1).unwrap();
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        assert_eq!(unwritten, 0);
        let names: Vec<String> = written
            .iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names[0],
            "data_test.00000003.physics_Main.daq.RAW._lb0001._SFO-1._0001.data"
        );
        assert_eq!(
            written
                .iter()
                .map(|f| (f.lumi_block, f.file_number))
                .collect::<Vec<_>>(),
            vec![(1, 1), (1, 2), (2, 1)]
        );
        let mut seen = Vec::new();
        for f in &written {
            assert_eq!(std::fs::metadata(&f.path).unwrap().len(), f.bytes);
            assert!(f.bytes <= 2000);
            let (head, events, end) = read(&f.path);
            assert_eq!(head.run.run_number, 3);
            assert_eq!(head.start.file_number, f.file_number);
            assert_eq!(
                head.metadata_value("LumiBlock"),
                Some(f.lumi_block.to_string().as_str())
            );
            assert_eq!(end.events_in_file as usize, events.len());
            seen.extend(events.iter().map(|e| e.1));
            // Block numbers count over the block's sequence; the last file says so.
            let last = f.file_number
                == written
                    .iter()
                    .filter(|g| g.lumi_block == f.lumi_block)
                    .count() as u32;
            assert_eq!(end.status, u32::from(last));
            assert_eq!(end.events_in_sequence, events.last().unwrap().0);
        }
        assert_eq!(seen, (0..25).collect::<Vec<u8>>());
        assert_eq!(written.iter().map(|f| f.flagged_events).sum::<u64>(), 1);
        assert!(
            std::fs::read_dir(dir.path()).unwrap().all(|e| !e
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".writing"))
        );
    }

    #[test]
    fn a_file_already_there_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 1 << 20);
        let taken = dir
            .path()
            .join("data_test.00000003.physics_Main.daq.RAW._lb0001._SFO-1._0001.data");
        std::fs::write(&taken, b"an earlier run").unwrap();
        let mut files = EventFiles::new(s).unwrap();
        files.write(1, &[1; 8], false).unwrap();
        let (written, unwritten, closed) = files.finish();
        assert!(closed.unwrap_err().to_string().contains("never replaced"));
        // The event stays in the file left `.writing`, beside the earlier run's.
        assert_eq!((written.len(), written[0].events, unwritten), (1, 1, 0));
        assert!(written[0].path.to_string_lossy().ends_with("_0001.writing"));
        assert_eq!(std::fs::read(&taken).unwrap(), b"an earlier run");
    }

    #[test]
    fn a_failed_file_names_itself_and_its_events_are_counted_unwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut files = EventFiles::new(FileSettings {
            flush: FlushPolicy::new(0, 1),
            ..settings(&out, 2000)
        })
        .unwrap();
        // 15 events a file: the first closed, the second full.
        for i in 0..30u8 {
            files.write(1, &[i; 96], false).unwrap();
        }
        // The directory goes away under the writer: the full file cannot be renamed, the
        // next one cannot be created.
        std::fs::rename(&out, dir.path().join("gone")).unwrap();
        for i in [30, 31] {
            let e = files.write(1, &[i; 96], false).unwrap_err();
            assert!(e.to_string().contains("._lb0001._SFO-1._000"), "{e}");
        }
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        // The full file, written but not renamed, is left `.writing` holding its events.
        assert_eq!(written.len(), 2);
        assert!(written[1].path.to_string_lossy().ends_with(".writing"));
        let stored: u64 = written.iter().map(|f| f.events).sum();
        assert_eq!((stored, unwritten), (30, 2));
    }
}
