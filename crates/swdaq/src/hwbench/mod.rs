//! `swdaq hwbench`: what this hardware can do (the COMPASS lesson: measure the machine before
//! blaming the software). As COMPASS assessed its readout servers, each part is measured on its
//! own: memory read and write, sequential and random, by block size, on one core and on every
//! core (`memory`); CRC32C and frame unpacking on one core (`cpu`); the disk under the output
//! directory (`disk`). Memory and CPU figures are the median of several timed repetitions in
//! this one run; the disk's are one pass each.

mod cpu;
mod disk;
mod memory;

pub use memory::memcpy;

use crate::table;
use anyhow::Context;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Size of the memory buffer in MiB, shared out between the threads [default: twice the
    /// last-level cache, at least 256; 16 with --quick].
    #[arg(long)]
    buffer_mib: Option<usize>,
    /// Timed repetitions per memory and CPU measurement; the median is reported [default: 5;
    /// 1 with --quick].
    #[arg(long)]
    repeats: Option<usize>,
    /// Directory whose disk is measured (in a temporary subdirectory, removed afterwards)
    /// [default: the chain's output directory `swdaq-data` if it exists here, else the
    /// system's temporary directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Size of the disk test file in MiB [default: 256; 8 with --quick].
    #[arg(long)]
    disk_mib: Option<u64>,
    /// Leave the disk out.
    #[arg(long, conflicts_with_all = ["dir", "disk_mib"])]
    no_disk: bool,
    /// Small buffers and files, one repetition: a few seconds, for tests; the figures are not
    /// worth quoting.
    #[arg(long)]
    quick: bool,
}

/// What one run measures, the command-line defaults resolved.
struct Settings {
    buffer_bytes: usize,
    repeats: usize,
    /// The directory and the test file's size; `None` with `--no-disk`.
    disk: Option<(PathBuf, u64)>,
}

impl Settings {
    fn from_args(args: &Args, cores: usize) -> anyhow::Result<Self> {
        let buffer_mib = match (args.buffer_mib, args.quick) {
            (Some(mib), _) => mib,
            (None, true) => 16.max(cores),
            (None, false) => memory::default_buffer_mib(),
        };
        // Every thread needs a slice of at least one of the largest blocks.
        anyhow::ensure!(
            buffer_mib << 20 >= cores * memory::LARGEST_BLOCK,
            "--buffer-mib must be at least {cores} (one 1 MiB block per core)"
        );
        let repeats = args.repeats.unwrap_or(if args.quick { 1 } else { 5 });
        anyhow::ensure!(repeats >= 1, "--repeats must be at least 1");
        let disk = if args.no_disk {
            None
        } else {
            let mib = args.disk_mib.unwrap_or(if args.quick { 8 } else { 256 });
            anyhow::ensure!(mib >= 1, "--disk-mib must be at least 1");
            let bytes = mib
                .checked_mul(1 << 20)
                .context("--disk-mib is larger than any disk")?;
            Some((args.dir.clone().unwrap_or_else(disk::default_dir), bytes))
        };
        Ok(Self {
            buffer_bytes: buffer_mib << 20,
            repeats,
            disk,
        })
    }
}

#[derive(Serialize)]
pub struct Report {
    pub cpu_model: String,
    pub logical_cores: usize,
    pub simd: Vec<&'static str>,
    /// The largest cache level's size as the kernel reports it (a virtual machine may report
    /// its host's).
    pub last_level_cache_bytes: Option<u64>,
    /// The memory rows' buffer, shared out between the threads.
    pub buffer_bytes: usize,
    pub repeats: usize,
    /// Where the disk rows were measured, or why they are missing; `None` with `--no-disk`.
    pub disk: Option<disk::Target>,
    pub results: Vec<Measurement>,
}

#[derive(Serialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Read,
    Write,
    Copy,
    Checksum,
    Unpack,
}

impl Operation {
    /// As the JSON spells it.
    fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Copy => "copy",
            Self::Checksum => "checksum",
            Self::Unpack => "unpack",
        }
    }
}

#[derive(Serialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Sequential,
    Random,
}

impl Access {
    /// As the JSON spells it.
    fn as_str(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Random => "random",
        }
    }
}

#[derive(Serialize)]
pub struct Measurement {
    pub name: String,
    pub operation: Operation,
    pub access: Access,
    /// Bytes per read, write or call; `None` where the work is not done in blocks.
    pub block_bytes: Option<usize>,
    pub threads: usize,
    /// Bytes processed per second (for copies: bytes copied) in `unit`.
    pub value: f64,
    pub unit: &'static str,
    /// `value` in GB/s (1 GB = 1e9 B), under the name older consumers read.
    pub gbps: f64,
    /// Blocks or frames per second where they are meaningful, else `None`.
    pub items_per_second: Option<f64>,
    /// What `items_per_second` counts.
    pub items_unit: Option<&'static str>,
}

impl Measurement {
    /// `bytes` processed in `elapsed`.
    fn new(
        name: impl Into<String>,
        operation: Operation,
        access: Access,
        threads: usize,
        bytes: u64,
        elapsed: Duration,
    ) -> Self {
        let gbps = bytes as f64 / elapsed.as_secs_f64() / 1e9;
        Self {
            name: name.into(),
            operation,
            access,
            block_bytes: None,
            threads,
            value: gbps,
            unit: "GB/s",
            gbps,
            items_per_second: None,
            items_unit: None,
        }
    }

    /// The same work counted in items of `item_bytes` each (blocks, frames), per second as
    /// `unit` says.
    fn counted_in(mut self, item_bytes: usize, unit: &'static str) -> Self {
        self.block_bytes = Some(item_bytes);
        self.items_per_second = Some(self.gbps * 1e9 / item_bytes as f64);
        self.items_unit = Some(unit);
        self
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let settings = Settings::from_args(args, cores)?;
    let report = measure_all(&settings, cores)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

fn measure_all(settings: &Settings, cores: usize) -> anyhow::Result<Report> {
    let (buffer_bytes, repeats) = (settings.buffer_bytes, settings.repeats);
    let mut results = vec![memcpy(buffer_bytes, repeats)];
    results.extend(memory::all_rows(buffer_bytes, repeats, cores));
    results.extend(cpu::all_rows(repeats));
    let disk = match &settings.disk {
        Some((dir, file_bytes)) => {
            let (target, rows) = disk::measure(dir, *file_bytes)?;
            results.extend(rows);
            Some(target)
        }
        None => None,
    };
    Ok(Report {
        cpu_model: cpu::model(),
        logical_cores: cores,
        simd: cpu::simd_level(),
        last_level_cache_bytes: memory::last_level_cache_bytes(),
        buffer_bytes,
        repeats,
        disk,
        results,
    })
}

fn render(r: &Report) -> String {
    let cache = r
        .last_level_cache_bytes
        .map_or("unknown".into(), |b| size_label(b as usize, " "));
    let mut out = format!(
        "CPU: {}\nlogical cores: {}\nSIMD: {}\nlast-level cache: {cache}\n\
         memory buffer: {}, median of {} timed repetition{}\n",
        r.cpu_model,
        r.logical_cores,
        r.simd.join(" "),
        size_label(r.buffer_bytes, " "),
        r.repeats,
        if r.repeats == 1 { "" } else { "s" },
    );
    if let Some(disk) = &r.disk {
        out += &format!("disk: {disk}\n");
    }
    out += "\n";
    let rows: Vec<Vec<String>> = r
        .results
        .iter()
        .map(|m| {
            vec![
                m.name.clone(),
                m.access.as_str().into(),
                m.block_bytes.map_or("-".into(), |b| size_label(b, " ")),
                m.threads.to_string(),
                format!("{:.3}", m.value),
                m.items_per_second
                    .zip(m.items_unit)
                    .map_or("-".into(), |(v, unit)| format!("{v:.3e} {unit}")),
            ]
        })
        .collect();
    out += &table::render(
        &["measurement", "access", "block", "threads", "GB/s", "rate"],
        &rows,
    );
    out
}

/// `bytes` as "1 KiB", "4 MiB" or "7200 B", the number and unit joined by `separator`.
fn size_label(bytes: usize, separator: &str) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}{separator}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}{separator}KiB", b >> 10),
        b => format!("{b}{separator}B"),
    }
}

/// Runs `work` `repeats` times and returns the median duration of one run.
fn median_time(repeats: usize, mut work: impl FnMut()) -> Duration {
    work(); // warm caches, fault in pages
    let mut times: Vec<Duration> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            work();
            t.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[times.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_labelled_in_their_largest_whole_unit() {
        assert_eq!(size_label(1 << 10, ""), "1KiB");
        assert_eq!(size_label(64 << 10, " "), "64 KiB");
        assert_eq!(size_label(1 << 20, ""), "1MiB");
        assert_eq!(size_label(1536 << 10, ""), "1536KiB");
        assert_eq!(size_label(7200, " "), "7200 B");
    }

    #[test]
    fn quick_settings_fit_every_core_and_measure_the_given_directory() {
        let args = Args {
            json: true,
            buffer_mib: None,
            repeats: None,
            dir: Some("/somewhere".into()),
            disk_mib: None,
            no_disk: false,
            quick: true,
        };
        let s = Settings::from_args(&args, 64).unwrap();
        assert_eq!((s.buffer_bytes, s.repeats), (64 << 20, 1));
        assert_eq!(s.disk, Some(("/somewhere".into(), 8 << 20)));
        let too_small = Args {
            buffer_mib: Some(1),
            ..args
        };
        let e = Settings::from_args(&too_small, 2).err().unwrap();
        assert!(e.to_string().contains("--buffer-mib"), "{e}");
    }

    #[test]
    fn rows_render_with_their_units() {
        let row = Measurement::new(
            "memory_read_random_1KiB",
            Operation::Read,
            Access::Random,
            2,
            2_000_000_000,
            Duration::from_secs(1),
        )
        .counted_in(1 << 10, "blocks/s");
        assert_eq!(row.value, 2.0);
        assert_eq!(row.items_per_second, Some(2e9 / 1024.0));
        let report = Report {
            cpu_model: "test".into(),
            logical_cores: 2,
            simd: vec![],
            last_level_cache_bytes: None,
            buffer_bytes: 16 << 20,
            repeats: 1,
            disk: None,
            results: vec![row],
        };
        let text = render(&report);
        assert!(
            text.contains("memory_read_random_1KiB  random  1 KiB"),
            "{text}"
        );
        assert!(text.contains("1.953e6 blocks/s"), "{text}");
    }
}
