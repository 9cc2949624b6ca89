//! `swdaq`: the command-line entry point. Each subcommand lives in its own module and
//! only wires the library crates together.

mod bench;
mod display;
mod dqm;
mod generate;
mod hwbench;
mod inspect;
mod quality;
mod quality_plot;
mod runs;
mod table;
mod transfer;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "swdaq",
    version,
    about = "Software data acquisition for particle-physics detectors"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a dataflow model until its duration or Ctrl-C, in one process or as the
    /// applications of a [topology]; the configuration's top-level table picks the model
    /// (listed by `swdaq run --help`).
    Run(swdaq_app::run_command::Args),
    /// One application of a multi-process run, of one of its model's application kinds
    /// (listed by `swdaq app --help`), as `swdaq run` starts them.
    App(swdaq_app::app_command::Args),
    /// Keep any model's system up between runs under run control: an HTTP JSON API to
    /// configure, start, stop, pause and resume runs, change prescales and record raw bursts
    /// where the model has them (see `swdaq ctl`).
    Serve(swdaq_app::control::ServeArgs),
    /// Send one command to `swdaq serve` and print its JSON answer.
    Ctl(swdaq_app::control::CtlArgs),
    /// The run registry: every run on record (list, filtered), or one run with its
    /// configuration, software, files with checksums and logbook (`show N`).
    Runs(runs::Args),
    /// Transfer to permanent storage: copy every file on record not yet verified at the
    /// destination (a directory or root://), verify it there by Adler-32, mark it in the
    /// registry; until the backlog is empty or the time limit.
    Transfer(transfer::Args),
    /// Emulate detector data — DUNE links (WIBEth, ProtoDUNE WIB), FELIX cards or CMS FEDs —
    /// to raw files per source or over UDP, with its ground truth.
    Gen(generate::Args),
    /// Benchmarks of swdaq's stages: monitor, tpg, transport, store, readout, evb, evb-udp, swrod,
    /// plugin.
    Bench(bench::Args),
    /// Draw one trigger record of an HDF5 file: channel vs time per plane, with its TPs.
    Display(display::Args),
    /// Show what a data file holds (HDF5 trigger records, CMS FRD, ATLAS EventStorage or
    /// swdaq raw .swraw), checked: every good event or record listed, every bad one named,
    /// non-zero exit if any.
    Inspect(inspect::Args),
    /// Hit-finding quality against the emulator's truth, over a threshold scan.
    TpgQuality(quality::Args),
    /// Data-quality histograms of a run's files (any model's), each
    /// judged against a reference run's (`--reference`, from an earlier `--save`), worst first.
    Dqm(dqm::Args),
    /// Measure this machine as COMPASS did: memory read and write (sequential and random,
    /// 1 KiB to 1 MiB blocks, one core and every core), CRC32C, frame unpacking and the disk
    /// of the output directory.
    Hwbench(hwbench::Args),
    /// The dataflow models this binary has: name, table and application kinds; with `--json`
    /// also each one's wire id and dashboard, as `deploy/grafana/dashboards.py` reads them.
    Models(ModelsArgs),
}

#[derive(clap::Args)]
struct ModelsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn models(args: &ModelsArgs) -> anyhow::Result<()> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&swdaq_app::models::catalogue()?)?
        );
    } else {
        print!("{}", swdaq_app::models::help());
    }
    Ok(())
}

/// The command line, the models' list (from the registry, not written here) in the help of
/// `run` and `app`.
fn cli() -> Cli {
    let models = swdaq_app::models::help();
    let command = Cli::command()
        .mut_subcommand("run", |c| c.after_help(models.clone()))
        .mut_subcommand("app", |c| c.after_help(models.clone()));
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}

/// Ends quietly when stdout is closed early (`swdaq inspect FILE | head`), as command-line
/// tools do, instead of panicking in `print!`: Rust starts programs with SIGPIPE ignored.
fn die_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: runs first in `main`, before any other thread exists, and only sets SIGPIPE's
    // disposition back to the default; no memory is touched.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> std::process::ExitCode {
    die_quietly_on_closed_stdout();
    swdaq_registry::software::set(swdaq_registry::Software {
        version: env!("CARGO_PKG_VERSION").into(),
        commit: env!("SWDAQ_GIT_COMMIT").into(),
        profile: env!("SWDAQ_BUILD_PROFILE").into(),
        flags: env!("SWDAQ_BUILD_FLAGS").into(),
    });
    let result = match cli().command {
        Command::Run(args) => swdaq_app::run_command::run(&args),
        Command::App(args) => swdaq_app::app_command::run_app(&args),
        Command::Serve(args) => swdaq_app::control::serve(args),
        Command::Ctl(args) => swdaq_app::control::ctl(&args),
        Command::Runs(args) => runs::run(&args),
        Command::Transfer(args) => transfer::run(&args),
        Command::Gen(args) => generate::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Display(args) => display::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::TpgQuality(args) => quality::run(&args),
        Command::Dqm(args) => dqm::run(&args),
        Command::Hwbench(args) => hwbench::run(&args),
        Command::Models(args) => models(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprint!("{}", swdaq_app::error_report::render(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
