//! Storage of the SW ROD run as an ATLAS SFO stores a stream: ATLAS EventStorage files
//! ([`swdaq_format::eventstorage`]) named as ATLAS names them, one sequence of files per
//! luminosity block (file numbers from 1; a new file when the current one would pass
//! `max_file_bytes`), each file a head, a data separator before every event and an end
//! record; a block's last file says so in its end record.
//!
//! A file is written as `NAME._NNNN.writing` (created only if nothing has that name) and
//! renamed to `NAME._NNNN.data` when closed, never over an existing file: a reader never
//! sees a file being written, and no run's file replaces another's. An event counts as
//! stored once its file is closed; the events of a file that could not be finished count as
//! unwritten, and the `.writing` file stays for `swdaq inspect` to name.

use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use swdaq_format::eventstorage::{
    DATA_SEPARATOR_WORDS, FILE_END_WORDS, FORMAT_VERSION, FileEnd, FileHead, FileStart,
    RawFileName, RunParameters, data_separator, date_time, megabytes,
};
use swdaq_format::run_files;

const WRITE_BUFFER: usize = 8 << 20;
const SEPARATOR_BYTES: u64 = (DATA_SEPARATOR_WORDS * 4) as u64;
const END_BYTES: u64 = (FILE_END_WORDS * 4) as u64;

/// What every file of the run says of itself.
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFile {
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
    events: u32,
    data_bytes: u64,
    open: Option<OpenFile>,
}

struct OpenFile {
    out: BufWriter<File>,
    writing: PathBuf,
    stored: StoredFile,
    data_bytes: u64,
}

pub struct EventFiles {
    settings: FileSettings,
    sequences: BTreeMap<u32, Sequence>,
    pub closed: Vec<StoredFile>,
    /// Events given to a file that could not be finished (an error named the file).
    pub unwritten: u64,
}

impl EventFiles {
    pub fn new(settings: FileSettings) -> io::Result<Self> {
        std::fs::create_dir_all(&settings.dir)?;
        Ok(Self {
            settings,
            sequences: BTreeMap::new(),
            closed: Vec::new(),
            unwritten: 0,
        })
    }

    /// Writes one event of `lumi_block` (`flagged`: it carries status); after an error the
    /// file it was for and this event are unwritten.
    pub fn write(&mut self, lumi_block: u32, event: &[u8], flagged: bool) -> io::Result<()> {
        let written = self.write_event(lumi_block, event, flagged);
        if written.is_err() {
            let seq = self.sequences.entry(lumi_block).or_default();
            if let Some(f) = seq.open.take() {
                self.unwritten += f.stored.events;
            }
            self.unwritten += 1;
        }
        written
    }

    fn write_event(&mut self, lumi_block: u32, event: &[u8], flagged: bool) -> io::Result<()> {
        let record = SEPARATOR_BYTES + event.len() as u64;
        let size = u32::try_from(event.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "event over 4 GiB"))?;
        let full = self
            .sequences
            .get(&lumi_block)
            .and_then(|s| s.open.as_ref())
            .is_some_and(|f| {
                f.stored.events > 0
                    && f.stored.bytes + record + END_BYTES > self.settings.max_file_bytes
            });
        if full {
            self.close_file(lumi_block, false)?;
        }
        let seq = self.sequences.entry(lumi_block).or_default();
        if seq.open.is_none() {
            seq.files += 1;
            seq.open = Some(open_file(&self.settings, lumi_block, seq.files)?);
        }
        let f = seq.open.as_mut().expect("opened above");
        let at = |e| with_path(&f.writing, e);
        f.out
            .write_all(&data_separator(seq.events + 1, size))
            .map_err(at)?;
        f.out
            .write_all(event)
            .map_err(|e| with_path(&f.writing, e))?;
        seq.events += 1;
        seq.data_bytes += event.len() as u64;
        f.data_bytes += event.len() as u64;
        f.stored.events += 1;
        f.stored.flagged_events += u64::from(flagged);
        f.stored.bytes += record;
        Ok(())
    }

    /// Closes the open file of `lumi_block`, the last of its sequence when `last`.
    fn close_file(&mut self, lumi_block: u32, last: bool) -> io::Result<()> {
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
        f.stored.bytes += END_BYTES;
        let closed = f
            .out
            .write_all(&end.to_bytes())
            .and_then(|()| f.out.into_inner().map_err(|e| e.into_error()))
            .and_then(|file| file.sync_all())
            .and_then(|()| run_files::rename_no_replace(&f.writing, &f.stored.path))
            .map_err(|e| with_path(&f.writing, e));
        match closed {
            Ok(()) => self.closed.push(f.stored),
            Err(_) => self.unwritten += f.stored.events,
        }
        closed
    }

    /// Every event of `lumi_block` has been written: its last file is closed as such.
    pub fn end_lumi_block(&mut self, lumi_block: u32) -> io::Result<()> {
        let closed = self.close_file(lumi_block, true);
        self.sequences.remove(&lumi_block);
        closed
    }

    /// Closes every open file: the files written, the events that could not be, and the
    /// first error closing them.
    pub fn finish(mut self) -> (Vec<StoredFile>, u64, io::Result<()>) {
        let blocks: Vec<u32> = self.sequences.keys().copied().collect();
        let mut result = Ok(());
        for lb in blocks {
            let closed = self.end_lumi_block(lb);
            if result.is_ok() {
                result = closed;
            }
        }
        (self.closed, self.unwritten, result)
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

/// What storage did: the closed files and their events, the events not written and why.
pub struct Stored {
    pub events: u64,
    pub flagged: u64,
    pub bytes: u64,
    pub files: Vec<StoredFile>,
    pub unwritten: u64,
    pub error: Option<String>,
}

/// What storage tells as it goes ([`store_telling`]).
pub enum Told<'a> {
    /// These events (global ids) are in a file just closed.
    Stored(Vec<u64>),
    /// The first failure: every event after it is unwritten.
    Failed(&'a str),
}

/// Stores every event `input` gives, closing a luminosity block's files once the HLT has
/// ended it; after a failure the rest are counted unwritten, so each event is stored (in a
/// closed file) or unwritten, never neither.
pub fn store(files: EventFiles, input: Receiver<ToStorage>) -> Stored {
    store_telling(files, input, |_| {})
}

/// [`store`], telling `told` of each closed file's events and of the first failure as they
/// happen (an HLT application's supervisor settles its events by them).
pub fn store_telling(
    mut files: EventFiles,
    input: Receiver<ToStorage>,
    mut told: impl FnMut(Told<'_>),
) -> Stored {
    let mut error: Option<String> = None;
    let mut after_failure = 0;
    // The events of each luminosity block's open file.
    let mut open: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let fail = |error: &mut Option<String>, e: io::Error, told: &mut dyn FnMut(Told<'_>)| {
        if error.is_none() {
            told(Told::Failed(&e.to_string()));
            *error = Some(e.to_string());
        }
    };
    for message in input.iter() {
        let closed_before = files.closed.len();
        let (written, event) = match message {
            ToStorage::Event { .. } if error.is_some() => {
                after_failure += 1;
                continue;
            }
            ToStorage::Event {
                global_id,
                lumi_block,
                bytes,
                flagged,
            } => (
                files.write(lumi_block, &bytes, flagged),
                Some((lumi_block, global_id)),
            ),
            ToStorage::LumiBlockEnded(lb) => (files.end_lumi_block(lb), None),
        };
        // A file closes before the event that would not fit is written, into the next.
        for f in &files.closed[closed_before..] {
            told(Told::Stored(open.remove(&f.lumi_block).unwrap_or_default()));
        }
        match (written, event) {
            (Ok(()), Some((lb, id))) => open.entry(lb).or_default().push(id),
            (Ok(()), None) => {}
            (Err(e), at) => {
                // The failed file's events are unwritten, never settled.
                if let Some((lb, _)) = at {
                    open.remove(&lb);
                }
                fail(&mut error, e, &mut told);
            }
        }
    }
    let closed_before = files.closed.len();
    let (files, unwritten, closed) = files.finish();
    for f in &files[closed_before..] {
        told(Told::Stored(open.remove(&f.lumi_block).unwrap_or_default()));
    }
    if let Err(e) = closed {
        fail(&mut error, e, &mut told);
    }
    Stored {
        events: files.iter().map(|f| f.events).sum(),
        flagged: files.iter().map(|f| f.flagged_events).sum(),
        bytes: files.iter().map(|f| f.bytes).sum(),
        unwritten: unwritten + after_failure,
        files,
        error,
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
    let file = run_files::create_new(&writing).map_err(|e| with_path(&writing, e))?;
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
        metadata: vec![
            format!("GUID={}", guid()),
            format!("Stream={}", name.stream()),
            format!("Project={}", s.project),
            format!("LumiBlock={lumi_block}"),
        ],
        run: RunParameters {
            run_number: s.run_number,
            rec_enable: 1,
            ..RunParameters::default()
        },
    }
    .to_bytes();
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
    out.write_all(&head).map_err(|e| with_path(&writing, e))?;
    Ok(OpenFile {
        out,
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
    })
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
        assert_eq!((written.len(), unwritten), (0, 1));
        assert_eq!(std::fs::read(&taken).unwrap(), b"an earlier run");
    }

    #[test]
    fn a_failed_file_names_itself_and_its_events_are_counted_unwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut files = EventFiles::new(settings(&out, 2000)).unwrap();
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
        let first = written[0].events;
        assert_eq!(written.len(), 1);
        assert_eq!(first + unwritten, 32);
    }
}
