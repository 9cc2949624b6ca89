//! `swdaq run`: the whole chain on one machine — emulated links, readout with hit finding,
//! self-trigger, record building, HDF5 storage — from a built-in default configuration. A
//! configuration with an `[evb]` section runs the CMS-style event builder instead
//! (`crate::models::evb`), one with a `[swrod]` section the ATLAS-style SW ROD
//! (`crate::models::swrod`).

use crate::models::chain::config::RunConfig;
use crate::models::chain::{summary as view, system as chain};
use crate::runtime::stop;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML); keys not in it keep their built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// Seconds of data taking (0: until Ctrl-C); overrides `run.duration_s`.
    #[arg(long)]
    duration: Option<f64>,
    /// Number of links (whatever `source.kind`); overrides `emulator.links`.
    #[arg(long)]
    links: Option<u32>,
    /// Output directory; overrides `run.output_dir`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run number; overrides `run.number`.
    #[arg(long)]
    run: Option<u32>,
    /// `/metrics` address, or "" to turn it off; overrides `run.metrics_addr`.
    #[arg(long)]
    metrics: Option<String>,
    /// Print the closing summary as JSON (on stdout) instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    fn config(&self) -> anyhow::Result<RunConfig> {
        let mut c = match &self.config {
            Some(path) => RunConfig::load(path)?,
            None => RunConfig::default(),
        };
        if let Some(d) = self.duration {
            c.run.duration_s = d;
        }
        if let Some(n) = self.links {
            c.emulator.links = n;
        }
        if let Some(out) = &self.out {
            c.run.output_dir = out.clone();
        }
        if let Some(n) = self.run {
            c.run.number = n;
        }
        if let Some(m) = &self.metrics {
            c.run.metrics_addr = m.clone();
        }
        c.validate()?;
        Ok(c)
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(path) = &args.config
        && crate::models::evb::is_evb_config(path)?
    {
        return crate::models::evb::main(path, args.duration, args.json);
    }
    if let Some(path) = &args.config
        && crate::models::swrod::is_swrod_config(path)?
    {
        return crate::models::swrod::main(path, args.duration, args.json);
    }
    let mut config = args.config()?;
    if args.print_config {
        print!("{}", config.to_toml());
        return Ok(());
    }
    config.claim_run_number(None)?;
    let stop = Arc::new(stop::StopRequest::default());
    stop::install(Arc::clone(&stop))?;
    eprintln!(
        "swdaq run {}: {} {} links from {}{}, {} s{}, writing to {}{}",
        config.run.number,
        config.emulator.links,
        config.source.format.frame_format().name(),
        config.source.describe(),
        if config.topology.is_distributed() {
            format!(" in {} applications", config.topology.apps.len())
        } else {
            String::new()
        },
        config.run.duration_s,
        if config.run.duration_s == 0.0 {
            " (until Ctrl-C)"
        } else {
            " (Ctrl-C or SIGTERM ends it early)"
        },
        config.run.output_dir.display(),
        if config.run.metrics_addr.is_empty() || config.topology.is_distributed() {
            String::new()
        } else {
            format!(", metrics on http://{}/metrics", config.run.metrics_addr)
        },
    );
    let report = if config.topology.is_distributed() {
        let exe = crate::runtime::launch::current_exe()?;
        crate::runtime::launch::run_distributed(&config, &exe, &stop)?
    } else {
        let mut view = view::LiveView::default();
        let quiet = args.json;
        chain::run_chain(&config, &stop, |status| {
            if !quiet {
                view.show(status)
            }
        })?
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&view::summary_json(&report))?
        );
    } else {
        print!("{}", view::summary(&report));
    }
    if let crate::runtime::outcome::StopReason::StorageFailed(e) = &report.stop_reason {
        anyhow::bail!("{e}");
    }
    Ok(())
}
