//! A builder unit's writer: FRD events into files of `events_per_file` events (one lumi
//! section per file) in the run's directory (`run{run:06}/`, laid out as [`crate::jsn`]
//! says, its `jsd/` definitions written first), each written as `NAME.raw.tmp` under a
//! `RAW_0002` header and renamed to `NAME.raw` when closed, then described by `NAME.jsn`.
//! A lumi section's `_EoLS.jsn` is written when the event manager says it is over
//! ([`ToWriter::EndOfLumi`], with its count over all builder units), for every lumi section
//! of the run, empty ones too (and rewritten if a late event still arrives for it); the
//! run's `_EoR.jsn` when the event manager says the run is over. Before each file it checks
//! the free space: below the reserve it stops (an error) or sheds events (counted), as
//! configured.
//!
//! Events are not copied into a write buffer: the open file keeps up to [`WRITE_BATCH`]
//! bytes of built events and writes their pieces (FRD header, super-fragments) where they
//! lie with one vectored write, so the only copy of an event's bytes is the kernel's. When
//! a file closes, the farm stand-in (if any) is told ([`FileWriter::notify_closed`]).

use crate::build::BuiltEvent;
use crate::config::DiskFullPolicy;
use crate::farm::ClosedFile;
use crate::jsn::{
    DEFINITIONS, EolsJsn, EorJsn, FileJsn, Writer, eols_file_name, eor_file_name, raw_file_name,
    run_directory,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use swdaq_format::file_checksum::{self, ChecksumWriter, RunningChecksums};
use swdaq_format::frd::{FRD_DATA_TYPE_EVENTS, FRD_FILE_HEADER_SIZE, FrdFileHeader};
use swdaq_format::provenance::Provenance;
use swdaq_format::run_files;

/// While shedding, free space is looked at no more often than this.
const SPACE_RECHECK: Duration = Duration::from_millis(10);
/// Bytes of events gathered before one vectored write: 1 MiB, ~100 events of 8 KiB, well
/// under the 1024 pieces a `writev` takes at once (std splits longer lists).
const WRITE_BATCH: usize = 1 << 20;

/// What a writer thread is handed, in the builder unit's order.
#[derive(Debug)]
pub enum ToWriter {
    Event(BuiltEvent),
    /// The event manager's end of a lumi section, passed on once none of its events is
    /// still being built.
    EndOfLumi {
        lumi: u32,
        total_events: u64,
    },
    /// The run's last lumi section, every one up to it ended (0: no event).
    EndOfRun {
        last_lumi: u32,
    },
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// The builder unit's directory: the run's files go in its `run{run:06}/`.
    pub directory: PathBuf,
    pub run: u32,
    pub events_per_file: u32,
    pub min_free_bytes: u64,
    pub disk_full: DiskFullPolicy,
    /// Who wrote the files (the `.jsn` `source`), e.g. `bu0`.
    pub source: String,
    /// The run and the software, in every `.jsn` (`jsn`'s `swdaq_provenance`); `None`
    /// writes CMS's keys alone.
    pub provenance: Option<Provenance>,
}

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "{dir}: {available} bytes free, below the reserve of {reserve} plus {needed} for the next file"
    )]
    DiskFull {
        dir: PathBuf,
        available: u64,
        needed: u64,
        reserve: u64,
    },
    #[error(
        "{dir} already holds files of run {run} ({file}): delete them or choose another run number; a run's files are never overwritten"
    )]
    RunExists {
        dir: PathBuf,
        run: u32,
        file: String,
    },
    /// A writer's error as its application reported it (the event builder as applications).
    #[error("{0}")]
    Reported(String),
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WriterError + 'a {
    move |source| WriterError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriterCounts {
    pub events: u64,
    pub files: u64,
    pub bytes: u64,
    /// Events dropped for want of space (shed policy).
    pub shed: u64,
    /// Events that arrived after their lumi section's EoLS was written.
    pub late_for_lumi: u64,
    /// Events that reached the writer after it had failed: never written.
    pub unwritten: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct LumiState {
    jsn: EolsJsn,
    next_index: u32,
    /// The event manager ended it (its EoLS is written).
    closed: bool,
}

struct OpenFile {
    lumi: u32,
    name: String,
    out: File,
    events: u32,
    bytes: u64,
    /// Events not yet written, and their bytes.
    pending: Vec<BuiltEvent>,
    pending_bytes: usize,
    /// Of the bytes after the file header (the header is rewritten at close).
    body: RunningChecksums,
}

impl OpenFile {
    fn write_pending(&mut self) -> io::Result<()> {
        let mut slices: Vec<IoSlice> = self
            .pending
            .iter()
            .flat_map(BuiltEvent::pieces)
            .map(IoSlice::new)
            .collect();
        write_all_vectored(&mut self.out, &mut slices)?;
        drop(slices);
        for piece in self.pending.iter().flat_map(BuiltEvent::pieces) {
            self.body.update(piece);
        }
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }
}

/// `Write::write_all_vectored` (not yet stable): every slice, whatever each call takes.
fn write_all_vectored(out: &mut File, mut slices: &mut [IoSlice]) -> io::Result<()> {
    while !slices.is_empty() {
        match out.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub struct FileWriter {
    config: WriterConfig,
    /// `run{run:06}/` under the unit's directory, absolute: the `.jsn` name their
    /// definitions by absolute path, as CMS writes them.
    run_dir: PathBuf,
    open: Option<OpenFile>,
    lumis: BTreeMap<u32, LumiState>,
    counts: WriterCounts,
    last_event_size: u64,
    shedding_checked: Option<Instant>,
    closed: Option<crossbeam_channel::Sender<ClosedFile>>,
}

impl FileWriter {
    pub fn new(config: WriterConfig) -> Result<Self, WriterError> {
        std::fs::create_dir_all(&config.directory)
            .map_err(io_error("cannot create", &config.directory))?;
        let dir = std::path::absolute(&config.directory)
            .map_err(io_error("cannot resolve", &config.directory))?;
        let run_dir = run_directory(&dir, config.run);
        // Creating the run directory is the claim: an earlier writer of this run made it.
        if let Err(e) = std::fs::create_dir(&run_dir) {
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                WriterError::RunExists {
                    dir: config.directory,
                    run: config.run,
                    file: run_dir.display().to_string(),
                }
            } else {
                io_error("cannot create", &run_dir)(e)
            });
        }
        let jsd = run_dir.join("jsd");
        std::fs::create_dir(&jsd).map_err(io_error("cannot create", &jsd))?;
        for definition in DEFINITIONS {
            write_whole(config.run, &definition.path(&run_dir), &definition.render())?;
        }
        Ok(Self {
            config,
            run_dir,
            open: None,
            lumis: BTreeMap::new(),
            counts: WriterCounts::default(),
            last_event_size: 0,
            shedding_checked: None,
            closed: None,
        })
    }

    /// Sends every file it closes (renamed, its `.jsn` written) to `closed`.
    pub fn notify_closed(mut self, closed: crossbeam_channel::Sender<ClosedFile>) -> Self {
        self.closed = Some(closed);
        self
    }

    pub fn counts(&self) -> WriterCounts {
        self.counts
    }

    /// The run's directory, where its files are.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Takes the event into the open file (written by the time the file closes). After an
    /// error the events of the file that could not be finished are counted unwritten (its
    /// `.tmp` stays for `swdaq inspect` to name); the event passed in is the caller's to count.
    pub fn write(&mut self, event: BuiltEvent) -> Result<(), WriterError> {
        let taken = self.take(event);
        if taken.is_err() {
            self.abandon_open_file();
        }
        taken
    }

    fn abandon_open_file(&mut self) {
        if let Some(open) = self.open.take() {
            self.counts.unwritten += u64::from(open.events);
        }
    }

    fn take(&mut self, event: BuiltEvent) -> Result<(), WriterError> {
        let lumi = event.lumi;
        if self
            .open
            .as_ref()
            .is_some_and(|f| f.lumi != lumi || f.events >= self.config.events_per_file)
        {
            self.close_file()?;
        }
        if self.lumis.get(&lumi).is_some_and(|l| l.closed) {
            self.counts.late_for_lumi += 1;
        }
        let size = event.size();
        self.last_event_size = size as u64;
        if self.open.is_none() && !self.open_file(lumi)? {
            self.counts.shed += 1;
            self.lumis.entry(lumi).or_default().jsn.lost_events += 1;
            return Ok(());
        }
        let file = self.open.as_mut().expect("opened above");
        file.events += 1;
        file.bytes += size as u64;
        file.pending.push(event);
        file.pending_bytes += size;
        if file.pending_bytes >= WRITE_BATCH
            && let Err(e) = file.write_pending()
        {
            // The event passed in is the caller's to count; the file's others are counted
            // unwritten when it is abandoned.
            file.events -= 1;
            let path = self.run_dir.join(format!("{}.tmp", file.name));
            return Err(io_error("cannot write", &path)(e));
        }
        Ok(())
    }

    /// Lumi section `lumi` is over, with `total_events` over all builder units: closes its
    /// file if open and writes its EoLS, whether this unit wrote any of its events or not.
    pub fn end_lumi(&mut self, lumi: u32, total_events: u64) -> Result<(), WriterError> {
        if self.open.as_ref().is_some_and(|f| f.lumi <= lumi) {
            self.close_file()?;
        }
        let state = self.lumis.entry(lumi).or_default();
        state.closed = true;
        state.jsn.total_events = total_events;
        self.write_eols(lumi)
    }

    /// Closes the open file and, when the run's end is known (`last_lumi`), writes its EoR;
    /// on an error, the counts so far (the open file's events unwritten) go with it.
    pub fn finish(
        mut self,
        last_lumi: Option<u32>,
    ) -> Result<WriterCounts, (WriterError, WriterCounts)> {
        let finished = self.close_file().and_then(|()| match last_lumi {
            Some(last) => self.write_eor(last),
            None => Ok(()),
        });
        match finished {
            Ok(()) => Ok(self.counts),
            Err(e) => {
                self.abandon_open_file();
                Err((e, self.counts))
            }
        }
    }

    /// Opens a file for `lumi`; false when shedding for want of space.
    fn open_file(&mut self, lumi: u32) -> Result<bool, WriterError> {
        let needed = self.last_event_size * self.config.events_per_file as u64;
        if self
            .shedding_checked
            .is_some_and(|t| t.elapsed() < SPACE_RECHECK)
        {
            return Ok(false);
        }
        let dir = &self.run_dir;
        let short = run_files::space_short(dir, needed, self.config.min_free_bytes)
            .map_err(io_error("cannot read the free space of", dir))?;
        if let Some(available) = short {
            return match self.config.disk_full {
                DiskFullPolicy::Stop => Err(WriterError::DiskFull {
                    dir: dir.clone(),
                    available,
                    needed,
                    reserve: self.config.min_free_bytes,
                }),
                DiskFullPolicy::Shed => {
                    self.shedding_checked = Some(Instant::now());
                    Ok(false)
                }
            };
        }
        self.shedding_checked = None;
        let state = self.lumis.entry(lumi).or_default();
        let name = raw_file_name(self.config.run, lumi, state.next_index);
        state.next_index += 1;
        let tmp = dir.join(format!("{name}.tmp"));
        let mut out = run_files::create_new(&tmp).map_err(io_error("cannot create", &tmp))?;
        // The header is rewritten with the counts when the file closes.
        out.write_all(&[0; FRD_FILE_HEADER_SIZE])
            .map_err(io_error("cannot write", &tmp))?;
        self.open = Some(OpenFile {
            lumi,
            name,
            out,
            events: 0,
            bytes: FRD_FILE_HEADER_SIZE as u64,
            pending: Vec::new(),
            pending_bytes: 0,
            body: RunningChecksums::default(),
        });
        Ok(true)
    }

    fn close_file(&mut self) -> Result<(), WriterError> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        let dir = &self.run_dir;
        let tmp = dir.join(format!("{}.tmp", open.name));
        let header = FrdFileHeader {
            data_type: FRD_DATA_TYPE_EVENTS,
            event_count: open.events,
            run: self.config.run,
            lumi: open.lumi,
            file_size: open.bytes,
        };
        let raw = dir.join(&open.name);
        let header = header.to_bytes();
        let finished = open
            .write_pending()
            .and_then(|()| open.out.write_all_at(&header, 0))
            .map_err(io_error("cannot write", &tmp))
            .and_then(|()| {
                run_files::rename_no_replace(&tmp, &raw).map_err(io_error("cannot rename", &tmp))
            });
        if let Err(e) = finished {
            // Not in a finished file: its `.tmp` is what a killed writer leaves.
            self.counts.unwritten += u64::from(open.events);
            return Err(e);
        }
        drop(open.out);
        file_checksum::note_closed(
            self.config.run,
            &raw,
            Some(open.body.finish().after(&header)),
        );
        // From here the events are in a complete file under its final name: written,
        // whatever happens to the bookkeeping after.
        self.counts.files += 1;
        self.counts.events += open.events as u64;
        self.counts.bytes += open.bytes;
        let jsn = FileJsn {
            events: open.events as u64,
            bytes: open.bytes,
        };
        let jsn_path = raw.with_extension("jsn");
        write_whole(
            self.config.run,
            &jsn_path,
            &jsn.render(&self.run_dir, &self.writer_id()),
        )?;
        if let Some(closed) = &self.closed {
            // The farm stand-in may have ended (the run is stopping); the file then stays.
            let _ = closed.send(ClosedFile {
                raw,
                jsn: jsn_path,
                run: self.config.run,
                lumi: open.lumi,
            });
        }
        let state = self.lumis.entry(open.lumi).or_default();
        state.jsn.events += open.events as u64;
        state.jsn.files += 1;
        state.jsn.bytes += open.bytes;
        if state.closed {
            self.write_eols(open.lumi)?;
        }
        Ok(())
    }

    /// Who wrote a `.jsn`: the builder unit, the run and the software.
    fn writer_id(&self) -> Writer<'_> {
        Writer {
            source: &self.config.source,
            provenance: self.config.provenance.as_ref(),
        }
    }

    fn write_eols(&self, lumi: u32) -> Result<(), WriterError> {
        let state = &self.lumis[&lumi];
        let path = self.run_dir.join(eols_file_name(self.config.run, lumi));
        write_whole(
            self.config.run,
            &path,
            &state.jsn.render(&self.run_dir, &self.writer_id()),
        )
    }

    /// The run's totals: `TotalEvents` over the lumi sections the event manager ended.
    fn write_eor(&self, last_lumi: u32) -> Result<(), WriterError> {
        let ended: Vec<&LumiState> = self.lumis.values().filter(|s| s.closed).collect();
        let eor = EorJsn {
            events: self.counts.events,
            files: self.counts.files,
            lumis: ended.len() as u64,
            last_lumi: u64::from(last_lumi),
            total_events: ended.iter().map(|s| s.jsn.total_events).sum(),
            lost_events: self.counts.shed,
        };
        let path = self.run_dir.join(eor_file_name(self.config.run));
        write_whole(
            self.config.run,
            &path,
            &eor.render(&self.run_dir, &self.writer_id()),
        )
    }
}

/// Writes `text` to `path` through a temporary name, so readers never see half a file, and
/// notes it closed for the run registry with the checksums of the bytes written (an EoLS
/// written again is noted again: its row on record is replaced, and it is transferred again).
fn write_whole(run: u32, path: &Path, text: &str) -> Result<(), WriterError> {
    let tmp = path.with_extension("jsn.tmp");
    let written = File::create(&tmp)
        .map(ChecksumWriter::new)
        .and_then(|mut out| out.write_all(text.as_bytes()).map(|()| out.checksums()))
        .map_err(io_error("cannot write", &tmp))
        .and_then(|sums| {
            std::fs::rename(&tmp, path).map_err(io_error("cannot rename", &tmp))?;
            Ok(sums)
        });
    match written {
        Ok(sums) => {
            file_checksum::note_closed(run, path, Some(sums));
            Ok(())
        }
        Err(e) => {
            // Half a bookkeeping file says nothing true; the error says what is missing.
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::frd::FrdFile;

    fn event(event: u64, lumi: u32) -> BuiltEvent {
        BuiltEvent::of_payload(0, lumi, event, vec![event as u8; 40])
    }

    fn read_jsn(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join("run000003").join(name)).unwrap()
    }

    fn config(dir: &Path, min_free_bytes: u64, disk_full: DiskFullPolicy) -> WriterConfig {
        WriterConfig {
            directory: dir.to_owned(),
            run: 3,
            events_per_file: 4,
            min_free_bytes,
            disk_full,
            source: "bu0".into(),
            provenance: None,
        }
    }

    /// Files of at most 4 events per lumi section; an EoLS for every lumi section the event
    /// manager ends, one this unit wrote nothing in too, with the event manager's total; the
    /// EoR; and every `.jsn` names a definition that is there, its legend as long as its data.
    #[test]
    fn files_of_n_events_per_lumi_with_jsn_eols_and_eor() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("run000003");
        let mut w = FileWriter::new(config(dir.path(), 0, DiskFullPolicy::Stop)).unwrap();
        for e in 1..=10 {
            w.write(event(e, if e <= 6 { 1 } else { 3 })).unwrap();
            if e == 6 {
                // Lumi 1's first file is closed and renamed, its second still being written.
                assert!(run_dir.join("run000003_ls0001_index000000.raw").exists());
                assert!(
                    run_dir
                        .join("run000003_ls0001_index000001.raw.tmp")
                        .exists()
                );
                // Other builder units' events of lumi 1 count in its total.
                w.end_lumi(1, 9).unwrap();
                w.end_lumi(2, 5).unwrap();
            }
        }
        w.end_lumi(3, 4).unwrap();
        let counts = w.finish(Some(3)).unwrap();
        assert_eq!((counts.events, counts.files), (10, 3));
        let mut names: Vec<_> = std::fs::read_dir(&run_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        let expect_events = [
            ("ls0001_index000000", 4),
            ("ls0001_index000001", 2),
            ("ls0003_index000000", 4),
        ];
        for (stem, n) in expect_events {
            let raw = std::fs::read(run_dir.join(format!("run000003_{stem}.raw"))).unwrap();
            let file = FrdFile::parse(&raw).unwrap();
            assert_eq!(file.header.event_count, n);
            assert!(file.events().all(|e| e.unwrap().crc_ok()));
            let jsn =
                FileJsn::parse(&read_jsn(dir.path(), &format!("run000003_{stem}.jsn"))).unwrap();
            assert_eq!(
                jsn,
                FileJsn {
                    events: n as u64,
                    bytes: raw.len() as u64
                }
            );
        }
        let eols = |lumi: u32| {
            let j = EolsJsn::parse(&read_jsn(dir.path(), &eols_file_name(3, lumi))).unwrap();
            (j.events, j.files, j.total_events, j.lost_events)
        };
        assert_eq!(eols(1), (6, 2, 9, 0));
        assert_eq!(eols(2), (0, 0, 5, 0));
        assert_eq!(eols(3), (4, 1, 4, 0));
        let eor = EorJsn::parse(&read_jsn(dir.path(), "run000003_ls0000_EoR.jsn")).unwrap();
        assert_eq!(
            eor,
            EorJsn {
                events: 10,
                files: 3,
                lumis: 3,
                last_lumi: 3,
                total_events: 18,
                lost_events: 0,
            }
        );
        for name in names.iter().filter(|n| n.ends_with(".jsn")) {
            let doc: serde_json::Value = serde_json::from_str(&read_jsn(dir.path(), name)).unwrap();
            let definition = Path::new(doc["definition"].as_str().unwrap());
            assert!(definition.is_absolute(), "{name}: {definition:?}");
            let jsd: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(definition).unwrap()).unwrap();
            assert_eq!(
                jsd["legend"].as_array().unwrap().len(),
                doc["data"].as_array().unwrap().len(),
                "{name}"
            );
        }
    }

    #[test]
    fn vectored_writes_put_each_event_s_pieces_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), 0, DiskFullPolicy::Stop);
        cfg.events_per_file = 300;
        let mut w = FileWriter::new(cfg).unwrap();
        // 300 events of three super-fragments, about 2.4 MB: more than two write batches.
        let events: Vec<BuiltEvent> = (1..=300u64)
            .map(|e| {
                let mut built = event(e, 1);
                built.parts = (0..3u16)
                    .map(|ru| crate::message::SuperFragment {
                        ru,
                        event: e,
                        bad_feds: 0,
                        data: vec![
                            (e as u8) ^ (ru as u8);
                            2000 + (e as usize * 13 + ru as usize) % 900
                        ],
                    })
                    .collect();
                built
            })
            .collect();
        let mut expected = Vec::new();
        for e in &events {
            expected.extend(e.to_vec());
        }
        for e in events {
            w.write(e).unwrap();
        }
        w.finish(None).unwrap();
        let header = FrdFileHeader {
            data_type: FRD_DATA_TYPE_EVENTS,
            event_count: 300,
            run: 3,
            lumi: 1,
            file_size: (FRD_FILE_HEADER_SIZE + expected.len()) as u64,
        };
        expected.splice(0..0, header.to_bytes());
        assert!(expected.len() > 2 * WRITE_BATCH);
        let raw = std::fs::read(
            dir.path()
                .join("run000003/run000003_ls0001_index000000.raw"),
        )
        .unwrap();
        assert!(
            raw == expected,
            "the file differs from its events back to back"
        );
    }

    /// A second writer of the same run in the same directory is refused before it touches
    /// anything; another run's writer there is not.
    #[test]
    fn a_run_s_closed_files_are_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = FileWriter::new(config(dir.path(), 0, DiskFullPolicy::Stop)).unwrap();
        for e in 1..=4 {
            w.write(event(e, 1)).unwrap();
        }
        w.finish(None).unwrap();
        let first = dir
            .path()
            .join("run000003/run000003_ls0001_index000000.raw");
        let before = std::fs::read(&first).unwrap();
        match FileWriter::new(config(dir.path(), 0, DiskFullPolicy::Stop)) {
            Err(WriterError::RunExists { run: 3, file, .. }) => {
                assert!(file.ends_with("run000003"), "{file}")
            }
            other => panic!("expected RunExists, got {:?}", other.err()),
        }
        let next_run = WriterConfig {
            run: 4,
            ..config(dir.path(), 0, DiskFullPolicy::Stop)
        };
        FileWriter::new(next_run).unwrap();
        let after = std::fs::read(&first).unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn full_disk_stops_or_sheds_by_policy() {
        let dir = tempfile::tempdir().unwrap();
        let mut w =
            FileWriter::new(config(dir.path(), u64::MAX / 2, DiskFullPolicy::Stop)).unwrap();
        assert!(matches!(
            w.write(event(1, 1)),
            Err(WriterError::DiskFull { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let mut w =
            FileWriter::new(config(dir.path(), u64::MAX / 2, DiskFullPolicy::Shed)).unwrap();
        for e in 1..=5 {
            w.write(event(e, 1)).unwrap();
        }
        w.end_lumi(1, 5).unwrap();
        let counts = w.finish(Some(1)).unwrap();
        assert_eq!((counts.events, counts.shed), (0, 5));
        let eols = EolsJsn::parse(&read_jsn(dir.path(), "run000003_ls0001_EoLS.jsn")).unwrap();
        assert_eq!(
            (eols.events, eols.lost_events, eols.total_events),
            (0, 5, 5)
        );
    }

    /// A batched write that fails (the disk filled up under an open file) leaves every event
    /// in exactly one count: the file's earlier events unwritten, the one passed in the
    /// caller's (its error), none in both.
    #[test]
    fn a_failed_batch_write_counts_each_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path(), 0, DiskFullPolicy::Stop);
        c.events_per_file = 1000;
        let mut w = FileWriter::new(c).unwrap();
        let big = |e| BuiltEvent::of_payload(0, 1, e, vec![7; WRITE_BATCH / 3]);
        w.write(big(1)).unwrap();
        // Every write from here fails with "no space left on device".
        w.open.as_mut().unwrap().out = File::options().write(true).open("/dev/full").unwrap();
        let (mut passed, mut refused) = (1, 0);
        for e in 2..=8 {
            passed += 1;
            if w.write(big(e)).is_err() {
                refused += 1;
            }
        }
        let counts = w.finish(None).unwrap();
        assert!(refused > 0);
        assert_eq!(
            counts.events + counts.unwritten + refused,
            passed,
            "{counts:?}"
        );
    }

    /// Every bookkeeping file — definitions, each file's `.jsn`, EoLS, EoR — is noted closed
    /// for the run registry with the checksums of its bytes on disk; an EoLS written again
    /// (a late event's file) is noted again, its last note the file as it stays.
    #[test]
    fn every_jsn_is_noted_closed_with_its_checksums_and_a_rewritten_eols_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path(), 0, DiskFullPolicy::Stop);
        // A run of its own: the list of closed files is the process's.
        c.run = 4_300_001;
        let run_dir = dir.path().join("run4300001");
        let mut w = FileWriter::new(c).unwrap();
        w.write(event(1, 1)).unwrap();
        w.end_lumi(1, 2).unwrap();
        w.write(event(3, 2)).unwrap();
        w.write(event(2, 1)).unwrap();
        w.finish(Some(2)).unwrap();
        let noted = file_checksum::take_closed(4_300_001);
        let eols = run_dir.join(eols_file_name(4_300_001, 1));
        let eols_notes: Vec<_> = noted.iter().filter(|f| f.path == eols).collect();
        assert_eq!(eols_notes.len(), 2, "written, then again: {noted:?}");
        assert_ne!(eols_notes[0].checksums, eols_notes[1].checksums);
        // The last note of each file is what is on disk.
        let mut last = BTreeMap::new();
        for f in &noted {
            last.insert(f.path.clone(), f.checksums);
        }
        for (path, sums) in &last {
            assert_eq!(
                *sums,
                Some(file_checksum::read_checksums(path).unwrap()),
                "{}",
                path.display()
            );
        }
        let mut on_disk: Vec<PathBuf> = std::fs::read_dir(&run_dir)
            .unwrap()
            .chain(std::fs::read_dir(run_dir.join("jsd")).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        on_disk.sort();
        let noted: Vec<PathBuf> = last.into_keys().collect();
        assert_eq!(noted, on_disk, "every file the unit wrote, none twice");
        assert!(noted.iter().any(|p| p.extension().unwrap() == "jsd"));
        assert!(noted.contains(&run_dir.join(eor_file_name(4_300_001))));
    }

    #[test]
    fn late_event_for_a_closed_lumi_rewrites_its_eols() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = FileWriter::new(config(dir.path(), 0, DiskFullPolicy::Stop)).unwrap();
        w.write(event(1, 1)).unwrap();
        w.end_lumi(1, 2).unwrap();
        w.write(event(3, 2)).unwrap();
        w.write(event(2, 1)).unwrap();
        let counts = w.finish(None).unwrap();
        assert_eq!(counts.late_for_lumi, 1);
        let eols = EolsJsn::parse(&read_jsn(dir.path(), "run000003_ls0001_EoLS.jsn")).unwrap();
        assert_eq!((eols.events, eols.files), (2, 2));
    }
}
