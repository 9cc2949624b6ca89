//! The disk under a directory, as COMPASS assessed its readout servers' drives: one file
//! written sequentially in 1 MiB writes left to the page cache (what a writer sees while
//! memory absorbs it), the same ended with `fdatasync` (what reaches the device), then read
//! back after asking the kernel to drop it from the page cache. The files live in a fresh
//! temporary directory, created new and removed afterwards: nothing there before is touched.

use super::{Access, Measurement, Operation, size_label};
use anyhow::Context;
use serde::Serialize;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WRITE_BYTES: usize = 1 << 20;

/// The chain's default output directory where it exists here, else the system's temporary
/// directory.
pub fn default_dir() -> PathBuf {
    let output_dir = swdaq_app::run_section::RunSection::default().output_dir;
    if output_dir.is_dir() {
        output_dir
    } else {
        std::env::temp_dir()
    }
}

/// Where the disk rows were measured.
#[derive(Serialize)]
pub struct Target {
    pub dir: PathBuf,
    /// The mount holding `dir`, from /proc/self/mounts (`None` where that cannot be read).
    pub mount: Option<Mount>,
    pub free_bytes: u64,
    pub file_bytes: u64,
    /// Why there are no disk rows, when there are none.
    pub skipped: Option<String>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct Mount {
    pub device: String,
    pub mount_point: PathBuf,
    pub filesystem: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.dir.display())?;
        if let Some(m) = &self.mount {
            let (fs, device, at) = (&m.filesystem, &m.device, m.mount_point.display());
            write!(f, " ({fs} on {device}, mounted at {at})")?;
        }
        let free = self.free_bytes >> 20;
        match &self.skipped {
            Some(why) => write!(f, ": skipped, {why}"),
            None => write!(
                f,
                ", {} file in 1 MiB writes, {free} MiB free",
                size_label(self.file_bytes as usize, " ")
            ),
        }
    }
}

/// Measures writing and reading back a file of `file_bytes` in a temporary directory under
/// `dir`; no rows, and the reason, where the file system has less than twice that free.
pub fn measure(dir: &Path, file_bytes: u64) -> anyhow::Result<(Target, Vec<Measurement>)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("disk directory {}", dir.display()))?;
    anyhow::ensure!(
        dir.is_dir(),
        "disk directory {}: not a directory",
        dir.display()
    );
    let mount = std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|mounts| mount_of(&mounts, &dir));
    let free_bytes =
        fs4::available_space(&dir).with_context(|| format!("free space of {}", dir.display()))?;
    let mut target = Target {
        dir,
        mount,
        free_bytes,
        file_bytes,
        skipped: None,
    };
    // Twice the file: the measurement never comes near filling the disk.
    if free_bytes / 2 < file_bytes {
        target.skipped = Some(format!(
            "{} MiB free, {} MiB needed (twice the test file)",
            free_bytes >> 20,
            (file_bytes >> 20) * 2
        ));
        return Ok((target, vec![]));
    }
    let scratch = tempfile::Builder::new()
        .prefix("swdaq-hwbench-")
        .tempdir_in(&target.dir)
        .with_context(|| format!("a temporary directory in {}", target.dir.display()))?;
    let rows = measure_in(scratch.path(), file_bytes)?;
    let scratch_path = scratch.path().to_path_buf();
    scratch
        .close()
        .with_context(|| format!("removing {}", scratch_path.display()))?;
    Ok((target, rows))
}

fn measure_in(scratch: &Path, file_bytes: u64) -> anyhow::Result<Vec<Measurement>> {
    let writes = file_bytes / WRITE_BYTES as u64;
    // Incompressible, so a compressing file system cannot shrink the work.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let block: Vec<u8> = (0..WRITE_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let row = |name, operation, elapsed| {
        Measurement::new(name, operation, Access::Sequential, 1, file_bytes, elapsed)
            .counted_in(WRITE_BYTES, "blocks/s")
    };

    let cached = scratch.join("write");
    let (file, elapsed) = write_file(&cached, &block, writes, false)?;
    // Flushed and gone before the next row, so its write-back does not slow that row.
    file.sync_data()
        .with_context(|| format!("fdatasync {}", cached.display()))?;
    drop(file);
    std::fs::remove_file(&cached).with_context(|| format!("removing {}", cached.display()))?;
    let mut rows = vec![row("disk_write", Operation::Write, elapsed)];

    let synced = scratch.join("write-fdatasync");
    let (file, elapsed) = write_file(&synced, &block, writes, true)?;
    rows.push(row("disk_write_fdatasync", Operation::Write, elapsed));
    drop_from_page_cache(&file, &synced)?;
    drop(file);
    let elapsed = read_file(&synced, WRITE_BYTES)?;
    rows.push(row("disk_read_back", Operation::Read, elapsed));
    std::fs::remove_file(&synced).with_context(|| format!("removing {}", synced.display()))?;
    Ok(rows)
}

/// Writes `block` `writes` times to a new file at `path`, then `fdatasync`s it if `sync`;
/// the file and the time from opening it to the last write (or the sync).
fn write_file(
    path: &Path,
    block: &[u8],
    writes: u64,
    sync: bool,
) -> anyhow::Result<(File, Duration)> {
    let start = Instant::now();
    let mut file = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    for _ in 0..writes {
        file.write_all(block)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if sync {
        file.sync_data()
            .with_context(|| format!("fdatasync {}", path.display()))?;
    }
    Ok((file, start.elapsed()))
}

/// Reads the whole file at `path` in reads of `read_bytes`; the time it took.
fn read_file(path: &Path, read_bytes: usize) -> anyhow::Result<Duration> {
    let mut buffer = vec![0u8; read_bytes];
    let start = Instant::now();
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    loop {
        let n = file
            .read(&mut buffer)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        std::hint::black_box(&buffer[..n]);
    }
    Ok(start.elapsed())
}

/// Asks the kernel to drop the (clean, synced) file's pages, so reading it back goes to the
/// device; a file system without a page cache of its own (tmpfs) keeps them.
fn drop_from_page_cache(file: &File, path: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor belongs to `file`, open for the whole call; the advice reads
    // and writes no memory of this process.
    let error = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    anyhow::ensure!(
        error == 0,
        "posix_fadvise DONTNEED {}: {}",
        path.display(),
        std::io::Error::from_raw_os_error(error)
    );
    Ok(())
}

/// The mount holding `path` (canonical) in a /proc/self/mounts text: the last listed of those
/// with the longest mount point that is an ancestor of `path`.
fn mount_of(mounts: &str, path: &Path) -> Option<Mount> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let device = fields.next()?;
            let mount_point = PathBuf::from(unescape_octal(fields.next()?));
            let filesystem = fields.next()?;
            path.starts_with(&mount_point).then(|| Mount {
                device: unescape_octal(device),
                mount_point,
                filesystem: filesystem.to_string(),
            })
        })
        .fold(None, |best: Option<Mount>, m| match best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => Some(b),
            _ => Some(m),
        })
}

/// Undoes the kernel's escaping of space, tab, newline and backslash in a mounts field
/// (`\040` for a space).
fn unescape_octal(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out += &rest[..i];
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/vdb /data\\040disk xfs rw 0 0
small /tmp tmpfs rw,size=8m 0 0
";

    fn mount(device: &str, at: &str, filesystem: &str) -> Option<Mount> {
        Some(Mount {
            device: device.into(),
            mount_point: at.into(),
            filesystem: filesystem.into(),
        })
    }

    #[test]
    fn a_path_is_on_its_deepest_mount_point_the_last_one_mounted() {
        let of = |path: &str| mount_of(MOUNTS, Path::new(path));
        assert_eq!(of("/home/x"), mount("/dev/vda", "/", "ext4"));
        assert_eq!(of("/tmpfoo"), mount("/dev/vda", "/", "ext4"));
        assert_eq!(of("/tmp/a/b"), mount("small", "/tmp", "tmpfs"));
        assert_eq!(of("/data disk/run"), mount("/dev/vdb", "/data disk", "xfs"));
        assert_eq!(mount_of("", Path::new("/")), None);
    }

    #[test]
    fn octal_escapes_are_undone_and_stray_backslashes_kept() {
        assert_eq!(unescape_octal("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_octal("/a\\b\\"), "/a\\b\\");
    }

    #[test]
    fn the_disk_rows_leave_the_directory_as_they_found_it() {
        let dir = tempfile::tempdir().unwrap();
        let (target, rows) = measure(dir.path(), 2 << 20).unwrap();
        assert_eq!(target.skipped, None);
        let names: Vec<&str> = rows.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["disk_write", "disk_write_fdatasync", "disk_read_back"]
        );
        assert!(rows.iter().all(|m| m.value.is_finite() && m.value > 0.0));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
