//! `swdaq run` for a configuration with a `[swrod]` section: the ATLAS-style SW ROD in one
//! process. Emulated FELIX cards (one thread each, paced at the L1 accept rate) hand each
//! ROB its e-links' blocks; one SW ROD thread per ROB decodes and aggregates them into ROB
//! fragments and passes them down its consumer chain: the ROB's request server and the
//! monitoring sampler. The HLT asks every ROB's server for each L1 accept, builds the full
//! event (eformat v5) and stores one in `hlt_accept_every` in ATLAS EventStorage files, one
//! sequence of files per luminosity block. A live line per second,
//! Prometheus `/metrics`, and a closing summary that checks the counters against the
//! emulator's truth.

mod config;
mod report;
mod threads;

pub use config::{SwrodRunConfig, SwrodSettings, is_swrod_config, load};
pub use report::{SwrodReport, live_line, summary_json, summary_text};

use crate::run::chain::Monitoring;
use crate::run::stop::StopRequest;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_format::run_files;

/// Runs until the duration, `max_l1as` or a stop request ends it; `on_second` sees the
/// monitoring snapshot once a second.
pub fn run(
    config: &SwrodRunConfig,
    stop: &StopRequest,
    mut on_second: impl FnMut(&swdaq_monitor::Snapshot),
) -> anyhow::Result<SwrodReport> {
    let monitoring =
        Monitoring::with_interval(Duration::from_secs(1), &config.metrics_addr, "metrics_addr")?;
    let started = Instant::now();
    let report = threads::run_threads(config, &monitoring.registry, |progress| {
        let over = config.duration_s > 0.0 && started.elapsed().as_secs_f64() >= config.duration_s;
        if over || stop.is_requested() {
            stop.waiting_for(
                "the cards to send their last L1 accepts and the HLT to finish its events",
            );
            progress.stop();
        }
        if progress.second_passed() {
            on_second(&monitoring.stats.latest());
        }
    })?;
    monitoring.stop();
    Ok(report)
}

/// `swdaq run` with a SW ROD configuration.
pub fn main(path: &Path, duration: Option<f64>, json: bool) -> anyhow::Result<()> {
    let mut config = load(path)?;
    if let Some(d) = duration {
        config.duration_s = d;
    }
    let s = &mut config.swrod;
    s.run_number = run_files::claim_run(&[&s.output_dir], s.run_number, None)?;
    let stop = Arc::new(StopRequest::default());
    crate::run::stop::install(Arc::clone(&stop))?;
    let s = &config.swrod;
    eprintln!(
        "swdaq run {} (SW ROD): {} FELIX cards x {} e-links, {} ROBs per card, {}, {} s{}, storing 1 event in {} to {}",
        s.run_number,
        s.cards,
        s.felix.elinks,
        s.robs_per_card,
        if s.l1a_rate_hz > 0.0 {
            format!("{} Hz L1A", s.l1a_rate_hz)
        } else {
            "L1As as fast as the chain takes them".into()
        },
        config.duration_s,
        if config.duration_s == 0.0 {
            " (until Ctrl-C)"
        } else {
            " (Ctrl-C or SIGTERM ends it early)"
        },
        s.hlt_accept_every,
        s.output_dir.display(),
    );
    let report = run(&config, &stop, |snapshot| {
        if !json {
            eprintln!("{}", live_line(snapshot));
        }
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary_json(&report))?);
    } else {
        print!("{}", summary_text(&report));
    }
    if let Some(e) = &report.storage_error {
        anyhow::bail!("storage failed: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped example, paced and stopped by its duration (the stop path every
    /// interactive run takes), with faults on: truth and counters agree.
    #[test]
    fn shipped_example_config_runs_and_stops_on_time_with_faults_accounted() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/swrod.toml");
        assert!(is_swrod_config(&path).unwrap());
        let mut config = load(&path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        config.swrod.output_dir = dir.path().to_owned();
        config.metrics_addr = "127.0.0.1:0".into();
        config.duration_s = 1.5;
        config.swrod.felix.faults.missing_chunk = 0.001;
        config.swrod.felix.faults.truncated_chunk = 0.001;
        let mut seconds = 0;
        let report = run(&config, &StopRequest::default(), |_| seconds += 1).unwrap();
        assert!(report.truth_ok(), "{}", summary_text(&report));
        assert!(report.cards[0].l1as > 0);
        assert!(report.seconds < 10.0, "the stop took {} s", report.seconds);
        assert_eq!(report.hlt.events, report.cards[0].l1as);
        let text = summary_text(&report);
        assert!(text.contains("overall OK"), "{text}");
        assert_eq!(summary_json(&report)["truth"]["ok"], true);
    }
}
