//! `swdaq tpg-quality`: hit-finding quality against the emulator's truth — efficiency versus
//! true peak / noise, fake-hit rate, time and charge resolution — over a threshold scan of
//! one algorithm. The scan and its scoring are `swdaq_tpg::quality`'s; this is its arguments
//! and printing.

use crate::table;
use swdaq_sim::SimConfig;
use swdaq_tpg::quality::{BINS, Scanned, scan};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of emulated data per threshold.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// The hit-finding algorithm whose threshold is scanned (its other settings: defaults).
    #[arg(long, value_enum, default_value_t = Algorithm::Threshold)]
    algorithm: Algorithm,
    /// Thresholds to scan, in the algorithm's unit (threshold: ADC over pedestal;
    /// protodune: sigmas of the filtered noise; abs-running-sum: running-sum counts).
    #[arg(long, value_delimiter = ',')]
    thresholds: Option<Vec<f64>>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Where to write the PNG plot of efficiency and fake rate (default:
    /// tpg-quality-<algorithm>.png in the current directory).
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

/// `--algorithm`: the algorithm a scan varies the threshold of ([`Scanned`], as clap spells
/// it; its other settings are the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Algorithm {
    Threshold,
    Protodune,
    AbsRunningSum,
}

impl From<Algorithm> for Scanned {
    fn from(a: Algorithm) -> Self {
        match a {
            Algorithm::Threshold => Self::Threshold,
            Algorithm::Protodune => Self::Protodune,
            Algorithm::AbsRunningSum => Self::AbsRunningSum,
        }
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds > 0.0, "--seconds must be positive");
    let scanned = Scanned::from(args.algorithm);
    let thresholds = args
        .thresholds
        .clone()
        .unwrap_or_else(|| scanned.default_thresholds());
    let rows = scan(&SimConfig::default(), args.seconds, scanned, &thresholds)?;
    let algorithm = rows.first().map_or("none", |r| r.algorithm);
    let plot = args
        .plot
        .clone()
        .unwrap_or_else(|| format!("tpg-quality-{algorithm}.png").into());
    let title = format!(
        "{algorithm} hit finding on emulated {:?} channels vs truth ({} s per threshold)",
        scanned.plane(),
        args.seconds
    );
    crate::quality_plot::write(&plot, &rows, &title)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    eprintln!("wrote {}", plot.display());
    let header: Vec<String> = [
        "threshold",
        "sigma",
        "eff >=5s",
        "fake Hz/ch",
        "dt bias",
        "dt rms",
        "Q ratio",
        "Q rms",
    ]
    .into_iter()
    .map(String::from)
    .chain(BINS.iter().map(|(lo, hi)| {
        if hi.is_finite() {
            format!("eff {lo}-{hi}s")
        } else {
            format!("eff >{lo}s")
        }
    }))
    .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut v = vec![
                r.threshold.to_string(),
                format!("{:.1}", r.threshold_sigma),
                format!("{:.3}", r.efficiency_5_sigma),
                format!("{:.1}", r.fake_rate_hz_per_channel),
                format!("{:.0}", r.time_bias_ticks),
                format!("{:.0}", r.time_rms_ticks),
                format!("{:.2}", r.charge_ratio_mean),
                format!("{:.2}", r.charge_ratio_rms),
            ];
            v.extend(r.efficiency_by_peak_sigma.iter().map(|e| format!("{e:.3}")));
            v
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    println!(
        "{} algorithm on emulated {:?} channels (link {}, default emulator), {} s",
        rows.first().map_or("no", |r| r.algorithm),
        scanned.plane(),
        scanned.link(),
        args.seconds
    );
    print!("{}", table::render(&header, &cells));
    Ok(())
}
