//! `swdaq inspect`: what a data file holds — an ATLAS EventStorage file (`.data`, from a SW
//! ROD run or ATLAS's SFOs), an HDF5 trigger-record file, a CMS-style FRD file (`.raw`, from
//! the event builder), or a swdaq raw file (`.swraw`, from `swdaq gen` or a recorded burst). The format is told from the file's
//! first bytes (`swdaq_format::file_kind`) and said first; every good event or record is
//! listed, every bad one named with why, and anything bad makes the exit status non-zero.

use serde::Serialize;
use std::path::PathBuf;
use swdaq_format::file_kind::{Detected, FileKind, detect_path};
use swdaq_format::input_file::MappedFile;

#[derive(clap::Args)]
pub struct Args {
    /// HDF5 trigger records (.hdf5), FRD (.raw), EventStorage (.data) or swdaq raw (.swraw);
    /// the format is told from the file's first bytes.
    file: PathBuf,
    /// Decode this trigger number's fragments (frame headers, trigger primitives); for an
    /// FRD file, list this event's FED fragments; for an EventStorage file, this L1 ID's ROBs
    /// (a .swraw file is always listed whole).
    #[arg(long)]
    record: Option<u64>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The format a file was read as, in front of its report (text) or beside it (JSON).
#[derive(Serialize)]
struct Tagged<'a, T> {
    format: String,
    /// The writer's suffix of a file it never closed.
    left_open: Option<&'static str>,
    #[serde(flatten)]
    report: &'a T,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let detected = detect_path(&args.file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.file.display()))?;
    match detected.kind {
        FileKind::Hdf5 => hdf5(args, &detected),
        FileKind::Frd | FileKind::FrdDamagedHeader => frd(args, &detected),
        FileKind::EventStorage => eventstorage(args, &detected),
        FileKind::SwdaqRaw => raw(args, &detected),
        FileKind::OldSwrodEvents | FileKind::Directory | FileKind::Empty | FileKind::Unknown => {
            anyhow::bail!("{}: {}", args.file.display(), detected.describe())
        }
    }
}

/// Prints the report (its format first), and fails naming how many items are bad.
fn show<T: Serialize>(
    args: &Args,
    detected: &Detected,
    report: &T,
    text: impl FnOnce(&T) -> String,
    bad: usize,
    what: &str,
) -> anyhow::Result<()> {
    if args.json {
        let tagged = Tagged {
            format: detected.kind.describe().to_string(),
            left_open: detected.left_open,
            report,
        };
        println!("{}", serde_json::to_string_pretty(&tagged)?);
    } else {
        println!("{}: {}", args.file.display(), detected.describe());
        print!("{}", text(report));
    }
    anyhow::ensure!(
        bad == 0,
        "{}: {bad} {what} (listed above as BAD)",
        args.file.display()
    );
    Ok(())
}

fn hdf5(args: &Args, detected: &Detected) -> anyhow::Result<()> {
    // A file its writer left open (killed) may hold records the library cannot reach: the
    // error says it was left open.
    let report = swdaq_store::inspect::inspect(&args.file, args.record)
        .map_err(|e| anyhow::anyhow!("{}: {}: {e}", args.file.display(), detected.describe()))?;
    if let Some(n) = args.record
        && report.records.is_empty()
    {
        anyhow::bail!(
            "{} has no record with trigger number {n}",
            args.file.display()
        );
    }
    show(
        args,
        detected,
        &report,
        swdaq_store::inspect::render,
        report.bad_items(),
        "records, fragments or file attributes could not be read",
    )
}

/// A swdaq raw file: its header and its frames through the readout's continuity checks.
fn raw(args: &Args, detected: &Detected) -> anyhow::Result<()> {
    use swdaq_readout::raw_inspect;
    let file = swdaq_format::input_file::open_regular(&args.file)?;
    let report = raw_inspect::inspect_raw(std::io::BufReader::with_capacity(8 << 20, file))
        .map_err(|e| anyhow::anyhow!("{}: {}: {e}", args.file.display(), detected.describe()))?;
    let bad = report.flagged_frames as usize + usize::from(report.error.is_some());
    show(
        args,
        detected,
        &report,
        raw_inspect::render,
        bad,
        "frames flagged by the continuity checks (or a record that could not be read)",
    )
}

/// An FRD file: every event's CRC32C and FED fragments checked, damaged spans skipped.
fn frd(args: &Args, detected: &Detected) -> anyhow::Result<()> {
    let file = MappedFile::open(&args.file)?;
    let detail = args.record.map(u32::try_from).transpose()?;
    let report = swdaq_evb::inspect::FrdReport {
        provenance: swdaq_evb::inspect::provenance_beside(&args.file),
        ..swdaq_evb::inspect::inspect(&file, detail)
    };
    show(
        args,
        detected,
        &report,
        swdaq_evb::inspect::render,
        report.problems.len(),
        "problems: damaged spans, events with a bad CRC32C or header disagreements",
    )
}

/// An EventStorage file: every full event and ROB checked.
fn eventstorage(args: &Args, detected: &Detected) -> anyhow::Result<()> {
    let file = MappedFile::open(&args.file)?;
    let detail = args.record.map(u32::try_from).transpose()?;
    let name = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let report = swdaq_swrod::inspect::inspect(&file, &name.unwrap_or_default(), detail);
    show(
        args,
        detected,
        &report,
        swdaq_swrod::inspect::render,
        report.problems.len(),
        "problems: bad events, damaged records or counts that disagree",
    )
}
