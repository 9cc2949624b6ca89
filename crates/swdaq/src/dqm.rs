//! `swdaq dqm FILE...`: a run's data-quality histograms computed offline from its files, and
//! each judged against a reference run's set (`--reference`), worst first. `--save` keeps the
//! set to be a later run's reference. The chain's trigger-record HDF5 files, the event
//! builder's FRD files and the SW ROD's EventStorage files.

use crate::table;
use serde_json::json;
use std::path::PathBuf;
use swdaq_dqm::{Check, HistSet, Quality, Test};
use swdaq_format::file_kind::{FileKind, detect_path};

#[derive(clap::Args)]
pub struct Args {
    /// The run's files (the chain's HDF5, the event builder's FRD `.raw`, the SW ROD's
    /// EventStorage `.data`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// A reference run's histogram set (`--save` of an earlier `swdaq dqm`: HDF5 when its
    /// name ends in .h5 or .hdf5, otherwise JSON).
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Write this run's histogram set here, a new file (never replacing one): HDF5 when its
    /// name ends in .h5 or .hdf5 (h5py reads it without swdaq), otherwise JSON.
    #[arg(long)]
    save: Option<PathBuf>,
    /// The comparison: `chi2` or `kolmogorov`.
    #[arg(long, default_value = "chi2", value_parser = parse_test)]
    test: Test,
    /// Below this probability a histogram is Bad.
    #[arg(long, default_value_t = Check::default().min_probability)]
    min_probability: f64,
    /// Fewer entries than this (run or reference): Undetermined.
    #[arg(long, default_value_t = Check::default().min_entries)]
    min_entries: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_test(text: &str) -> Result<Test, String> {
    match text {
        "chi2" => Ok(Test::Chi2),
        "kolmogorov" => Ok(Test::Kolmogorov),
        other => Err(format!("{other:?}: the tests are chi2 and kolmogorov")),
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.min_probability),
        "--min-probability {} is not a probability",
        args.min_probability
    );
    let mut set = HistSet::new();
    let mut files = Vec::new();
    for path in &args.files {
        let named = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", path.display());
        let kind = detect_path(path).map_err(|e| named(&e))?.kind;
        let bytes = if kind == FileKind::Hdf5 {
            Vec::new()
        } else {
            std::fs::read(path).map_err(|e| named(&e))?
        };
        let (events, problems) = match kind {
            FileKind::Frd => {
                let read = swdaq_dqm::frd::fill(&mut set, &bytes).map_err(|e| named(&e))?;
                (read.events, read.problem.into_iter().collect())
            }
            FileKind::Hdf5 => {
                let (records, problems) = fill_from_records(&mut set, path)?;
                (records, problems)
            }
            FileKind::EventStorage => {
                let read = swdaq_dqm::swrod::fill(&mut set, &bytes).map_err(|e| named(&e))?;
                (read.events, read.problems)
            }
            other => anyhow::bail!(
                "{}: {other:?}: swdaq dqm reads trigger-record HDF5, FRD and EventStorage files",
                path.display()
            ),
        };
        files.push(json!({"path": path, "events": events, "problems": problems}));
    }
    if let Some(save) = &args.save {
        if is_hdf5(save) {
            swdaq_dqm::hdf5_file::save(&set, save, None).map_err(anyhow::Error::msg)?;
        } else {
            set.save(save)?;
        }
    }
    let check = Check {
        test: args.test,
        min_probability: args.min_probability,
        min_entries: args.min_entries,
    };
    let verdicts = match &args.reference {
        Some(reference) => {
            let reference = if is_hdf5(reference) {
                swdaq_dqm::hdf5_file::load(reference).map_err(anyhow::Error::msg)?
            } else {
                HistSet::load(reference)?
            };
            Some(set.judge(&reference, &check.into()))
        }
        None => None,
    };
    if args.json {
        let histograms: Vec<_> = set
            .histograms
            .values()
            .map(|h| {
                let (mean, rms) = h.mean_and_rms().unzip();
                json!({"name": h.name, "title": h.title, "entries": h.entries(), "mean": mean,
                       "rms": rms, "unit": h.axis.unit})
            })
            .collect();
        let out = json!({"files": files, "histograms": histograms, "check": check,
                         "verdicts": verdicts.as_ref().map(|v| v.iter()
                             .map(|(name, v)| json!({"name": name, "verdict": v}))
                             .collect::<Vec<_>>())});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = match &verdicts {
        Some(verdicts) => verdicts
            .iter()
            .map(|(name, v)| {
                let h = &set.histograms[name];
                vec![
                    format!("{:?}", v.quality),
                    name.clone(),
                    h.entries().to_string(),
                    v.why.clone(),
                ]
            })
            .collect(),
        None => set
            .histograms
            .values()
            .map(|h| {
                let (mean, rms) = h.mean_and_rms().unwrap_or((f64::NAN, f64::NAN));
                vec![
                    "-".into(),
                    h.name.clone(),
                    h.entries().to_string(),
                    format!("mean {mean:.1} {}, rms {rms:.1}", h.axis.unit),
                ]
            })
            .collect(),
    };
    print!(
        "{}",
        table::render(&["quality", "histogram", "entries", "what"], &rows)
    );
    if let Some(verdicts) = &verdicts {
        let bad = verdicts
            .iter()
            .filter(|(_, v)| v.quality == Quality::Bad)
            .count();
        println!(
            "{bad} of {} histograms Bad against the reference",
            verdicts.len()
        );
    }
    Ok(())
}

/// The chain's histograms from an HDF5 file's trigger records; a record or fragment that
/// cannot be read is named and the rest still read.
fn fill_from_records(
    set: &mut HistSet,
    path: &std::path::Path,
) -> anyhow::Result<(u64, Vec<String>)> {
    let reader = swdaq_store::reader::RecordFileReader::open(path)?;
    let (mut records, mut problems) = (0, Vec::new());
    for id in reader.record_ids()? {
        match reader.read_record_skipping_bad(&id) {
            Ok((record, bad)) => {
                records += 1;
                problems.extend(
                    bad.into_iter()
                        .map(|b| format!("{}: {}", b.dataset, b.reason)),
                );
                problems.extend(swdaq_dqm::chain::fill_record(set, &record));
            }
            Err(e) => problems.push(format!("{id:?}: {e}")),
        }
    }
    Ok((records, problems))
}

/// Whether a histogram set's file is HDF5 (by its name) rather than JSON.
fn is_hdf5(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e == "h5" || e == "hdf5")
}
