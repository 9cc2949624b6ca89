//! Storage benchmark (library side of `swdaq bench store`): HDF5 record writing against plain
//! `write(2)` of the same bytes, in the same run, to the same directory.

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
    pub hdf5_gbps: f64,
    pub raw_write_gbps: f64,
    pub hdf5_vs_raw: f64,
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

/// Writes `records` records of `fragments` x `fragment_bytes` into `dir` with HDF5 (one
/// writer, files of up to 4 GiB), then the same bytes with one `write(2)` per header and
/// fragment; removes what it wrote. Neither syncs: on a page-cache or tmpfs directory this
/// measures the CPU cost of the format, which is what a writer thread spends.
pub fn run(
    dir: &Path,
    records: u64,
    fragments: usize,
    fragment_bytes: usize,
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
    std::fs::create_dir_all(&sub).map_err(|e| io("cannot create", e))?;
    // Untimed: lets a tmpfs or page cache allocate the memory both timed runs then reuse.
    raw_write(&sub.join("warm-up.bin"), &data, records)?;
    std::fs::remove_file(sub.join("warm-up.bin")).map_err(|e| io("cannot clean up", e))?;
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: sub.clone(),
        min_free_bytes: 0,
        max_records_per_file: u64::MAX,
        ..Default::default()
    })?;
    let start = Instant::now();
    for i in 0..records {
        let r = &mut data[i as usize % n];
        r.header.trigger_number = i + 1;
        writer.write(r)?;
    }
    writer.close()?;
    let hdf5_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    raw_write(&sub.join("raw.bin"), &data, records)?;
    let raw_seconds = start.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&sub).map_err(|e| io("cannot clean up", e))?;
    let (hdf5_gbps, raw_write_gbps) = (
        total as f64 / hdf5_seconds / 1e9,
        total as f64 / raw_seconds / 1e9,
    );
    Ok(BenchResult {
        records,
        fragments_per_record: fragments,
        fragment_bytes,
        hdf5_gbps,
        raw_write_gbps,
        hdf5_vs_raw: hdf5_gbps / raw_write_gbps,
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
            let r = super::run(std::path::Path::new(&dir), records, fragments, bytes).unwrap();
            println!("{}", serde_json::to_string(&r).unwrap());
        }
    }

    #[test]
    fn bench_writes_and_cleans_up() {
        let dir = std::env::temp_dir();
        let r = super::run(&dir, 3, 2, 1000).unwrap();
        assert!(r.hdf5_gbps > 0.0 && r.raw_write_gbps > 0.0);
        assert!(
            !dir.join(format!("swdaq-bench-store-{}", std::process::id()))
                .exists()
        );
    }
}
