//! Transfer to permanent storage (#38): each closed file of a run the registry knows is
//! copied to a destination — a directory (a mounted EOS or NFS area) or an XRootD server
//! (`root://host:port//path`, as EOS is reached) — under a temporary name renamed once
//! complete, verified by the Adler-32 the destination computes, and marked in the registry's
//! `transfers` table (`swdaq_registry::TransferRow`); a failed attempt is retried after a
//! bounded exponential back-off ([`Backoff`]); the local file is deleted only after a verified
//! copy and only with `delete_after_verify` (default: kept). Nothing else of the data on disk
//! is ever removed.
//!
//! It runs beside a run ([`Agent`]: its own thread, every wait bounded, a stop honoured, a
//! running `xrdcp` killed) or catches up a backlog after the fact ([`catch_up`], `swdaq
//! transfer`). Data taking never waits for it: writers only reach the registry at the stop.
//!
//! Modules: where files go and one file's put ([`destination`]), the per-file state machine
//! ([`state`]), the back-off ([`backoff`]), the loop ([`agent`]), the XRootD client's
//! programs run with a time limit ([`command`]), the stop every wait honours ([`stop`]).

pub mod agent;
pub mod backoff;
pub mod command;
pub mod destination;
pub mod state;
pub mod stop;

pub use agent::{Agent, Status, catch_up, recheck};
pub use backoff::Backoff;
pub use destination::Destination;
pub use stop::Stop;

use std::path::PathBuf;
use std::time::Duration;

/// How a transfer runs (`[run.transfer]`, or `swdaq transfer`'s flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub destination: Destination,
    /// Deletes a local file once its copy is verified (default: kept).
    pub delete_after_verify: bool,
    pub retry: Backoff,
    /// How often the registry is asked for files to transfer.
    pub poll: Duration,
    /// The longest one file's copy may take (then killed, and tried again later).
    pub copy_timeout: Duration,
    /// The longest a checksum query, rename or read-back may take.
    pub query_timeout: Duration,
    /// The run's output directory: a file's place under it is kept at the destination.
    pub output_dir: Option<PathBuf>,
}

impl Settings {
    pub fn new(destination: Destination) -> Self {
        Self {
            destination,
            delete_after_verify: false,
            retry: Backoff::default(),
            poll: Duration::from_secs(2),
            copy_timeout: Duration::from_secs(600),
            query_timeout: Duration::from_secs(30),
            output_dir: None,
        }
    }
}

/// The transfer's Prometheus series, in a monitoring block of its own (written by the one
/// thread that runs the transfer).
pub struct Metrics {
    pub backlog_files: swdaq_monitor::Gauge,
    pub backlog_bytes: swdaq_monitor::Gauge,
    pub backlog_failed: swdaq_monitor::Gauge,
    pub verified: swdaq_monitor::Counter,
    pub copied_bytes: swdaq_monitor::Counter,
    pub failures: swdaq_monitor::Counter,
    pub corrupt_found: swdaq_monitor::Counter,
    pub deleted: swdaq_monitor::Counter,
    pub errors: swdaq_monitor::Counter,
}

impl Metrics {
    /// Registers the series in `registry`, labelled with the destination.
    pub fn register(
        registry: &swdaq_monitor::Registry,
        destination: &Destination,
    ) -> Result<Self, swdaq_monitor::MonitorError> {
        let d = destination.describe();
        let mut b = registry.block("transfer", &[("destination", d.as_str())]);
        Ok(Self {
            backlog_files: b.gauge(
                "swdaq_transfer_backlog_files",
                "Files on record not yet verified at the destination",
            )?,
            backlog_bytes: b.gauge(
                "swdaq_transfer_backlog_bytes",
                "Bytes of the files not yet verified at the destination",
            )?,
            backlog_failed: b.gauge(
                "swdaq_transfer_backlog_failed_files",
                "Files whose last transfer attempt failed (retried after a back-off)",
            )?,
            verified: b.counter(
                "swdaq_transfer_verified_files_total",
                "Files verified at the destination by their Adler-32",
            )?,
            copied_bytes: b.counter("swdaq_transfer_copied_bytes_total", "Bytes copied")?,
            failures: b.counter(
                "swdaq_transfer_failed_attempts_total",
                "Transfer attempts that failed",
            )?,
            corrupt_found: b.counter(
                "swdaq_transfer_corrupt_copies_total",
                "Copies found at the destination with another checksum, and replaced",
            )?,
            deleted: b.counter(
                "swdaq_transfer_deleted_files_total",
                "Local files deleted after their verified copy",
            )?,
            errors: b.counter(
                "swdaq_transfer_errors_total",
                "Errors of the transfer (failed attempts, registry errors, corrupted copies)",
            )?,
        })
    }
}
