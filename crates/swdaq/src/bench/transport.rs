use super::print_results;

/// `swdaq bench transport`'s arguments (what each measures: `swdaq bench transport --help`).
#[derive(clap::Args)]
pub struct Args {
    /// MiB moved per measurement and size.
    #[arg(long, default_value_t = 512)]
    pub mib_per_round: usize,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        mib_per_round,
        rounds,
    } = bench;
    anyhow::ensure!(
        *mib_per_round > 0 && *rounds > 0,
        "mib-per-round and rounds must be at least 1"
    );
    let results = swdaq_net::bench::run(&swdaq_net::bench::TransportBenchConfig {
        bytes_per_round: mib_per_round << 20,
        rounds: *rounds,
        ..Default::default()
    })?;
    print_results(
        json,
        &results,
        &[
            "fragment bytes",
            "swdaq msg/s",
            "swdaq GB/s",
            "bare ZeroMQ msg/s",
            "bare GB/s",
            "ratio",
        ],
        |r| {
            vec![
                r.fragment_bytes.to_string(),
                format!("{:.0}", r.swdaq_messages_per_s),
                format!("{:.2}", r.swdaq_gb_per_s),
                format!("{:.0}", r.bare_zmq_messages_per_s),
                format!("{:.2}", r.bare_zmq_gb_per_s),
                format!("{:.2}", r.ratio),
            ]
        },
    )
}
