use super::print_results;

/// `swdaq bench store`'s arguments (what each measures: `swdaq bench store --help`).
#[derive(clap::Args)]
pub struct Args {
    /// Directory to write into (RAM-backed by default).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: std::path::PathBuf,
    #[arg(long, default_value_t = 200)]
    pub records: u64,
    #[arg(long, default_value_t = 8)]
    pub fragments: usize,
    /// Bytes per fragment payload.
    #[arg(long, default_value_t = 1 << 20)]
    pub fragment_bytes: usize,
    /// Crash-safe run: flush at most this long after a record (0: no time bound)...
    #[arg(long, default_value_t = swdaq_store::StoreConfig::default().flush_interval_ms)]
    pub flush_interval_ms: u64,
    /// ... or every this many records (0: no count bound).
    #[arg(long, default_value_t = swdaq_store::StoreConfig::default().flush_every_records)]
    pub flush_every_records: u64,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        dir,
        records,
        fragments,
        fragment_bytes,
        flush_interval_ms,
        flush_every_records,
    } = bench;
    anyhow::ensure!(
        *records > 0 && *fragments > 0,
        "records and fragments must be at least 1"
    );
    let result = swdaq_store::bench::run(
        dir,
        *records,
        *fragments,
        *fragment_bytes,
        (*flush_interval_ms, *flush_every_records),
    )?;
    print_results(
        json,
        std::slice::from_ref(&result),
        &[
            "records",
            "fragments x bytes",
            "HDF5 GB/s",
            "crash-safe GB/s",
            "synced GB/s",
            "flush every",
            "write(2) GB/s",
            "HDF5 / write(2)",
            "crash-safe / HDF5",
            "synced / crash-safe",
        ],
        |r| {
            vec![
                r.records.to_string(),
                format!("{} x {}", r.fragments_per_record, r.fragment_bytes),
                format!("{:.2}", r.hdf5_gbps),
                format!("{:.2}", r.hdf5_crash_safe_gbps),
                format!("{:.2}", r.hdf5_synced_gbps),
                format!(
                    "{} records / {} ms",
                    r.flush_every_records, r.flush_interval_ms
                ),
                format!("{:.2}", r.raw_write_gbps),
                format!("{:.2}", r.hdf5_vs_raw),
                format!("{:.2}", r.crash_safe_vs_hdf5),
                format!("{:.2}", r.synced_vs_crash_safe),
            ]
        },
    )
}
