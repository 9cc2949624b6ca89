//! `swdaq runs`: what the run registry holds (`swdaq_registry`), as a table or JSON.

use std::path::PathBuf;
use swdaq_app::transition_hooks::command::HookEnd;
use swdaq_registry::{Location, Registry, RunFilter, parse_time};

#[derive(clap::Args)]
pub struct Args {
    /// The registry: `postgresql://USER@HOST/DB` or an SQLite file (default: the one
    /// `--config`'s `[run]` names, in its output directory unless `registry` is given).
    #[arg(long, global = true)]
    registry: Option<String>,
    /// The configuration whose registry to read (default: the built-in chain's, in
    /// ./swdaq-data).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// JSON on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<RunsCommand>,
    #[command(flatten)]
    filter: FilterArgs,
}

#[derive(clap::Subcommand)]
enum RunsCommand {
    /// Everything on record of one run.
    Show { number: u32 },
}

#[derive(clap::Args)]
struct FilterArgs {
    /// Runs from this number on.
    #[arg(long)]
    from: Option<u32>,
    /// Runs up to this number.
    #[arg(long)]
    to: Option<u32>,
    /// Runs of this type (physics, test, calibration, ...).
    #[arg(long = "type")]
    run_type: Option<String>,
    /// Runs started on or after this date (YYYY-MM-DD) or time (RFC 3339, UTC).
    #[arg(long)]
    since: Option<String>,
    /// Runs started on or before this date, or before this time.
    #[arg(long)]
    until: Option<String>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let location = match &args.registry {
        Some(key) => Location::parse(key, &PathBuf::from("."))
            .map_err(|e| anyhow::anyhow!(e.replace("run.registry", "--registry")))?,
        None => swdaq_app::models::load(args.config.as_deref())?
            .run_section()
            .registry_location()
            .map_err(|e| anyhow::anyhow!(e))?,
    };
    if let Location::Sqlite(path) = &location {
        // Reading makes no registry where there is none.
        anyhow::ensure!(
            path.exists(),
            "no run registry at {}: no run has been taken with it yet (give --config or --registry)",
            path.display()
        );
    }
    let mut registry = Registry::open(&location)?;
    match &args.command {
        Some(RunsCommand::Show { number }) => show(&mut registry, *number, args.json),
        None => list(&mut registry, &args.filter, args.json),
    }
}

fn list(registry: &mut Registry, f: &FilterArgs, json: bool) -> anyhow::Result<()> {
    let time = |t: &Option<String>, end_of_day| {
        t.as_deref()
            .map(|t| parse_time(t, end_of_day))
            .transpose()
            .map_err(|e| anyhow::anyhow!(e))
    };
    let filter = RunFilter {
        from: f.from,
        to: f.to,
        run_type: f.run_type.clone(),
        since: time(&f.since, false)?,
        before: time(&f.until, true)?,
    };
    let runs = registry.list(&filter)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    println!(
        "{:>8}  {:<12} {:<6} {:<12} {:<24} {:<24} stop",
        "run", "type", "model", "operator", "started", "stopped"
    );
    for r in runs {
        println!(
            "{:>8}  {:<12} {:<6} {:<12} {:<24} {:<24} {}",
            r.number,
            r.run_type,
            r.model,
            r.operator,
            r.started_at,
            r.stopped_at.as_deref().unwrap_or("not ended"),
            r.stop_reason.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

fn show(registry: &mut Registry, number: u32, json: bool) -> anyhow::Result<()> {
    let Some(record) = registry.show(number)? else {
        anyhow::bail!(
            "no run {number} in the run registry {}",
            registry.location().describe()
        );
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&record)?);
        return Ok(());
    }
    let r = &record.row;
    println!("run {} ({}, {})", r.number, r.run_type, r.model);
    println!(
        "  operator  {} on {} (pid {})",
        r.operator, r.host, record.pid
    );
    println!("  software  {}", record.software);
    println!("  apps      {}", record.applications);
    println!("  started   {}", r.started_at);
    println!(
        "  stopped   {}",
        r.stopped_at.as_deref().unwrap_or("not ended")
    );
    println!("  stop      {}", r.stop_reason.as_deref().unwrap_or("-"));
    println!("  files     {}", record.files.len());
    let hex = |c: Option<u32>| c.map_or("none".into(), |c| format!("{c:08x}"));
    for f in &record.files {
        println!(
            "    {}  {} bytes  adler32 {}  crc32c {}  closed {}",
            f.path,
            f.bytes,
            hex(f.adler32),
            hex(f.crc32c),
            f.closed_at
        );
    }
    println!("  hooks     {}", record.hooks.len());
    for h in &record.hooks {
        let ended = serde_json::from_value::<HookEnd>(h.ended.clone())
            .map_or_else(|_| h.ended.to_string(), |e| e.to_string());
        println!(
            "    {} {:?} {ended} ({} ms, at {})",
            h.hook, h.argv, h.millis, h.started_at
        );
        for line in h.output.lines() {
            println!("      | {line}");
        }
        if h.truncated_bytes > 0 {
            println!("      [{} more bytes not kept]", h.truncated_bytes);
        }
    }
    println!("  transfers {}", record.transfers.len());
    for t in &record.transfers {
        let mut line = format!(
            "    {} -> {}  {}  attempts {}",
            t.path,
            t.destination,
            t.state.as_str(),
            t.attempts
        );
        if let Some(a) = t.verified_adler32 {
            line += &format!(
                "  adler32 {a:08x} at {}",
                t.verified_at.as_deref().unwrap_or("?")
            );
        }
        if let Some(d) = &t.deleted_at {
            line += &format!("  deleted locally {d}");
        }
        if let Some(e) = &t.last_error {
            line += &format!("  last error: {e}");
        }
        println!("{line}");
    }
    println!("  logbook   {}", record.logbook.len());
    for e in &record.logbook {
        println!("    {} {}: {}", e.written_at, e.author, e.text);
    }
    Ok(())
}
