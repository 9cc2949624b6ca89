//! `swdaq app --name NAME`: one application of a multi-process run, handed to its model
//! (`Configured::app`) with the configuration the launcher sends on stdin.

use crate::models;
use crate::runtime::stdio::{self as control, Commands};
use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// The application's name in `[[topology.apps]]` (the configuration's model says what
    /// its kind does).
    #[arg(long)]
    name: String,
    /// Read the configuration from this file instead of from the launcher on stdin (to run
    /// an application by hand; commands still come on stdin: `start`, `stop`).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

/// Runs one application of the configuration read from stdin (or `--config`), driven by the
/// launcher's commands on stdin; its report goes to stdout.
pub fn run_app(args: &Args) -> anyhow::Result<()> {
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let text = match &args.config {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?,
        None => control::read_config_text(&mut stdin)?,
    };
    let commands = Commands::spawn(stdin)?;
    let model = models::select(&text)?;
    let configured = model.parse(&text)?;
    // The launcher completes the run's row; a registry this host cannot reach loses the
    // files' checksums, not the run.
    let files = crate::run_record::record_app_files(&*configured, &args.name)
        .map_err(|e| eprintln!("swdaq app {}: files not recorded: {e:#}", args.name))
        .ok();
    let report = configured.app(&args.name, commands);
    // Its files on record even when the application failed.
    if let Some(Err(e)) = files.map(|f| f.finish(None)) {
        eprintln!("swdaq app {}: files not recorded: {e:#}", args.name);
    }
    let report = report?;
    control::send_report(&report)?;
    eprintln!("swdaq app {}: done", args.name);
    Ok(())
}
