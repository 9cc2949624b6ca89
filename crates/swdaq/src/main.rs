//! `swdaq`: the command-line entry point. Each subcommand lives in its own module and
//! only wires the library crates together.

mod bench;
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
    /// Benchmarks of swdaq's stages (`bench monitor`, `bench readout`).
    Bench(bench::Args),
    /// Measure this machine: memory bandwidth, CRC32C and frame-unpack speed per core.
    Hwbench(hwbench::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(&args),
        Command::Hwbench(args) => hwbench::run(&args),
    }
}
