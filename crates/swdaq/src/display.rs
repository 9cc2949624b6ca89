//! `swdaq display`: an event display of one trigger record: channel versus time with the
//! pedestal-subtracted ADC as colour, one panel per plane, the record's TPs drawn on top.

use std::path::PathBuf;
use swdaq_app::models::chain::display::emulator_options;
use swdaq_format::file_kind::{FileKind, detect_path};
use swdaq_sim::SimConfig;
use swdaq_store::display::display_file;

#[derive(clap::Args)]
pub struct Args {
    /// An HDF5 trigger-record file.
    file: PathBuf,
    /// Trigger number of the record to draw.
    #[arg(long)]
    record: u64,
    /// The PNG file to write.
    #[arg(short, long, default_value = "event.png")]
    output: PathBuf,
    /// Offline channel of link 0's first channel (the emulator's channel map by default).
    #[arg(long, default_value_t = SimConfig::default().first_channel)]
    first_channel: u32,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let detected = detect_path(&args.file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.file.display()))?;
    anyhow::ensure!(
        detected.kind == FileKind::Hdf5,
        "{}: {}; swdaq display draws records of HDF5 trigger-record files",
        args.file.display(),
        detected.describe()
    );
    if detected.left_open.is_some() {
        println!("{}: {}", args.file.display(), detected.describe());
    }
    let options = emulator_options(args.first_channel);
    let (summary, bad_fragments) = display_file(&args.file, args.record, &args.output, &options)?;
    println!(
        "wrote {} (trigger {}, {} samples, {} panels)",
        args.output.display(),
        summary.trigger_number,
        summary.samples,
        summary.panels.len()
    );
    for bad in &bad_fragments {
        eprintln!(
            "BAD fragment {} (left out, the rest drawn): {}",
            bad.dataset, bad.reason
        );
    }
    if !bad_fragments.is_empty() {
        anyhow::bail!(
            "{}: {} fragments of record {} could not be read or are garbage",
            args.file.display(),
            bad_fragments.len(),
            args.record
        );
    }
    Ok(())
}
