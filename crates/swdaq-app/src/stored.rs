//! What a run stored, read back for the operator's console: the newest event its files hold,
//! with each source's fragment size and, where the model has an event display, its picture.
//! Read from the files (not from the running system), so what is shown is what was written,
//! in one process or from applications; each model reads its own format
//! (`Configured::stored_event`), this module finds the files and tries them newest first.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use swdaq_format::run_files::RunsOnDisk;

/// The newest event read back from a run's files.
#[derive(Debug, Clone, Serialize)]
pub struct StoredEvent {
    pub file: PathBuf,
    /// Its number: the chain's trigger number, the event builder's event number, the SW
    /// ROD's L1 ID.
    pub event: u64,
    /// The whole event's bytes as stored.
    pub bytes: u64,
    /// Each source's fragment (link, FED, ROB), in the event's order.
    pub fragments: Vec<StoredFragment>,
    /// What was passed over or left out on the way, with why (newer events that did not
    /// read, files that could not be opened, fragments not drawn).
    pub left_out: Vec<String>,
    /// The event drawn (PNG), for a model with an event display.
    #[serde(skip)]
    pub picture: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredFragment {
    pub source: String,
    pub bytes: u64,
}

/// Run `run`'s files in `dirs`, those in a directory of the run's (an event builder unit's
/// `run000007/`) included, in name order.
pub fn files_of_run(dirs: &[PathBuf], run: u32) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| RunsOnDisk::scan(dir, Some(run)).ok())
        .flat_map(|found| found.files_of_run)
        .collect();
    // Bounded: a run's directory and the directories inside it (the CMS `jsd/`), no deeper.
    for _ in 0..3 {
        let mut inner = Vec::new();
        for path in todo {
            match std::fs::read_dir(&path) {
                Ok(entries) => inner.extend(entries.filter_map(|e| Some(e.ok()?.path()))),
                Err(_) => files.push(path),
            }
        }
        todo = inner;
    }
    // A directory given and also found inside another given one (the SW ROD's HLT
    // directories under its output) is listed once.
    files.sort();
    files.dedup();
    files
}

/// Run `run`'s files in `dirs` whose names end with one of `suffixes`, newest first (by
/// modification time: several writers' directories interleave).
pub fn newest_files(dirs: &[PathBuf], run: u32, suffixes: &[&str]) -> Vec<PathBuf> {
    let mut files: Vec<(SystemTime, PathBuf)> = files_of_run(dirs, run)
        .into_iter()
        .filter(|f| {
            let name = f.to_string_lossy();
            suffixes.iter().any(|s| name.ends_with(s))
        })
        .filter_map(|f| Some((std::fs::metadata(&f).ok()?.modified().ok()?, f)))
        .collect();
    files.sort_by(|a, b| b.cmp(a));
    files.into_iter().map(|(_, f)| f).collect()
}

/// The newest event of run `run` that `read` finds in its files, trying them newest first;
/// `read` answers `Ok(None)` for a file with no event yet. `Err` says why there is none.
pub fn newest_event(
    dirs: &[PathBuf],
    run: u32,
    suffixes: &[&str],
    read: impl Fn(&Path, &mut Vec<String>) -> Result<Option<StoredEvent>, String>,
) -> Result<StoredEvent, String> {
    let mut passed_over = Vec::new();
    for file in newest_files(dirs, run, suffixes) {
        match read(&file, &mut passed_over) {
            Ok(Some(mut event)) => {
                passed_over.append(&mut event.left_out);
                event.left_out = passed_over;
                return Ok(event);
            }
            Ok(None) => {}
            Err(e) => passed_over.push(format!("{}: {e}", file.display())),
        }
    }
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    passed_over.insert(
        0,
        format!(
            "run {run} has no stored event to show yet in {}",
            dirs.join(", ")
        ),
    );
    Err(passed_over.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_file_with_an_event_is_read_and_the_ones_passed_over_named() {
        let dir = tempfile::tempdir().unwrap();
        let older = dir.path().join("run000007_0001.raw");
        let newer = dir.path().join("run000007_0002.raw");
        std::fs::write(&older, b"old").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&newer, b"").unwrap();
        let dirs = [dir.path().to_path_buf()];
        assert_eq!(newest_files(&dirs, 7, &[".raw"]), [newer.clone(), older]);
        let event = newest_event(&dirs, 7, &[".raw"], |file, _| {
            let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
            if bytes.is_empty() {
                return Err("no event yet".into());
            }
            Ok(Some(StoredEvent {
                file: file.to_path_buf(),
                event: 1,
                bytes: bytes.len() as u64,
                fragments: Vec::new(),
                left_out: Vec::new(),
                picture: None,
            }))
        })
        .unwrap();
        assert_eq!(event.bytes, 3);
        assert_eq!(
            event.left_out,
            [format!("{}: no event yet", newer.display())]
        );
        let none = newest_event(&dirs, 8, &[".raw"], |_, _| Ok(None)).unwrap_err();
        assert!(
            none.starts_with("run 8 has no stored event to show yet"),
            "{none}"
        );
    }
}
