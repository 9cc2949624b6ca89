use super::{print_results, printed_as_json};

/// `swdaq bench evb-udp`'s arguments (what each measures: `swdaq bench evb-udp --help`).
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    #[arg(long, default_value_t = 4)]
    pub feds: u16,
    /// Mean FED fragment size in bytes (spread: an eighth of it).
    #[arg(long, default_value_t = 1024)]
    pub fed_bytes: u32,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        events,
        feds,
        fed_bytes,
    } = bench;
    anyhow::ensure!(
        *events > 0 && *feds > 0,
        "events and feds must be at least 1"
    );
    let batches = [
        1,
        8,
        swdaq_readout::udp::DEFAULT_BATCH,
        swdaq_readout::udp::MAX_BATCH,
    ];
    let result = swdaq_evb::bench_udp::udp_intake(*feds, *fed_bytes, *events, &batches)?;
    if printed_as_json(json, &result)? {
        return Ok(());
    }
    print_results(
        false,
        &result.rows,
        &[
            "batch",
            "fragments",
            "ns/fragment",
            "fragments/s per core",
            "GB/s per core",
            "kernel dropped",
            "bad",
        ],
        |r| {
            vec![
                r.batch.to_string(),
                r.fragments.to_string(),
                format!("{:.0}", r.ns_per_fragment),
                format!("{:.0}", r.fragments_per_core_second),
                format!("{:.2}", r.gbps_per_core),
                r.kernel_dropped.to_string(),
                r.bad_fragments.to_string(),
            ]
        },
    )?;
    let tcp = &result.tcp;
    println!(
        "TCP (FEROL streams, {} FEDs each): {} fragments, {:.0} ns/fragment, {:.0} fragments/s per core, {:.2} GB/s per core, {} bad, {} corrupt; TCP / UDP (batch {}): {:.2}x",
        tcp.feds_per_stream,
        tcp.fragments,
        tcp.ns_per_fragment,
        tcp.fragments_per_core_second,
        tcp.gbps_per_core,
        tcp.bad_fragments,
        tcp.corrupt,
        swdaq_readout::udp::DEFAULT_BATCH,
        result.tcp_over_udp
    );
    println!(
        "{} FEDs of {} bytes; largest batch / one at a time: {:.2}x; load average {:.2}",
        result.feds, result.fed_bytes, result.batched_speedup, result.load_average
    );
    Ok(())
}
