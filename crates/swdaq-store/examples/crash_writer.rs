//! A writer to kill, for the crash-safety tests (`tests/crash.rs`, `tests/python/test_crash.py`):
//! `crash_writer OUT_DIR FLUSH_EVERY_RECORDS` writes [`swdaq_store::sample::track_record`]s with
//! trigger numbers 1, 2, ... into one file until killed, flushing every FLUSH_EVERY_RECORDS
//! records (and never by time, so what must survive is known exactly), and prints each trigger
//! number on its own line once `write` has returned.

use std::io::Write;
use std::path::PathBuf;
use swdaq_store::{RecordFileWriter, StoreConfig, sample};

fn main() -> anyhow::Result<()> {
    let usage = "usage: crash_writer OUT_DIR FLUSH_EVERY_RECORDS";
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let flush_every_records = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: dir,
        min_free_bytes: 0,
        max_records_per_file: u64::MAX,
        max_file_bytes: u64::MAX,
        flush_interval_ms: 0,
        flush_every_records,
        ..Default::default()
    })?;
    let mut out = std::io::stdout().lock();
    for trigger in 1.. {
        writer.write(&sample::track_record(trigger).record)?;
        writeln!(out, "{trigger}")?;
        out.flush()?;
    }
    Ok(())
}
