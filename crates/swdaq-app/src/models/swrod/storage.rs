//! Storage of the SW ROD run: full events as records of swdaq raw files, a new file when the
//! current one would pass `max_file_bytes`. A file is written as `NAME.part` and renamed when
//! closed, so a reader never sees a file being written; an event counts as stored once its
//! file is closed, and the events of a file that could not be finished count as unwritten.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use swdaq_format::SourceId;
use swdaq_format::eformat_event::RAW_FILE_TYPE;
use swdaq_format::rawfile::{RAW_HEADER_SIZE, RECORD_HEADER_SIZE, RawFileHeader, RawFileWriter};
use swdaq_format::run_files;

const WRITE_BUFFER: usize = 8 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredFile {
    pub path: PathBuf,
    pub events: u64,
    pub bytes: u64,
}

pub struct EventFiles {
    dir: PathBuf,
    run_number: u32,
    max_file_bytes: u64,
    nominal_event_bytes: u32,
    current: Option<(RawFileWriter<BufWriter<File>>, StoredFile)>,
    pub closed: Vec<StoredFile>,
    /// Events given to a file that could not be finished (an error named the file).
    pub unwritten: u64,
}

impl EventFiles {
    pub fn new(
        dir: &Path,
        run_number: u32,
        max_file_bytes: u64,
        nominal_event_bytes: u32,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            run_number,
            max_file_bytes,
            nominal_event_bytes: nominal_event_bytes.max(1),
            current: None,
            closed: Vec::new(),
            unwritten: 0,
        })
    }

    /// Writes one event; after an error the open file's events and this one are unwritten.
    pub fn write(&mut self, event: &[u8]) -> io::Result<()> {
        let written = self.write_event(event);
        if written.is_err() {
            self.abandon_open_file();
            self.unwritten += 1;
        }
        written
    }

    fn abandon_open_file(&mut self) {
        if let Some((_, f)) = self.current.take() {
            // Its `.part` stays, as a killed writer's would, for `swdaq inspect` to name.
            self.unwritten += f.events;
        }
    }

    fn write_event(&mut self, event: &[u8]) -> io::Result<()> {
        let size = (RECORD_HEADER_SIZE + event.len()) as u64;
        if let Some((_, f)) = &self.current
            && f.events > 0
            && f.bytes + size > self.max_file_bytes
        {
            self.close()?;
        }
        if self.current.is_none() {
            self.open()?;
        }
        if let Some((writer, f)) = &mut self.current {
            writer.write_frame(event).map_err(at(&f.path))?;
            f.events += 1;
            f.bytes += size;
        }
        Ok(())
    }

    fn open(&mut self) -> io::Result<()> {
        let path = self.dir.join(format!(
            "swrod_run{:06}_{:04}.raw",
            self.run_number,
            self.closed.len()
        ));
        let file = run_files::create_new(&part(&path)).map_err(at(&part(&path)))?;
        let header = RawFileHeader {
            frame_type: RAW_FILE_TYPE,
            frame_size: self.nominal_event_bytes,
            source_id: SourceId::readout(0),
            run_number: self.run_number,
            first_timestamp: 0,
            created_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        let writer = RawFileWriter::new(BufWriter::with_capacity(WRITE_BUFFER, file), &header)
            .map_err(at(&part(&path)))?;
        self.current = Some((
            writer,
            StoredFile {
                path,
                events: 0,
                bytes: RAW_HEADER_SIZE as u64,
            },
        ));
        Ok(())
    }

    fn close(&mut self) -> io::Result<()> {
        let Some((writer, f)) = self.current.take() else {
            return Ok(());
        };
        let partial = part(&f.path);
        let closed = writer
            .finish()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .and_then(|file| file.sync_all())
            .and_then(|()| run_files::rename_no_replace(&partial, &f.path))
            .map_err(at(&partial));
        match closed {
            Ok(()) => self.closed.push(f),
            Err(_) => self.unwritten += f.events,
        }
        closed
    }

    /// Closes the open file: the files written, and the events that could not be.
    pub fn finish(mut self) -> (Vec<StoredFile>, u64, io::Result<()>) {
        let closed = self.close();
        (self.closed, self.unwritten, closed)
    }
}

/// What storage (an HLT application's) left in its directory for one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeftOnDisk {
    /// Events (global ids) in its closed files.
    pub events: BTreeSet<u64>,
    pub files: u64,
    pub bytes: u64,
    /// Files it left open (`.part`), by name: their events are not written.
    pub partial: Vec<String>,
    /// Closed files with anything wrong, with why (their good events count).
    pub unreadable: Vec<String>,
}

/// Reads back what run `run`'s storage left in `dir`: the events (global ids) of its closed
/// files, checked by `swdaq_swrod::inspect`, and the files it left open, by name.
pub fn read_back(dir: &Path, run: u32) -> io::Result<LeftOnDisk> {
    let prefix = format!("swrod_run{run:06}_");
    let mut left = LeftOnDisk::default();
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<_>>()?;
    names.retain(|n| n.starts_with(&prefix));
    names.sort();
    for name in names {
        if name.ends_with(".part") {
            left.partial.push(name);
            continue;
        }
        let bytes = std::fs::read(dir.join(&name))?;
        let report = swdaq_swrod::inspect::inspect(&bytes, None);
        if !report.problems.is_empty() {
            let why: Vec<&str> = report.problems.iter().map(|p| p.reason.as_str()).collect();
            left.unreadable.push(format!("{name}: {}", why.join("; ")));
        }
        // Without its header it is not a file storage closed.
        if report.run_number.is_none() {
            continue;
        }
        left.files += 1;
        left.bytes += bytes.len() as u64;
        left.events
            .extend(report.events.iter().map(|e| u64::from(e.global_id)));
    }
    Ok(left)
}

/// An I/O error that names the file it happened to.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn part(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".part");
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::rawfile::RawFileReader;

    #[test]
    fn files_roll_over_and_hold_every_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = EventFiles::new(dir.path(), 3, 1000, 100).unwrap();
        for i in 0..25u8 {
            files.write(&[i; 96]).unwrap();
        }
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        assert_eq!(unwritten, 0);
        // 64-byte file header, then 104 bytes a record: 9 records fit in 1000 bytes.
        assert_eq!(
            written.iter().map(|f| f.events).collect::<Vec<_>>(),
            vec![9, 9, 7]
        );
        let mut seen = Vec::new();
        for f in &written {
            assert_eq!(std::fs::metadata(&f.path).unwrap().len(), f.bytes);
            let mut r = RawFileReader::new(File::open(&f.path).unwrap()).unwrap();
            assert_eq!(r.header().run_number, 3);
            let mut buf = Vec::new();
            while r.next_frame(&mut buf).unwrap() {
                seen.push(buf[0]);
            }
        }
        assert_eq!(seen, (0..25).collect::<Vec<u8>>());
        assert!(
            std::fs::read_dir(dir.path())
                .unwrap()
                .all(|e| { !e.unwrap().path().to_string_lossy().ends_with(".part") })
        );
    }

    #[test]
    fn a_failed_file_names_itself_and_its_events_are_counted_unwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut files = EventFiles::new(&out, 4, 1000, 100).unwrap();
        // 9 events a file: the first closed, the second full.
        for i in 0..18u8 {
            files.write(&[i; 96]).unwrap();
        }
        // The directory goes away under the writer: the full file cannot be renamed, the
        // next one cannot be created.
        std::fs::rename(&out, dir.path().join("gone")).unwrap();
        for i in [18, 19] {
            let e = files.write(&[i; 96]).unwrap_err();
            assert!(
                e.to_string().contains("swrod_run000004_0001.raw.part"),
                "{e}"
            );
        }
        let (written, unwritten, closed) = files.finish();
        closed.unwrap();
        // 9 in the closed file; 9 in the one that could not close, and the 2 after.
        assert_eq!(written.iter().map(|f| f.events).sum::<u64>(), 9);
        assert_eq!(unwritten, 11);
    }
}
