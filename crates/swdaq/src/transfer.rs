//! `swdaq transfer`: catches up the transfer backlog of a run registry after the fact — every
//! file on record not yet verified at the destination copied, verified and marked (and, when
//! asked, deleted locally after its verified copy) — until the backlog is empty or the time
//! limit; `--recheck` first checks the verified copies again. The logic is `swdaq_transfer`'s.

use std::path::PathBuf;
use std::time::Duration;
use swdaq_registry::Location;
use swdaq_transfer::{Destination, Settings, Stop};

#[derive(clap::Args)]
pub struct Args {
    /// The configuration whose `[run.transfer]` and registry to use (default: the built-in
    /// chain's, in ./swdaq-data); flags override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The registry: `postgresql://USER@HOST/DB` or an SQLite file (default: the
    /// configuration's).
    #[arg(long)]
    registry: Option<String>,
    /// Where files go: `root://HOST:PORT//PATH` or an absolute directory (default: the
    /// configuration's `[run.transfer] destination`).
    #[arg(long)]
    destination: Option<String>,
    /// Delete each local file once its copy is verified (default: the configuration's
    /// `delete_after_verify`, else keep).
    #[arg(long)]
    delete_after_verify: bool,
    /// Stop after this many seconds, whatever is left (it stays in the backlog).
    #[arg(long, default_value_t = 3600.0)]
    time_limit_s: f64,
    /// Check every verified copy whose local file is kept against the destination's
    /// checksum first: one gone or corrupted is copied again.
    #[arg(long)]
    recheck: bool,
    /// Serve the backlog as Prometheus metrics at this address while it runs (e.g.
    /// 127.0.0.1:9465).
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.time_limit_s.is_finite() && args.time_limit_s > 0.0,
        "--time-limit-s: give a number of seconds > 0"
    );
    let config = swdaq_app::models::load(args.config.as_deref())?;
    let run = config.run_section();
    let location = match &args.registry {
        Some(key) => Location::parse(key, &PathBuf::from("."))
            .map_err(|e| anyhow::anyhow!(e.replace("run.registry", "--registry")))?,
        None => run.registry_location().map_err(|e| anyhow::anyhow!(e))?,
    };
    if let Location::Sqlite(path) = &location {
        anyhow::ensure!(
            path.exists(),
            "no run registry at {}: no run has been taken with it yet (give --config or --registry)",
            path.display()
        );
    }
    let mut settings: Settings = match (&run.transfer, &args.destination) {
        (Some(section), _) => section.settings(&run.output_dir)?,
        (None, Some(_)) => Settings {
            output_dir: Some(run.output_dir.clone()),
            ..Settings::new(Destination::Directory("/".into()))
        },
        (None, None) => anyhow::bail!(
            "no destination: give --destination, or a configuration with [run.transfer] destination"
        ),
    };
    if let Some(d) = &args.destination {
        settings.destination =
            Destination::parse(d).map_err(|e| anyhow::anyhow!("--destination: {e}"))?;
    }
    settings.delete_after_verify |= args.delete_after_verify;
    let stop = Stop::default();
    let on_signal = stop.clone();
    ctrlc::set_handler(move || on_signal.request())
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    let monitor = swdaq_monitor::Registry::new();
    let metrics = swdaq_transfer::Metrics::register(&monitor, &settings.destination)?;
    let stats = swdaq_monitor::StatsThread::spawn(monitor.clone(), Duration::from_secs(1))?;
    let server = match &args.metrics_addr {
        Some(addr) => Some(swdaq_monitor::MetricsServer::start(
            addr.parse()
                .map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: {e}"))?,
            stats.cell(),
        )?),
        None => None,
    };
    let rechecked = if args.recheck {
        swdaq_transfer::recheck(&settings, &location, &stop)?
    } else {
        Vec::new()
    };
    for line in &rechecked {
        eprintln!("swdaq transfer: {line}");
    }
    let destination = settings.destination.describe();
    let status = swdaq_transfer::catch_up(
        settings,
        location.clone(),
        Duration::from_secs_f64(args.time_limit_s),
        stop,
        Some(metrics),
    );
    if let Some(server) = server {
        server.stop();
    }
    let _ = stats.stop();
    let b = &status.backlog;
    if args.json {
        let json = serde_json::json!({
            "registry": location.describe(),
            "destination": destination,
            "verified": status.verified,
            "failed_attempts": status.failures,
            "corrupt_copies_found": status.corrupt_found + rechecked.len() as u64,
            "deleted": status.deleted,
            "backlog": b,
            "last_error": status.last_error,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!(
            "{} file(s) verified at {destination}, {} deleted locally; backlog: {} file(s), {} bytes, {} failing, {} without checksums (never transferred)",
            status.verified, status.deleted, b.files, b.bytes, b.failed, b.unverifiable
        );
    }
    if b.files > 0 {
        anyhow::bail!(
            "{} file(s) not transferred within the time limit{}",
            b.files,
            status
                .last_error
                .as_deref()
                .map_or(String::new(), |e| format!("; last error: {e}"))
        );
    }
    Ok(())
}
