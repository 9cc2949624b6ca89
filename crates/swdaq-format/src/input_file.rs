//! Opening a file swdaq reads as input (link, FED and card files, files to inspect): regular
//! files only. A FIFO would block the open until a writer comes and, read, could be neither
//! sized nor read twice (format detection would consume its head); a device could be endless.
//! The open itself never waits (`O_NONBLOCK`, which does nothing to a regular file's reads).
//!
//! A file of any size is checked in one pass from its start to its end ([`OnePass`]): mapped
//! ([`MappedFile`]), its pages handed back as the pass leaves them behind, so a 2 GB zero tail
//! costs a few megabytes of memory, not 2 GB.

use memmap2::{Advice, Mmap, UncheckedAdvice};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Opens `path` for reading if it is a regular file; anything else is refused, named.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {}, not a regular file: swdaq reads inputs it can size and read again",
            path.display(),
            kind_name(kind)
        ),
    ))
}

/// Bytes a reader walks once from start to end, told as it goes what it has left behind.
pub trait OnePass {
    fn bytes(&self) -> &[u8];
    /// The pass is done with the bytes before `offset`: their memory may be handed back
    /// (read again, they come back from the file).
    fn passed(&self, offset: usize);
}

/// Bytes already in memory: nothing to hand back.
impl<T: AsRef<[u8]> + ?Sized> OnePass for T {
    fn bytes(&self) -> &[u8] {
        self.as_ref()
    }

    fn passed(&self, _offset: usize) {}
}

/// Pages are handed back once at least this much lies behind the pass: one `madvise` per
/// step, and the step bounds what the pass holds.
const RELEASE_STEP: usize = 8 << 20;

/// A regular file mapped read-only for one pass: the pages behind the pass leave the
/// process's memory, so what it holds of the file is about [`RELEASE_STEP`] and the item it
/// reads, whatever the file's size.
// Mapped rather than read in windows: the scans keep their whole-file view, so an event of
// any size is checked, and resynchronised past, exactly as in a file read whole.
pub struct MappedFile {
    map: Mmap,
    /// Bytes from the start whose pages were handed back; atomic so that a map shared
    /// between threads (Python's views) may be handed back too.
    released: AtomicUsize,
}

impl MappedFile {
    /// Maps `path` if it is a regular file ([`open_regular`]).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = open_regular(path)?;
        // SAFETY: the map is read-only and only read through `bytes`. It stays valid unless
        // another process shrinks the file (reads past the new end fault); swdaq's writers
        // never shrink or rewrite a file a reader may hold: they append, and finish a file by
        // a rename, never by truncation.
        let map = unsafe { Mmap::map(&file) }?;
        // Best effort: a hint for read-ahead only.
        let _ = map.advise(Advice::Sequential);
        Ok(Self {
            map,
            released: AtomicUsize::new(0),
        })
    }
}

impl OnePass for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn passed(&self, offset: usize) {
        let end = offset.min(self.map.len());
        let start = self.released.load(Ordering::Relaxed);
        if end < start + RELEASE_STEP {
            return;
        }
        // SAFETY: the map is shared, read-only and never written, so dropping its pages loses
        // nothing: a later read (through a slice still borrowed, say) maps the file's page
        // again, with the same bytes. Only the page cache keeps them, outside our memory.
        // (The range's ends are widened to whole pages: the page `end` lies in is dropped
        // too, and read again.)
        let released = unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start)
        };
        // A refused hint costs memory, never correctness: the pass goes on either way.
        if released.is_ok() {
            self.released.fetch_max(end, Ordering::Relaxed);
        }
    }
}

/// Offsets in `from..to` where `bytes` holds one of two bytes (where a record may start),
/// found a step at a time; each step tells `passed` that what lies before it is left behind.
pub fn offsets_of<'a>(
    bytes: &'a [u8],
    (from, to): (usize, usize),
    (first, or): (u8, u8),
    passed: &'a dyn Fn(usize),
) -> impl Iterator<Item = usize> + 'a {
    let to = to.min(bytes.len());
    (from.min(to)..to)
        .step_by(RELEASE_STEP)
        .flat_map(move |step| {
            passed(step);
            let end = (step + RELEASE_STEP).min(to);
            memchr::memchr2_iter(first, or, &bytes[step..end]).map(move |at| step + at)
        })
}

fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::{Duration, Instant};

    #[test]
    fn a_regular_file_opens_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("link0.swraw");
        std::fs::write(&path, b"frames").unwrap();
        let mut text = String::new();
        open_regular(&path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "frames");
    }

    /// Without a writer, opening a FIFO for reading blocks for ever; here it is refused at
    /// once, named.
    #[test]
    fn a_fifo_a_directory_and_a_device_are_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let started = Instant::now();
        let e = open_regular(&fifo).unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        let e = open_regular(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = open_regular(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a device"), "{e}");
    }

    /// Resident pages of mapped files, in kB.
    fn mapped_resident_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The pages a pass left behind leave the process's memory; read again (through a slice
    /// borrowed before), they hold the same bytes.
    #[test]
    fn a_mapped_file_hands_back_the_pages_behind_the_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.raw");
        let bytes: Vec<u8> = (0..4 * RELEASE_STEP).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = MappedFile::open(&path).unwrap();
        let mapped = file.bytes();
        assert!(mapped == &bytes[..]);
        let touched = mapped_resident_kb();
        file.passed(RELEASE_STEP - 1);
        assert_eq!(
            file.released.load(Ordering::Relaxed),
            0,
            "less than a step behind: kept"
        );
        file.passed(mapped.len());
        let behind = mapped_resident_kb();
        let step_kb = (RELEASE_STEP / 1024) as u64;
        assert!(
            touched >= behind + 3 * step_kb,
            "{touched} kB resident before, {behind} kB after"
        );
        assert!(mapped == &bytes[..]);
    }

    /// Every offset of either byte is found, across step boundaries too, and each step is
    /// told before its offsets.
    #[test]
    fn offsets_of_finds_every_one_a_step_at_a_time() {
        let mut bytes = vec![0u8; 3 * RELEASE_STEP + 5];
        let marked = [
            1,
            RELEASE_STEP - 1,
            RELEASE_STEP,
            2 * RELEASE_STEP + 7,
            bytes.len() - 1,
        ];
        for (i, &at) in marked.iter().enumerate() {
            bytes[at] = if i % 2 == 0 { 0xcc } else { 0xdd };
        }
        let told = std::cell::RefCell::new(Vec::new());
        let passed = |at| told.borrow_mut().push(at);
        let found: Vec<usize> = offsets_of(&bytes, (1, bytes.len()), (0xcc, 0xdd), &passed)
            .inspect(|&at| assert!(told.borrow().last().is_some_and(|&step| step <= at)))
            .collect();
        assert_eq!(found, marked);
        let steps = [
            1,
            1 + RELEASE_STEP,
            1 + 2 * RELEASE_STEP,
            1 + 3 * RELEASE_STEP,
        ];
        assert_eq!(*told.borrow(), steps);
        let within: Vec<usize> =
            offsets_of(&bytes, (2, RELEASE_STEP), (0xcc, 0xdd), &|_| {}).collect();
        assert_eq!(within, [RELEASE_STEP - 1]);
    }
}
