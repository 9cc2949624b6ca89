//! Where files go, and one file's copy there: under a temporary name (`<name>.swdaq-part`),
//! renamed to its final name only once complete, then verified by the Adler-32 the
//! destination itself computes (a directory: the copy read back; XRootD: the server's own
//! `query checksum`, with the server configured for adler32). A copy already at the final
//! name with the right checksum is taken as it is (a transfer that ended before its record);
//! one with another checksum is a corrupted copy, replaced.

use crate::command;
use crate::stop::Stop;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use swdaq_format::file_checksum::RunningChecksums;

/// The suffix of a copy under way: never a data file's name.
pub const PART_SUFFIX: &str = ".swdaq-part";

/// A transfer destination, from `[run.transfer] destination`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A directory: a mounted EOS, NFS or other area.
    Directory(PathBuf),
    /// An XRootD server (`root://host:port//path`): `host:port` and the path under it.
    XRootD { server: String, root: String },
}

impl Destination {
    /// `root://HOST[:PORT]//PATH` (or `xroot://`): an XRootD server; an absolute path: a
    /// directory. Anything else is refused with what to give.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let url = text
            .strip_prefix("root://")
            .or_else(|| text.strip_prefix("xroot://"));
        if let Some(rest) = url {
            let (server, path) = rest.split_once('/').unwrap_or((rest, ""));
            let root = format!("/{}", path.trim_start_matches('/'));
            if server.is_empty() || server.contains('@') {
                return Err(format!(
                    "{text:?}: give root://HOST:PORT//PATH (no user name: the client's own authentication applies)"
                ));
            }
            return Ok(Destination::XRootD {
                server: server.to_string(),
                root: root.trim_end_matches('/').to_string(),
            });
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(format!(
                "{scheme}:// is not a transfer destination: give root://HOST:PORT//PATH or an absolute directory"
            ));
        }
        let dir = PathBuf::from(text);
        if !dir.is_absolute() {
            return Err(format!(
                "{text:?}: give an absolute directory (a mounted EOS or NFS area) or root://HOST:PORT//PATH"
            ));
        }
        Ok(Destination::Directory(dir))
    }

    /// As the registry records it (and messages name it).
    pub fn describe(&self) -> String {
        match self {
            Destination::Directory(dir) => dir.display().to_string(),
            Destination::XRootD { server, root } => format!("root://{server}/{root}"),
        }
    }

    /// Where `relative` goes.
    pub fn target(&self, relative: &str) -> String {
        match self {
            Destination::Directory(dir) => dir.join(relative).display().to_string(),
            Destination::XRootD { root, .. } => format!("{root}/{relative}"),
        }
    }
}

/// What one file's put found at the destination besides its verified copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Put {
    pub adler32: u32,
    /// Bytes copied (0: the copy was there already).
    pub copied_bytes: u64,
    /// A copy at the final name had another checksum (this Adler-32): it was replaced.
    pub replaced_corrupt: Option<u32>,
    /// The copy at the final name was an older version of a file its writer rewrote (its
    /// checksum the one verified before): it was replaced, and is not corrupt.
    pub replaced_superseded: bool,
}

/// How long each step may take, and what a stop interrupts.
pub struct Limits<'a> {
    pub copy: Duration,
    pub query: Duration,
    pub stop: &'a Stop,
}

/// Copies `local` to `relative` under `destination`, verifies it there and returns the
/// destination's Adler-32, which is `expected`, or why not. A copy there with the checksum
/// `superseded` (an older version's, verified before the file was rewritten) is replaced.
pub fn put(
    destination: &Destination,
    local: &Path,
    relative: &str,
    expected: u32,
    superseded: Option<u32>,
    limits: &Limits,
) -> Result<Put, String> {
    let target = destination.target(relative);
    let part = format!("{target}{PART_SUFFIX}");
    let mut put = Put::default();
    match checksum(destination, &target, limits)? {
        Some(found) if found == expected => {
            put.adler32 = found;
            return Ok(put);
        }
        Some(found) if Some(found) == superseded => put.replaced_superseded = true,
        Some(found) => put.replaced_corrupt = Some(found),
        None => {}
    }
    if !local.is_file() {
        return Err(format!("{}: no such file here to copy", local.display()));
    }
    put.copied_bytes = match destination {
        Destination::Directory(_) => copy_to_directory(local, Path::new(&part), limits)?,
        Destination::XRootD { server, .. } => {
            xrdcp(server, local, &part, expected, limits)?;
            std::fs::metadata(local).map_or(0, |m| m.len())
        }
    };
    rename(
        destination,
        &part,
        &target,
        put.replaced_corrupt.is_some() || put.replaced_superseded,
        limits,
    )?;
    match checksum(destination, &target, limits)? {
        Some(found) if found == expected => {
            put.adler32 = found;
            Ok(put)
        }
        Some(found) => Err(format!(
            "{target}: the copy's Adler-32 at the destination is {found:08x}, the file's {expected:08x}: copied again"
        )),
        None => Err(format!(
            "{target}: gone from the destination after its rename"
        )),
    }
}

/// The destination's Adler-32 of `target`; `None`: no such file there.
pub fn checksum(
    destination: &Destination,
    target: &str,
    limits: &Limits,
) -> Result<Option<u32>, String> {
    match destination {
        Destination::Directory(_) => read_adler32(Path::new(target), limits),
        Destination::XRootD { server, .. } => {
            let done = command::run(
                xrd_command(
                    "xrdfs",
                    limits.query,
                    &[server, "query", "checksum", target],
                ),
                limits.query,
                limits.stop,
            )?;
            if done.success {
                // "adler32 0a1b2c3d"
                let mut words = done.stdout.split_whitespace();
                return match (words.next(), words.next()) {
                    (Some(kind), Some(hex)) if kind.eq_ignore_ascii_case("adler32") => {
                        u32::from_str_radix(hex, 16).map(Some).map_err(|_| {
                            format!(
                                "xrdfs query checksum {target}: not a checksum: {}",
                                done.stdout.trim()
                            )
                        })
                    }
                    _ => Err(format!(
                        "xrdfs query checksum {target}: {:?} is not an adler32 checksum: configure the server with `xrootd.chksum adler32`",
                        done.stdout.trim()
                    )),
                };
            }
            let said = format!("{} {}", done.stdout.trim(), done.stderr.trim());
            if said.contains("[3011]") || said.contains("No such file") {
                return Ok(None);
            }
            Err(format!(
                "xrdfs {server} query checksum {target}: {}",
                said.trim()
            ))
        }
    }
}

/// The Adler-32 of the file at `path` as it is on disk now, read back (`None`: no such file).
fn read_adler32(path: &Path, limits: &Limits) -> Result<Option<u32>, String> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: cannot read it back: {e}", path.display())),
    };
    let mut sums = RunningChecksums::default();
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    loop {
        stopped_or_late(limits, started, limits.query, path)?;
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("{}: cannot read it back: {e}", path.display()))?;
        if n == 0 {
            return Ok(Some(sums.finish().adler32));
        }
        sums.update(&buf[..n]);
    }
}

fn stopped_or_late(
    limits: &Limits,
    started: Instant,
    limit: Duration,
    path: &Path,
) -> Result<(), String> {
    if limits.stop.requested() {
        return Err(format!("{}: stopped", path.display()));
    }
    if started.elapsed() > limit {
        return Err(format!(
            "{}: not done within {:.0} s",
            path.display(),
            limit.as_secs_f64()
        ));
    }
    Ok(())
}

/// Copies `local` to `part` (its directory made), a megabyte at a time with the stop and
/// time limit looked at between, and syncs it; a copy left unfinished is removed.
fn copy_to_directory(local: &Path, part: &Path, limits: &Limits) -> Result<u64, String> {
    if let Some(dir) = part.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    let copied = (|| {
        let mut from = std::fs::File::open(local)
            .map_err(|e| format!("{}: cannot open it: {e}", local.display()))?;
        let mut to = std::fs::File::create(part)
            .map_err(|e| format!("{}: cannot make it: {e}", part.display()))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut bytes = 0u64;
        let started = Instant::now();
        loop {
            stopped_or_late(limits, started, limits.copy, part)?;
            let n = from
                .read(&mut buf)
                .map_err(|e| format!("{}: cannot read it: {e}", local.display()))?;
            if n == 0 {
                break;
            }
            to.write_all(&buf[..n])
                .map_err(|e| format!("{}: cannot write it: {e}", part.display()))?;
            bytes += n as u64;
        }
        to.sync_all()
            .map_err(|e| format!("{}: cannot sync it: {e}", part.display()))?;
        Ok(bytes)
    })();
    if copied.is_err() {
        // Only the copy under way, never a file under a final name.
        let _ = std::fs::remove_file(part);
    }
    copied
}

/// `xrdcp` of `local` to `part` on `server`, the destination's checksum compared by xrdcp
/// itself with `expected` (end to end), parent directories made, an old part replaced.
fn xrdcp(
    server: &str,
    local: &Path,
    part: &str,
    expected: u32,
    limits: &Limits,
) -> Result<(), String> {
    let url = format!("root://{server}/{part}");
    let cksum = format!("adler32:{expected:08x}");
    let local_text = local.display().to_string();
    let done = command::run(
        xrd_command(
            "xrdcp",
            limits.copy,
            &[
                "--force",
                "--path",
                "--nopbar",
                "--cksum",
                &cksum,
                &local_text,
                &url,
            ],
        ),
        limits.copy,
        limits.stop,
    )?;
    if done.success {
        return Ok(());
    }
    Err(format!(
        "xrdcp {} {url}: {}",
        local.display(),
        one_line(&format!("{} {}", done.stdout.trim(), done.stderr.trim()))
    ))
}

/// The copy under way renamed to its final name; `replace`: a corrupted or superseded copy is
/// there, removed first (a destination's rename may refuse to replace).
fn rename(
    destination: &Destination,
    part: &str,
    target: &str,
    replace: bool,
    limits: &Limits,
) -> Result<(), String> {
    match destination {
        Destination::Directory(_) => {
            std::fs::rename(part, target).map_err(|e| format!("rename {part} to {target}: {e}"))?;
            // The rename made durable: the directory synced (best effort: some file
            // systems do not sync directories).
            if let Some(dir) = Path::new(target).parent()
                && let Ok(d) = std::fs::File::open(dir)
            {
                let _ = d.sync_all();
            }
            Ok(())
        }
        Destination::XRootD { server, .. } => {
            if replace {
                xrdfs(server, &["rm", target], limits)?;
            }
            xrdfs(server, &["mv", part, target], limits)
        }
    }
}

fn xrdfs(server: &str, args: &[&str], limits: &Limits) -> Result<(), String> {
    let mut all = vec![server];
    all.extend_from_slice(args);
    let done = command::run(
        xrd_command("xrdfs", limits.query, &all),
        limits.query,
        limits.stop,
    )?;
    if done.success {
        return Ok(());
    }
    Err(format!(
        "xrdfs {}: {}",
        all.join(" "),
        one_line(&format!("{} {}", done.stdout.trim(), done.stderr.trim()))
    ))
}

/// An XRootD client program whose own waits (connecting, each request) end within `limit`:
/// its defaults would retry a connection for minutes.
fn xrd_command(program: &str, limit: Duration, args: &[&str]) -> Command {
    let seconds = limit.as_secs().max(1).to_string();
    let mut c = Command::new(program);
    c.args(args)
        .env("XRD_CONNECTIONWINDOW", &seconds)
        .env("XRD_CONNECTIONRETRY", "1")
        .env("XRD_REQUESTTIMEOUT", &seconds)
        .env("XRD_STREAMTIMEOUT", &seconds);
    c
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_or_are_refused_with_what_to_give() {
        assert_eq!(
            Destination::parse("root://eos.example:1094//eos/swdaq/raw/").unwrap(),
            Destination::XRootD {
                server: "eos.example:1094".into(),
                root: "/eos/swdaq/raw".into()
            }
        );
        let d = Destination::parse("root://127.0.0.1:2000//data").unwrap();
        assert_eq!(d.describe(), "root://127.0.0.1:2000//data");
        assert_eq!(d.target("run000001/a.raw"), "/data/run000001/a.raw");
        assert_eq!(
            Destination::parse("/mnt/eos").unwrap(),
            Destination::Directory("/mnt/eos".into())
        );
        for bad in ["relative/dir", "https://x/y", "root://", "root://u@h//x"] {
            assert!(Destination::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_directory_copy_is_verified_and_a_corrupted_one_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("a.raw");
        std::fs::write(&local, b"Wikipedia").unwrap();
        let dest = Destination::Directory(dir.path().join("dest"));
        let stop = Stop::default();
        let limits = Limits {
            copy: Duration::from_secs(10),
            query: Duration::from_secs(10),
            stop: &stop,
        };
        let put1 = put(&dest, &local, "r/a.raw", 0x11E6_0398, None, &limits).unwrap();
        assert_eq!((put1.adler32, put1.copied_bytes), (0x11E6_0398, 9));
        let copy = dir.path().join("dest/r/a.raw");
        assert_eq!(std::fs::read(&copy).unwrap(), b"Wikipedia");
        assert!(!dir.path().join("dest/r/a.raw.swdaq-part").exists());
        let again = put(&dest, &local, "r/a.raw", 0x11E6_0398, None, &limits).unwrap();
        assert_eq!(again.copied_bytes, 0, "a verified copy is not copied again");
        std::fs::write(&copy, b"Wikipedib").unwrap();
        let fixed = put(&dest, &local, "r/a.raw", 0x11E6_0398, None, &limits).unwrap();
        assert!(fixed.replaced_corrupt.is_some() && fixed.copied_bytes == 9);
        assert_eq!(std::fs::read(&copy).unwrap(), b"Wikipedia");
        let e = put(&dest, &local, "r/b.raw", 0x1234_5678, None, &limits).unwrap_err();
        assert!(e.contains("Adler-32 at the destination is 11e60398"), "{e}");
        // Rewritten by its writer: the older version's copy is replaced, not corrupt.
        std::fs::write(&local, b"Wikipedias").unwrap();
        let mut sums = RunningChecksums::default();
        sums.update(b"Wikipedias");
        let newer = sums.finish().adler32;
        let rewritten = put(&dest, &local, "r/a.raw", newer, Some(0x11E6_0398), &limits).unwrap();
        assert!(rewritten.replaced_superseded && rewritten.replaced_corrupt.is_none());
        assert_eq!(std::fs::read(&copy).unwrap(), b"Wikipedias");
    }
}
