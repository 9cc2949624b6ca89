//! Writes a sample swdaq HDF5 file with known content, for the Python tests and for trying
//! the tools: `cargo run -p swdaq-store --example write_sample -- OUT_DIR [RECORDS]`.
//!
//! OUT_DIR gets `swdaq_run000001_0000.hdf5` with RECORDS (default 3) copies of
//! [`swdaq_store::sample::track_record`] (trigger numbers 1..=RECORDS), and
//! `expected_adcs.npy`: the ADCs its WIBEth fragments carry, uint16
//! `[record, link, frame, sample, channel]`.

use std::io::Write;
use std::path::PathBuf;
use swdaq_store::{RecordFileWriter, StoreConfig, sample};

/// A NumPy `.npy` (version 1.0) of little-endian uint16 values with the given shape.
fn npy(shape: &[usize], values: &[u16]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let mut header = format!(
        "{{'descr': '<u2', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    // Magic, version and length take 10 bytes; the header ends in '\n' at a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: write_sample OUT_DIR [RECORDS]"))?,
    );
    let records: u64 = args.next().map_or(Ok(3), |n| n.parse())?;
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: dir.clone(),
        min_free_bytes: 0,
        max_records_per_file: records,
        ..Default::default()
    })?;
    let mut adcs = Vec::new();
    for trigger in 1..=records {
        let s = sample::track_record(trigger);
        writer.write(&s.record)?;
        adcs.extend(s.adcs.iter().flatten().flatten().flatten().copied());
    }
    writer.close()?;
    let shape = [
        records as usize,
        sample::LINKS as usize,
        sample::FRAMES,
        64,
        64,
    ];
    std::fs::File::create(dir.join("expected_adcs.npy"))?.write_all(&npy(&shape, &adcs))?;
    for file in writer.closed_files() {
        println!("{}", file.display());
    }
    Ok(())
}
