use super::{print_results, printed_as_json};

/// `swdaq bench plugin`'s arguments (what each measures: `swdaq bench plugin --help`).
#[derive(clap::Args)]
pub struct Args {
    /// The FED decoder plugin's shared library.
    #[arg(long)]
    pub plugin: std::path::PathBuf,
    /// Events decoded per round and path.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    #[arg(long, default_value_t = 8)]
    pub feds: u16,
    /// Mean FED fragment size in bytes (spread: an eighth of it).
    #[arg(long, default_value_t = 1024)]
    pub fed_bytes: u32,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        plugin,
        events,
        feds,
        fed_bytes,
    } = bench;
    anyhow::ensure!(
        *events > 0 && *feds > 0 && *fed_bytes >= 16,
        "events and feds must be at least 1, fed-bytes at least 16"
    );
    let result = swdaq_evb::bench_plugin::decode_cost(plugin, *feds, *fed_bytes, *events)
        .map_err(|e| anyhow::anyhow!("bench plugin: {e}"))?;
    if printed_as_json(json, &result)? {
        return Ok(());
    }
    print_results(
        false,
        &result.rows,
        &[
            "path",
            "events",
            "fragments",
            "ns/event",
            "events/s per core",
            "GB/s per core",
        ],
        |r| {
            vec![
                r.path.clone(),
                r.events.to_string(),
                r.fragments.to_string(),
                format!("{:.0}", r.ns_per_event),
                format!("{:.0}", r.events_per_core_second),
                format!("{:.2}", r.gbps_per_core),
            ]
        },
    )?;
    println!(
        "{} FEDs of {} bytes; plugin / built-in events/s per core: {:.2}x; load average {:.2}",
        result.feds, result.fed_bytes, result.plugin_over_built_in, result.load_average
    );
    Ok(())
}
