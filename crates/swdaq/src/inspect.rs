//! `swdaq inspect`: what an HDF5 trigger-record file holds.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    file: PathBuf,
    /// Decode this trigger number's fragments (frame headers, trigger primitives).
    #[arg(long)]
    record: Option<u64>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let report = swdaq_store::inspect::inspect(&args.file, args.record)?;
    if args.record.is_some() && report.records.is_empty() {
        anyhow::bail!(
            "{} has no record with trigger number {}",
            args.file.display(),
            args.record.unwrap_or_default()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", swdaq_store::inspect::render(&report));
    }
    if !report.problems.is_empty() {
        anyhow::bail!(
            "{}: {} records or fragments could not be read (listed above as BAD)",
            args.file.display(),
            report.problems.len()
        );
    }
    Ok(())
}
