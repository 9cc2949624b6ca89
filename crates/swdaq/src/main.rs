//! `swdaq`: the command-line entry point. Each subcommand lives in its own module and
//! only wires the library crates together.

mod hwbench;
mod table;

use clap::{Parser, Subcommand};

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
    /// Measure this machine: memory bandwidth, CRC32C and frame-unpack speed per core.
    Hwbench(hwbench::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Hwbench(args) => hwbench::run(&args),
    }
}
