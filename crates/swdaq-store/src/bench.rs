//! Storage benchmark (library side of `swdaq bench store`): HDF5 record writing, without and
//! with crash safety (flushes while a file is open, [`crate::durable`]), and crash-safe with
//! each flush synced to the device, against plain `write(2)` of the same bytes, in the same
//! run, to the same directory.

use crate::error::{Result, StoreError};
use crate::writer::{RecordFileWriter, StoreConfig};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::time::Instant;
use swdaq_format::{
    Fragment, FragmentHeader, FragmentType, SourceId, Subsystem, TriggerRecord, TriggerRecordHeader,
};

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub records: u64,
    pub fragments_per_record: usize,
    pub fragment_bytes: usize,
    /// Files made readable only when closed.
    pub hdf5_gbps: f64,
    /// Crash-safe: flushed every `flush_every_records` records or `flush_interval_ms`.
    pub hdf5_crash_safe_gbps: f64,
    /// Crash-safe, and each flush and the close synced to the device (`sync_to_disk`).
    pub hdf5_synced_gbps: f64,
    pub flush_interval_ms: u64,
    pub flush_every_records: u64,
    pub raw_write_gbps: f64,
    pub hdf5_vs_raw: f64,
    pub crash_safe_vs_hdf5: f64,
    pub synced_vs_crash_safe: f64,
}

/// How one timed HDF5 run makes its records durable.
#[derive(Debug, Clone, Copy)]
struct Durability {
    /// Flush interval (ms) and every N records; (0, 0): only at close.
    flush: (u64, u64),
    sync_to_disk: bool,
}

fn record(trigger: u64, fragments: usize, fragment_bytes: usize) -> TriggerRecord {
    let payload: Vec<u8> = (0..fragment_bytes)
        .map(|i| (i * 31 + trigger as usize) as u8)
        .collect();
    TriggerRecord {
        header: TriggerRecordHeader {
            trigger_number: trigger,
            trigger_timestamp: trigger,
            run_number: 1,
            status_bits: 0,
            trigger_type: 1,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
            components: vec![],
        },
        fragments: (0..fragments as u32)
            .map(|s| {
                let h = FragmentHeader {
                    size: 0,
                    trigger_number: trigger,
                    trigger_timestamp: trigger,
                    window_begin: trigger,
                    window_end: trigger + 1,
                    run_number: 1,
                    error_bits: 0,
                    fragment_type: FragmentType::WIBETH,
                    sequence_number: 0,
                    detector_id: 3,
                    element_id: SourceId::readout(s),
                };
                Fragment::assemble(h, [&payload[..]])
            })
            .collect(),
    }
}

/// Writes records round-robin from `data` with one `write(2)` per header and fragment.
fn raw_write(path: &Path, data: &[TriggerRecord], records: u64) -> Result<()> {
    let io = |source| StoreError::Io {
        what: "cannot write",
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::create(path).map_err(io)?;
    for i in 0..records {
        let r = &data[i as usize % data.len()];
        file.write_all(&r.header.to_bytes()).map_err(io)?;
        for f in &r.fragments {
            file.write_all(f).map_err(io)?;
        }
    }
    Ok(())
}

/// Writes `records` records round-robin from `data` into one HDF5 file in `dir`, made durable
/// as `durability` says; returns the seconds it took, closing included.
fn hdf5_write(
    dir: &Path,
    data: &mut [TriggerRecord],
    records: u64,
    durability: Durability,
) -> Result<f64> {
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: dir.to_path_buf(),
        min_free_bytes: 0,
        max_records_per_file: u64::MAX,
        flush_interval_ms: durability.flush.0,
        flush_every_records: durability.flush.1,
        sync_to_disk: durability.sync_to_disk,
        ..Default::default()
    })?;
    let n = data.len();
    let start = Instant::now();
    for i in 0..records {
        let r = &mut data[i as usize % n];
        r.header.trigger_number = i + 1;
        writer.write(r)?;
    }
    writer.close()?;
    Ok(start.elapsed().as_secs_f64())
}

/// Writes `records` records of `fragments` x `fragment_bytes` into `dir` with HDF5 (one
/// writer, one file), first closed-only, then crash-safe with `flush` (interval in ms, every
/// N records), then crash-safe with every flush synced to the device, then the same bytes
/// with one `write(2)` per header and fragment; removes what it wrote. Only the synced run
/// waits for the device: on tmpfs (no device) it shows only the calls' cost, on a disk the
/// wait for the device.
pub fn run(
    dir: &Path,
    records: u64,
    fragments: usize,
    fragment_bytes: usize,
    flush: (u64, u64),
) -> Result<BenchResult> {
    let io = |what, source| StoreError::Io {
        what,
        path: dir.to_path_buf(),
        source,
    };
    // A few distinct records reused round-robin: realistic sizes without gigabytes of RAM.
    let mut data: Vec<TriggerRecord> = (1..=records.min(8))
        .map(|t| record(t, fragments, fragment_bytes))
        .collect();
    let n = data.len();
    let total: u64 = (0..records)
        .map(|i| data[i as usize % n].size_bytes() as u64)
        .sum();
    let sub = dir.join(format!("swdaq-bench-store-{}", std::process::id()));
    let runs = [
        ("closed-only", (0, 0), false),
        ("crash-safe", flush, false),
        ("synced", flush, true),
    ];
    std::fs::create_dir_all(&sub).map_err(|e| io("cannot create", e))?;
    // Untimed: lets a tmpfs or page cache allocate the memory the timed runs then reuse.
    raw_write(&sub.join("warm-up.bin"), &data, records)?;
    std::fs::remove_file(sub.join("warm-up.bin")).map_err(|e| io("cannot clean up", e))?;
    let mut seconds = [0.0; 3];
    for ((name, flush, sync_to_disk), seconds) in runs.into_iter().zip(&mut seconds) {
        let run_dir = sub.join(name);
        let durability = Durability {
            flush,
            sync_to_disk,
        };
        *seconds = hdf5_write(&run_dir, &mut data, records, durability)?;
        std::fs::remove_dir_all(&run_dir).map_err(|e| io("cannot clean up", e))?;
    }
    let [hdf5_seconds, safe_seconds, synced_seconds] = seconds;
    let start = Instant::now();
    raw_write(&sub.join("raw.bin"), &data, records)?;
    let raw_seconds = start.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&sub).map_err(|e| io("cannot clean up", e))?;
    let gbps = |seconds: f64| total as f64 / seconds / 1e9;
    Ok(BenchResult {
        records,
        fragments_per_record: fragments,
        fragment_bytes,
        hdf5_gbps: gbps(hdf5_seconds),
        hdf5_crash_safe_gbps: gbps(safe_seconds),
        hdf5_synced_gbps: gbps(synced_seconds),
        flush_interval_ms: flush.0,
        flush_every_records: flush.1,
        raw_write_gbps: gbps(raw_seconds),
        hdf5_vs_raw: raw_seconds / hdf5_seconds,
        crash_safe_vs_hdf5: hdf5_seconds / safe_seconds,
        synced_vs_crash_safe: safe_seconds / synced_seconds,
    })
}

#[cfg(test)]
mod tests {
    /// The figure the crate is held to: `cargo test --release -p swdaq-store -- --ignored
    /// --nocapture` (set `SWDAQ_BENCH_DIR`, default /dev/shm).
    #[test]
    #[ignore]
    fn realistic_records() {
        let dir = std::env::var_os("SWDAQ_BENCH_DIR").unwrap_or("/dev/shm".into());
        for (records, fragments, bytes) in
            [(200, 8, 1 << 20), (200, 8, 1 << 20), (100, 64, 1 << 16)]
        {
            let r = super::run(
                std::path::Path::new(&dir),
                records,
                fragments,
                bytes,
                (1000, 64),
            )
            .unwrap();
            println!("{}", serde_json::to_string(&r).unwrap());
        }
    }

    #[test]
    fn bench_writes_and_cleans_up() {
        let dir = std::env::temp_dir();
        let r = super::run(&dir, 3, 2, 1000, (1000, 2)).unwrap();
        assert!(r.hdf5_gbps > 0.0 && r.hdf5_crash_safe_gbps > 0.0 && r.raw_write_gbps > 0.0);
        assert!(
            !dir.join(format!("swdaq-bench-store-{}", std::process::id()))
                .exists()
        );
    }
}
