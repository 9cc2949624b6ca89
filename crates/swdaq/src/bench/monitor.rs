use super::print_results;
use std::time::Duration;

/// `swdaq bench monitor`'s arguments (what each measures: `swdaq bench monitor --help`).
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Milliseconds per trial.
    #[arg(long, default_value_t = 500)]
    pub trial_ms: u64,
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        threads,
        trial_ms,
        rounds,
    } = bench;
    anyhow::ensure!(
        *threads >= 1 && *rounds >= 1 && *trial_ms >= 1,
        "threads, rounds and trial-ms must be at least 1"
    );
    let config = swdaq_monitor::bench::BenchConfig {
        threads: *threads,
        trial: Duration::from_millis(*trial_ms),
        rounds: *rounds,
        ..Default::default()
    };
    let results = swdaq_monitor::bench::run(&config);
    print_results(
        json,
        &results,
        &["variant", "threads", "Mmsg/s", "overhead %", "counts exact"],
        |r| {
            vec![
                format!("{:?}", r.variant),
                r.threads.to_string(),
                format!("{:.2}", r.messages_per_second / 1e6),
                format!("{:.1}", r.overhead_pct),
                r.counts_exact.to_string(),
            ]
        },
    )
}
