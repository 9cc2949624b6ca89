//! A written file's size, Adler-32 (as ATLAS and CMS check raw files) and CRC32C, computed
//! over the bytes as the writer hands them to the kernel, so no file is read back to be
//! checksummed (a file a C library writes is read back once, off its writer's thread); and
//! the files each run closed, for the run registry to record.
//!
//! A writer that rewrites a header at close (the event builder's FRD files) checksums the
//! body as it goes and puts the final header in front with [`FileChecksums::after`]: both
//! checksums combine without the body's bytes.

use crc_fast::{CrcAlgorithm, Digest};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Adler-32's modulus (RFC 1950).
const ADLER_MOD: u64 = 65521;

/// What the registry keeps of a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileChecksums {
    pub bytes: u64,
    pub adler32: u32,
    pub crc32c: u32,
}

impl FileChecksums {
    /// The checksums of `head` followed by the bytes `self` was computed over.
    pub fn after(self, head: &[u8]) -> Self {
        let mut running = RunningChecksums::default();
        running.update(head);
        let head = running.finish();
        Self {
            bytes: head.bytes + self.bytes,
            adler32: adler32_combine(head.adler32, self.adler32, self.bytes),
            crc32c: crc_fast::checksum_combine(
                CrcAlgorithm::Crc32Iscsi,
                head.crc32c.into(),
                self.crc32c.into(),
                self.bytes,
            ) as u32,
        }
    }
}

/// Adler-32 of `x` then `y` from theirs and `y`'s length: the sums `a` add (each counts its
/// initial 1), and every byte of `y` adds `x`'s `a` once more to `b`.
fn adler32_combine(x: u32, y: u32, y_len: u64) -> u32 {
    let (a1, b1) = (u64::from(x & 0xffff), u64::from(x >> 16));
    let (a2, b2) = (u64::from(y & 0xffff), u64::from(y >> 16));
    let n = y_len % ADLER_MOD;
    let a = (a1 + a2 + ADLER_MOD - 1) % ADLER_MOD;
    let b = (b1 + b2 + n * ((a1 + ADLER_MOD - 1) % ADLER_MOD)) % ADLER_MOD;
    ((b << 16) | a) as u32
}

/// Checksums over bytes fed in order.
pub struct RunningChecksums {
    adler: simd_adler32::Adler32,
    crc: Digest,
    bytes: u64,
}

impl Default for RunningChecksums {
    fn default() -> Self {
        Self {
            adler: simd_adler32::Adler32::new(),
            crc: Digest::new(CrcAlgorithm::Crc32Iscsi),
            bytes: 0,
        }
    }
}

impl RunningChecksums {
    pub fn update(&mut self, bytes: &[u8]) {
        self.adler.write(bytes);
        self.crc.update(bytes);
        self.bytes += bytes.len() as u64;
    }

    pub fn finish(&self) -> FileChecksums {
        FileChecksums {
            bytes: self.bytes,
            adler32: self.adler.finish(),
            crc32c: self.crc.finalize() as u32,
        }
    }
}

/// A writer that checksums what it writes (only what the inner writer took).
pub struct ChecksumWriter<W> {
    inner: W,
    sums: RunningChecksums,
}

impl<W> ChecksumWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            sums: RunningChecksums::default(),
        }
    }

    pub fn checksums(&self) -> FileChecksums {
        self.sums.finish()
    }

    pub fn into_parts(self) -> (W, FileChecksums) {
        let sums = self.sums.finish();
        (self.inner, sums)
    }
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.sums.update(&bytes[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads a whole file once for its checksums: only for files a C library writes (HDF5),
/// whose bytes swdaq never holds.
pub fn read_checksums(path: &Path) -> io::Result<FileChecksums> {
    let mut sums = ChecksumWriter::new(io::sink());
    io::copy(&mut std::fs::File::open(path)?, &mut sums)?;
    Ok(sums.checksums())
}

/// A file a writer closed under its final name.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedFile {
    pub run: u32,
    pub path: PathBuf,
    /// `None` from a writer that never held the bytes (HDF5): [`read_missing_checksums`]
    /// reads the file once, off the writer's thread; `None` after it: no checksum.
    pub checksums: Option<FileChecksums>,
    pub closed_at: SystemTime,
}

/// Reads back each file that has no checksums yet. One that cannot be read is safe under
/// its name all the same: it keeps no checksum, and is returned with why.
pub fn read_missing_checksums(files: &mut [ClosedFile]) -> Vec<(PathBuf, io::Error)> {
    let mut unread = Vec::new();
    for file in files.iter_mut().filter(|f| f.checksums.is_none()) {
        match read_checksums(&file.path) {
            Ok(sums) => file.checksums = Some(sums),
            Err(e) => unread.push((file.path.clone(), e)),
        }
    }
    unread
}

/// Files closed in this process and not yet taken by the run registry. A process-wide list
/// because writers sit deep in every model's threads: a writer only pushes here, and the
/// run's own recorder thread takes them about every half second (and at the stop). A file
/// its writer rewrote (an EoLS `.jsn`) is noted again; its last note is the file as it is.
static CLOSED: Mutex<Vec<ClosedFile>> = Mutex::new(Vec::new());

/// Called by a writer once a file of `run` has its final name (`checksums`: `None` when
/// it never held the file's bytes).
pub fn note_closed(run: u32, path: &Path, checksums: Option<FileChecksums>) {
    let file = ClosedFile {
        run,
        path: path.to_path_buf(),
        checksums,
        closed_at: SystemTime::now(),
    };
    CLOSED.lock().unwrap_or_else(|e| e.into_inner()).push(file);
}

/// The files of `run` closed so far (each handed out once).
pub fn take_closed(run: u32) -> Vec<ClosedFile> {
    let mut closed = CLOSED.lock().unwrap_or_else(|e| e.into_inner());
    let (taken, kept) = closed.drain(..).partition(|f| f.run == run);
    *closed = kept;
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn of(bytes: &[u8]) -> FileChecksums {
        let mut sums = RunningChecksums::default();
        sums.update(bytes);
        sums.finish()
    }

    #[test]
    fn known_values() {
        // RFC 1950's Adler-32 and iSCSI's CRC32C of the usual check string.
        let sums = of(b"123456789");
        assert_eq!(sums.adler32, 0x091E_01DE);
        assert_eq!(sums.crc32c, 0xE306_9283);
        assert_eq!(sums.bytes, 9);
        assert_eq!(of(b"").adler32, 1);
    }

    proptest! {
        #[test]
        fn a_head_put_in_front_is_as_if_written_first(
            head in proptest::collection::vec(any::<u8>(), 0..64),
            body in proptest::collection::vec(any::<u8>(), 0..70_000),
        ) {
            let whole = [head.as_slice(), body.as_slice()].concat();
            prop_assert_eq!(of(&body).after(&head), of(&whole));
        }

        #[test]
        fn a_writer_checksums_what_it_wrote(parts in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..3000), 0..8)) {
            let mut w = ChecksumWriter::new(Vec::new());
            for p in &parts {
                w.write_all(p).unwrap();
            }
            let (bytes, sums) = w.into_parts();
            prop_assert_eq!(sums, of(&bytes));
        }
    }

    #[test]
    fn read_back_equals_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 5) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_checksums(&path).unwrap(), of(&bytes));
    }

    #[test]
    fn only_missing_checksums_are_read_and_an_unreadable_file_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let on_disk = dir.path().join("written");
        std::fs::write(&on_disk, b"123456789").unwrap();
        let file = |path: &Path, checksums| ClosedFile {
            run: 1,
            path: path.to_path_buf(),
            checksums,
            closed_at: SystemTime::now(),
        };
        let kept = FileChecksums::default();
        let gone = dir.path().join("gone");
        let mut files = [
            file(&on_disk, None),
            file(&on_disk, Some(kept)),
            file(&gone, None),
        ];
        let unread = read_missing_checksums(&mut files);
        assert_eq!(files[0].checksums, Some(of(b"123456789")));
        assert_eq!(files[1].checksums, Some(kept));
        assert_eq!(files[2].checksums, None);
        assert_eq!(unread.len(), 1);
        assert_eq!(unread[0].0, gone);
    }

    #[test]
    fn closed_files_are_taken_once_per_run() {
        note_closed(4_000_001, Path::new("a"), Some(of(b"a")));
        note_closed(4_000_002, Path::new("b"), None);
        let taken = take_closed(4_000_001);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].path, Path::new("a"));
        assert!(take_closed(4_000_001).is_empty());
        assert_eq!(take_closed(4_000_002).len(), 1);
    }
}
