//! `swdaq hwbench`: what this hardware can do, per core (the COMPASS lesson: measure the
//! machine before blaming the software). Every figure is the median of several timed
//! repetitions in this one run.

use crate::table;
use serde::Serialize;
use std::hint::black_box;
use std::time::{Duration, Instant};
use swdaq_format::{crc, protowib, wibeth};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Size of the memory-bandwidth buffers in MiB (well above the last-level cache).
    #[arg(long, default_value_t = 256)]
    buffer_mib: usize,
    /// Timed repetitions per measurement; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
}

#[derive(Serialize)]
pub struct Report {
    pub cpu_model: String,
    pub logical_cores: usize,
    pub simd: Vec<&'static str>,
    pub results: Vec<Measurement>,
}

#[derive(Serialize)]
pub struct Measurement {
    pub name: &'static str,
    /// Bytes processed per second (for copies: bytes copied), 1 GB = 1e9 B.
    pub gbps: f64,
    /// Items per second where an item is meaningful (frames), else null.
    pub items_per_second: Option<f64>,
    pub threads: usize,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.buffer_mib >= 1, "--buffer-mib must be at least 1");
    anyhow::ensure!(args.repeats >= 1, "--repeats must be at least 1");
    let report = measure_all(args.buffer_mib << 20, args.repeats);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

pub fn measure_all(buffer_bytes: usize, repeats: usize) -> Report {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut results = vec![
        memory_read(buffer_bytes, repeats, 1),
        memcpy(buffer_bytes, repeats),
    ];
    if cores > 1 {
        results.push(memory_read(buffer_bytes, repeats, cores));
    }
    results.extend([
        crc32c(repeats),
        wibeth_unpack(repeats),
        protowib_unpack(repeats),
    ]);
    Report {
        cpu_model: cpu_model(),
        logical_cores: cores,
        simd: simd_level(),
        results,
    }
}

fn render(r: &Report) -> String {
    let mut out = format!(
        "CPU: {}\nlogical cores: {}\nSIMD: {}\n\n",
        r.cpu_model,
        r.logical_cores,
        r.simd.join(" ")
    );
    let rows: Vec<Vec<String>> = r
        .results
        .iter()
        .map(|m| {
            vec![
                m.name.to_string(),
                m.threads.to_string(),
                format!("{:.2}", m.gbps),
                m.items_per_second
                    .map_or("-".into(), |v| format!("{:.3e}", v)),
            ]
        })
        .collect();
    out += &table::render(&["measurement", "threads", "GB/s", "items/s"], &rows);
    out
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

fn rate(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Sums 64-bit words across a buffer larger than the caches: the read bandwidth one core
/// (or `threads` cores, each on its own slice) can draw from memory.
pub fn memory_read(bytes: usize, repeats: usize, threads: usize) -> Measurement {
    let words = vec![1u64; bytes / 8];
    let chunk = words.len().div_ceil(threads);
    let t = median_time(repeats, || {
        std::thread::scope(|s| {
            for part in words.chunks(chunk) {
                s.spawn(move || black_box(part.iter().fold(0u64, |a, &w| a.wrapping_add(w))));
            }
        });
    });
    Measurement {
        name: "memory_read",
        gbps: rate(bytes, t),
        items_per_second: None,
        threads,
    }
}

/// Copies one large buffer into another on one core (`memcpy` bandwidth).
pub fn memcpy(bytes: usize, repeats: usize) -> Measurement {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    let t = median_time(repeats, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    Measurement {
        name: "memcpy",
        gbps: rate(bytes, t),
        items_per_second: None,
        threads: 1,
    }
}

/// CRC32C over 1 MiB blocks (cache-resident, so this is the CRC engine's speed).
fn crc32c(repeats: usize) -> Measurement {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 31 % 251) as u8).collect();
    let passes = 256;
    let t = median_time(repeats, || {
        for _ in 0..passes {
            black_box(crc::crc32c(black_box(&block)));
        }
    });
    Measurement {
        name: "crc32c",
        gbps: rate(block.len() * passes, t),
        items_per_second: None,
        threads: 1,
    }
}

/// Scalar reference unpacking of WIBEth frames (the hit finder fuses a faster one).
fn wibeth_unpack(repeats: usize) -> Measurement {
    let frames = 4096;
    let mut data = vec![0u8; frames * wibeth::FRAME_SIZE];
    let adcs = [[0x1234u16; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
    for f in data.chunks_exact_mut(wibeth::FRAME_SIZE) {
        wibeth::encode(&Default::default(), &Default::default(), &adcs, f);
    }
    let mut out = Box::new(adcs);
    let t = median_time(repeats, || {
        for f in data.chunks_exact(wibeth::FRAME_SIZE) {
            wibeth::WibEthFrame::parse(f)
                .expect("encoded frame")
                .unpack(&mut out);
            black_box(&mut out);
        }
    });
    Measurement {
        name: "wibeth_unpack_scalar",
        gbps: rate(data.len(), t),
        items_per_second: Some(frames as f64 / t.as_secs_f64()),
        threads: 1,
    }
}

fn protowib_unpack(repeats: usize) -> Measurement {
    let frames = 65536;
    let mut data = vec![0u8; frames * protowib::FRAME_SIZE];
    for f in data.chunks_exact_mut(protowib::FRAME_SIZE) {
        protowib::encode(&Default::default(), &[0xabc; protowib::NUM_CHANNELS], f);
    }
    let mut out = [0u16; protowib::NUM_CHANNELS];
    let t = median_time(repeats, || {
        for f in data.chunks_exact(protowib::FRAME_SIZE) {
            protowib::ProtoWibFrame::parse(f)
                .expect("encoded frame")
                .unpack(&mut out);
            black_box(&mut out);
        }
    });
    Measurement {
        name: "protowib_unpack_scalar",
        gbps: rate(data.len(), t),
        items_per_second: Some(frames as f64 / t.as_secs_f64()),
        threads: 1,
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn simd_level() -> Vec<&'static str> {
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$( if std::arch::is_x86_feature_detected!($f) { found.push($f); } )*};
        }
        probe!(
            "sse4.2",
            "avx",
            "avx2",
            "bmi2",
            "pclmulqdq",
            "avx512f",
            "avx512bw"
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_every_measurement_with_positive_rates() {
        let r = measure_all(1 << 20, 1);
        let names: Vec<_> = r.results.iter().map(|m| m.name).collect();
        for n in [
            "memory_read",
            "memcpy",
            "crc32c",
            "wibeth_unpack_scalar",
            "protowib_unpack_scalar",
        ] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert!(r.results.iter().all(|m| m.gbps.is_finite() && m.gbps > 0.0));
        assert!(render(&r).contains("crc32c"));
    }
}
