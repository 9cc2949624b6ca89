//! `swdaq inspect`: what an HDF5 trigger-record file, a CMS-style FRD file (`.raw`, from
//! the event builder) or a swdaq raw file (`.swraw`, from `swdaq gen` or a recorded burst)
//! holds.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    file: PathBuf,
    /// Decode this trigger number's fragments (frame headers, trigger primitives); for an
    /// FRD file, list this event's FED fragments.
    #[arg(long)]
    record: Option<u64>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut head = [0u8; swdaq_format::frd::FRD_FILE_HEADER_SIZE];
    let is_frd = std::fs::File::open(&args.file)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| swdaq_evb::inspect::is_frd(&head));
    if is_frd {
        return frd(args);
    }
    if head.starts_with(&swdaq_format::rawfile::RAW_MAGIC) {
        return raw(args);
    }
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

/// A swdaq raw file: its header and its frames through the readout's continuity checks.
fn raw(args: &Args) -> anyhow::Result<()> {
    use swdaq_readout::raw_inspect;
    let file = std::fs::File::open(&args.file)?;
    let report = raw_inspect::inspect_raw(std::io::BufReader::with_capacity(8 << 20, file))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", raw_inspect::render(&report));
    }
    if let Some(e) = &report.error {
        anyhow::bail!("{}: {e}", args.file.display());
    }
    Ok(())
}

/// An FRD file: every event's CRC32C and FED fragments checked.
fn frd(args: &Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.file)?;
    let detail = args.record.map(u32::try_from).transpose()?;
    let report = swdaq_evb::inspect::inspect(&bytes, detail)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", swdaq_evb::inspect::render(&report));
    }
    anyhow::ensure!(
        report.bad_event_crc == 0 && report.error.is_none(),
        "{}: {} events with a bad CRC32C{}",
        args.file.display(),
        report.bad_event_crc,
        report
            .error
            .as_ref()
            .map_or(String::new(), |e| format!(", {e}"))
    );
    Ok(())
}
