//! What a storage left on disk for one run, read back after the run: the events (global ids)
//! of its closed EventStorage files, checked by [`crate::inspect`], and the files it left
//! being written. An HLT application that died cannot say which of its events reached a
//! closed file (a kill can land between the rename and the message); its directory can.

use crate::inspect::inspect;
use std::io;
use std::path::Path;
pub use swdaq_dataflow::credit::LeftOnDisk;
use swdaq_format::eventstorage::{FINISHED_EXTENSION, RawFileName, WRITING_EXTENSION};

/// Reads back the files of run `run` in `dir` (ATLAS file names; others are not looked at).
pub fn read_back(dir: &Path, run: u32) -> io::Result<LeftOnDisk> {
    let mut left = LeftOnDisk::default();
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<_>>()?;
    names.retain(|n| RawFileName::parse(n).is_some_and(|f| f.run_number == run));
    names.sort();
    for name in names {
        if name.ends_with(WRITING_EXTENSION) {
            left.partial.push(name);
            continue;
        }
        if !name.ends_with(FINISHED_EXTENSION) {
            continue;
        }
        let bytes = std::fs::read(dir.join(&name))?;
        let report = inspect(&bytes, &name, None);
        if !report.problems.is_empty() {
            let why: Vec<&str> = report.problems.iter().map(|p| p.reason.as_str()).collect();
            left.unreadable.push(format!("{name}: {}", why.join("; ")));
        }
        // Without its head it is not a file storage closed.
        if report.head.is_none() {
            continue;
        }
        left.files += 1;
        left.bytes += bytes.len() as u64;
        left.events
            .extend(report.events.iter().map(|e| e.global_id));
    }
    Ok(left)
}
