use super::{print_results, printed_as_json};
use std::time::Duration;

/// `swdaq bench evb`'s arguments (what each measures: `swdaq bench evb --help`).
#[derive(clap::Args)]
pub struct Args {
    /// Events built flat out.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    #[arg(long, default_value_t = 2)]
    pub rus: u16,
    #[arg(long, default_value_t = 4)]
    pub feds_per_ru: u16,
    /// Mean FED fragment size in bytes (spread: an eighth of it).
    #[arg(long, default_value_t = 1024)]
    pub fed_bytes: u32,
    #[arg(long, default_value_t = 2)]
    pub bus: u16,
    /// Trigger rate of the paced run in Hz.
    #[arg(long, default_value_t = 100_000.0)]
    pub rate: f64,
    /// Seconds of the paced run (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub paced_seconds: f64,
    /// Directory for the files (RAM-backed by default); emptied after each run.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Seconds of the run as applications over ZeroMQ loopback, flat out.
    #[arg(long, default_value_t = 10.0)]
    pub zeromq_seconds: f64,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        events,
        rus,
        feds_per_ru,
        fed_bytes,
        bus,
        rate,
        paced_seconds,
        dir,
        zeromq_seconds,
    } = bench;
    anyhow::ensure!(
        *events > 0 && *rus > 0 && *feds_per_ru > 0 && *bus > 0 && *paced_seconds >= 0.0,
        "events, rus, feds-per-ru and bus must be at least 1"
    );
    anyhow::ensure!(*zeromq_seconds > 0.0, "zeromq-seconds must be positive");
    let config = swdaq_evb::EvbConfig {
        rus: (0..*rus)
            .map(|r| {
                swdaq_sim::fed::FedSimConfig::uniform(
                    r * feds_per_ru,
                    *feds_per_ru,
                    *fed_bytes,
                    fed_bytes / 8,
                )
            })
            .collect(),
        builder_units: *bus,
        trigger_rate_hz: *rate,
        ..Default::default()
    };
    let dir = dir
        .clone()
        .unwrap_or_else(|| swdaq_evb::config::default_output().join("bench"));
    let paced = (*paced_seconds > 0.0).then(|| Duration::from_secs_f64(*paced_seconds));
    let exe = swdaq_app::runtime::launch::current_exe()?;
    let all = swdaq_app::models::evb::apps::bench::run(
        &config,
        *events,
        paced,
        &dir,
        &exe,
        *zeromq_seconds,
    )?;
    if printed_as_json(json, &all)? {
        return Ok(());
    }
    let result = &all.one_process;
    let mut rows = result.runs.clone();
    rows.push(all.over_zeromq.clone());
    print_results(
        false,
        &rows,
        &[
            "mode",
            "rate Hz",
            "events",
            "built/s",
            "GB/s",
            "CPU s",
            "built/CPU s",
            "incomplete",
            "lost",
            "throttled",
            "behind ms",
            "p50 us",
            "p99 us",
        ],
        |r| {
            vec![
                r.mode.to_string(),
                r.trigger_rate_hz.map_or("-".into(), |h| format!("{h:.0}")),
                r.events.to_string(),
                format!("{:.0}", r.built_per_second),
                format!("{:.2}", r.written_gbps),
                format!("{:.1}", r.cpu_seconds),
                format!("{:.0}", r.built_per_cpu_second),
                r.incomplete.to_string(),
                r.lost.to_string(),
                r.throttled.to_string(),
                format!("{:.1}", r.max_behind_trigger_ms),
                r.build_time_p50_us.to_string(),
                r.build_time_p99_us.to_string(),
            ]
        },
    )?;
    let t = &result.bare_transport;
    let c = &result.costs;
    println!(
        "bare transport: {:.0} events/s of {} bytes ({:.2} GB/s); event builder / bare = {:.3}",
        t.events_per_second, t.event_bytes, t.gbps, result.evb_vs_bare_transport
    );
    let z = &all.bare_zeromq;
    println!(
        "bare ZeroMQ: {:.0} events/s ({:.2} GB/s); over ZeroMQ / one process = {:.3} (per CPU second {:.3}), over ZeroMQ / bare ZeroMQ = {:.3}; load average {:.2} -> {:.2}",
        z.events_per_second,
        z.gbps,
        all.zeromq_vs_one_process,
        all.zeromq_vs_one_process_per_cpu,
        all.zeromq_vs_bare_zeromq,
        all.load_average.0,
        all.load_average.1
    );
    println!(
        "per fragment: emulation {:.0} ns, RU checks {:.0} ns (CRC-16 {:.2} GB/s); emulated and checked at once: direct {:.0} ns, through the FED links {:.0} ns ({:.3} x direct); per event: build {:.0} ns (CRC32C {:.2} GB/s), write {:.0} ns",
        c.fed_emulation_ns_per_fragment,
        c.ru_check_ns_per_fragment,
        c.crc16_gbps,
        c.direct_ns_per_fragment,
        c.fed_link_ns_per_fragment,
        c.fed_link_vs_direct,
        c.bu_build_ns_per_event,
        c.crc32c_gbps,
        c.write_ns_per_event
    );
    Ok(())
}
