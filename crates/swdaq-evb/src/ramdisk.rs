//! Whether the RAM disk the builder units write to keeps files in large pages.
//!
//! A tmpfs mounted without `huge=within_size` (or `always`) stores every file in 4 KiB
//! pages: each page written is allocated, charged and put on a list, and freed again when
//! the filter farm deletes the file. At 100 kHz of 8 KiB events that kernel work was about
//! half of all the CPU on a 2-core machine; on a tmpfs mounted `huge=within_size` (Linux
//! 6.18 there kept those 0.8 MB files in folios of 8-256 KiB; a kernel without large tmpfs
//! folios uses 2 MiB pages only for files that large) the writers' and the farm's kernel
//! time roughly halved (BENCHMARKS.md, "RAM disk pages"). A run on a 4 KiB
//! RAM disk works, but is told so at start; `scripts/ramdisk.sh` mounts a large-page one.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`: where a file system is mounted, its type and its
/// file-system-specific options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fs_type: String,
    pub options: String,
}

impl Mount {
    /// A tmpfs that stores written files in 4 KiB pages: no `huge=always` or
    /// `huge=within_size` (`advise` applies only to mapped memory, not to `write`).
    pub fn small_page_tmpfs(&self) -> bool {
        self.fs_type == "tmpfs"
            && !self
                .options
                .split(',')
                .any(|o| o == "huge=always" || o == "huge=within_size")
    }
}

/// The mounts described by `mountinfo` (the text of `/proc/self/mountinfo`), in order; a line
/// that does not have the documented fields is skipped.
pub fn parse_mountinfo(mountinfo: &str) -> Vec<Mount> {
    mountinfo.lines().filter_map(parse_line).collect()
}

/// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS`
fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let point = before.split(' ').nth(4)?;
    let mut after = after.split(' ');
    let fs_type = after.next()?;
    let options = after.nth(1)?;
    Some(Mount {
        point: PathBuf::from(unescape(point)),
        fs_type: fs_type.to_owned(),
        options: options.to_owned(),
    })
}

/// Mount points escape space, tab, newline and backslash as three octal digits (`\040`).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The mount that holds `path` (absolute, its symbolic links resolved): the last-mounted of
/// those with the longest mount point that is a prefix of it.
pub fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)
}

/// A warning when `dir` (or, before it exists, its nearest existing parent) is on a tmpfs
/// that keeps files in 4 KiB pages; `None` when it is not, or when that cannot be told.
pub fn advice(dir: &Path) -> Option<String> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    let resolved = existing.canonicalize().ok()?;
    let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").ok()?);
    let mount = mount_of(&mounts, &resolved)?;
    (mount.small_page_tmpfs() && !shmem_forced_huge()).then(|| {
        format!(
            "warning: {} is on a tmpfs ({}) that keeps files in 4 KiB pages: writing and deleting \
             the files costs about twice the kernel CPU of a tmpfs mounted with huge=within_size \
             (scripts/ramdisk.sh mounts one)",
            dir.display(),
            mount.point.display()
        )
    })
}

/// The system-wide override that gives every tmpfs large pages.
fn shmem_forced_huge() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|s| s.contains("[force]"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "\
22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/a\n\
25 22 0:23 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size=24684092k\n\
31 25 0:30 / /dev/shm/big rw,relatime shared:9 - tmpfs tmpfs rw,size=16777216k,huge=within_size\n\
32 22 0:31 / /mnt/my\\040disk rw - tmpfs none rw,huge=advise\n\
not a mountinfo line\n";

    #[test]
    fn the_longest_mount_point_holds_a_path_and_huge_options_are_read() {
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(mounts.len(), 4);
        let of = |p: &str| mount_of(&mounts, Path::new(p)).unwrap();
        assert_eq!(of("/dev/shm/swdaq-evb").point, Path::new("/dev/shm"));
        assert!(of("/dev/shm/swdaq-evb").small_page_tmpfs());
        assert_eq!(of("/dev/shm/big/run1").point, Path::new("/dev/shm/big"));
        assert!(!of("/dev/shm/big/run1").small_page_tmpfs());
        // A path component is not a prefix of another: /dev/shmx is on /.
        assert_eq!(of("/dev/shmx").fs_type, "overlay");
        assert!(!of("/work").small_page_tmpfs());
        let spaced = of("/mnt/my disk/out");
        assert_eq!(spaced.point, Path::new("/mnt/my disk"));
        assert!(
            spaced.small_page_tmpfs(),
            "huge=advise does not cover write()"
        );
    }

    #[test]
    fn a_later_mount_on_the_same_point_hides_the_earlier() {
        let text = "1 0 0:1 / /r rw - tmpfs t rw\n2 1 0:2 / /r rw - tmpfs t rw,huge=always\n";
        let mounts = parse_mountinfo(text);
        assert!(
            !mount_of(&mounts, Path::new("/r/x"))
                .unwrap()
                .small_page_tmpfs()
        );
    }

    #[test]
    fn a_bad_escape_is_kept_as_written() {
        assert_eq!(unescape(r"a\040b\x\09"), r"a b\x\09");
    }

    proptest! {
        #[test]
        fn mountinfo_lines_read_back(
            point in "(/[a-z \\\\]{1,8}){1,3}",
            fs_type in "[a-z0-9]{1,8}",
            options in "[a-z=0-9,]{1,20}",
            optional in proptest::collection::vec("[a-z]{1,6}:[0-9]{1,3}", 0..3),
        ) {
            let escaped = point.replace('\\', "\\134").replace(' ', "\\040");
            let line = format!(
                "7 1 0:9 / {escaped} rw {} - {fs_type} src {options}",
                optional.join(" ")
            );
            let mounts = parse_mountinfo(&line);
            prop_assert_eq!(
                mounts,
                vec![Mount { point: PathBuf::from(point), fs_type, options }]
            );
        }

        #[test]
        fn any_text_parses_without_panic(text in any::<String>()) {
            let _ = parse_mountinfo(&text);
        }
    }
}
