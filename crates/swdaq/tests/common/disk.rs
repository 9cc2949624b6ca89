//! A file system of the test's own for the fault drills: a small tmpfs that fills up, or one
//! made read-only. Mounting needs CAP_SYS_ADMIN (root on the CI machine); without it the drill
//! is skipped with a message saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` mounted on a temporary directory; unmounted when dropped.
pub struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    /// `size` as `mount -o size=` takes it (`8m`); `None`, with a message, where the test
    /// may not mount.
    pub fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .stderr(std::process::Stdio::null())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
            return None;
        }
        Some(Self { _dir: dir, mount })
    }

    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Makes the whole file system read-only (as a full or failed disk remounted by the
    /// kernel would be).
    pub fn make_read_only(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.mount)
            .status()
            .unwrap();
        assert!(status.success(), "remount read-only");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

pub type Snapshot = std::collections::BTreeMap<PathBuf, Vec<u8>>;

/// Every file below `dir` with its bytes: what a later run must leave exactly as it was. A
/// file renamed or removed while it is walked is left out.
pub fn snapshot(dir: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for path in entries.filter_map(|e| Some(e.ok()?.path())) {
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.insert(path, bytes);
            }
        }
    }
    out
}

/// [`snapshot`] once nothing below `dir` has changed for half a second (applications of a
/// killed launcher still closing their files), within 30 s.
pub fn settled_snapshot(dir: &Path) -> Snapshot {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = snapshot(dir);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = snapshot(dir);
        if now == last || std::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}
