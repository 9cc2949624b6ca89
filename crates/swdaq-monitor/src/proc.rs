//! Process health from `/proc`: per-thread CPU time and last core, resident memory.
//!
//! Read by the statistics thread only. Anything missing or malformed (another OS, a thread
//! that exited between listing and reading) is skipped, never an error.

use std::fs;

/// Ticks per second of `utime`/`stime` in `/proc/*/stat`. The kernel reports these in
/// USER_HZ, which is 100 on every architecture swdaq targets (x86-64, AArch64, RISC-V,
/// POWER); a constant avoids a libc `sysconf` call and the `unsafe` it needs.
pub const USER_HZ: f64 = 100.0;

/// One line of `/proc/self/task/<tid>/stat`, the fields swdaq uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStat {
    pub tid: u32,
    /// `comm`: at most 15 bytes, may contain spaces and parentheses.
    pub name: String,
    /// utime + stime, in USER_HZ ticks.
    pub cpu_ticks: u64,
    /// Core the thread last ran on (field 39, `processor`).
    pub last_cpu: u32,
}

/// Parses a stat line. `comm` sits between the first '(' and the *last* ')', since the name
/// itself may contain ") ".
pub fn parse_stat(line: &str) -> Option<ThreadStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    if close < open {
        return None;
    }
    let tid = line[..open].trim().parse().ok()?;
    let name = line[open + 1..close].to_owned();
    // Fields after comm start at field 3 (state); field k is at index k - 3.
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    let field = |k: usize| -> Option<u64> { rest.get(k - 3)?.parse().ok() };
    Some(ThreadStat {
        tid,
        name,
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        last_cpu: u32::try_from(field(39)?).ok()?,
    })
}

/// All threads of this process, in tid order.
pub fn read_threads() -> Vec<ThreadStat> {
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut threads: Vec<ThreadStat> = dir
        .filter_map(|e| {
            let path = e.ok()?.path().join("stat");
            parse_stat(&fs::read_to_string(path).ok()?)
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    threads
}

/// `VmRSS` from `/proc/self/status`, in bytes (it is reported in kB, so no page size needed).
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let kb: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => kb.checked_mul(1024),
        Some(_) => None,
    }
}

pub fn resident_memory_bytes() -> Option<u64> {
    parse_vm_rss(&fs::read_to_string("/proc/self/status").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(comm: &str) -> String {
        // 52 fields as in Linux 6.x; utime=7, stime=5, processor=3.
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_owned()).collect();
        f[0] = "S".into();
        f[14 - 3] = "7".into();
        f[15 - 3] = "5".into();
        f[39 - 3] = "3".into();
        format!("4242 ({comm}) {}", f.join(" "))
    }

    #[test]
    fn names_with_spaces_and_parens() {
        for comm in ["readout", "a b", "x) (y", ")(", "((", ""] {
            let t = parse_stat(&line(comm)).expect(comm);
            assert_eq!(t.tid, 4242);
            assert_eq!(t.name, comm);
            assert_eq!(t.cpu_ticks, 12);
            assert_eq!(t.last_cpu, 3);
        }
    }

    #[test]
    fn garbage_is_none() {
        for bad in [
            "",
            "1 (x",
            "x (y) S 1",
            ")(",
            "1 (a) S 1 2 3",
            "99999999999 (a) S",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn vm_rss() {
        assert_eq!(
            parse_vm_rss("Name:\tx\nVmRSS:\t  1234 kB\nThreads: 3\n"),
            Some(1234 * 1024)
        );
        assert_eq!(parse_vm_rss("VmRSS: lots kB"), None);
        assert_eq!(parse_vm_rss("Name: x"), None);
    }

    #[test]
    fn reads_own_process() {
        if !std::path::Path::new("/proc/self/task").exists() {
            return;
        }
        let threads = read_threads();
        let me = std::thread::current().id();
        assert!(!threads.is_empty(), "{me:?}");
        assert!(resident_memory_bytes().is_some_and(|b| b > 0));
    }
}
