//! Opening a file swdaq reads as input (link, FED and card files, files to inspect): regular
//! files only. A FIFO would block the open until a writer comes and, read, could be neither
//! sized nor read twice (format detection would consume its head); a device could be endless.
//! The open itself never waits (`O_NONBLOCK`, which does nothing to a regular file's reads).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
}
