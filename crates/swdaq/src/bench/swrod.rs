use super::print_results;
use serde::Serialize;

/// `swdaq bench swrod`'s arguments (what each measures: `swdaq bench swrod --help`).
#[derive(clap::Args)]
pub struct Args {
    /// E-links of the emulated card (one ROB).
    #[arg(long, default_value_t = 192)]
    pub elinks: u16,
    /// L1 accepts emulated (before timing), decoded once per round and variant.
    #[arg(long, default_value_t = 10_000)]
    pub l1as: usize,
    #[arg(long, default_value_t = 40)]
    pub chunk_bytes: usize,
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
    /// Then replay the card at its real rate (e-links x 100 kHz chunks) for this many
    /// seconds on one core and report lag, CPU use and losses (0: skip).
    #[arg(long, default_value_t = 0.0)]
    pub realtime_seconds: f64,
    /// Events an HLT asks its ROBs for, flat out, in process and over ZeroMQ (the
    /// request path; the card's e-links split over `request_robs` ROBs).
    #[arg(long, default_value_t = 50_000)]
    pub request_events: u64,
    #[arg(long, default_value_t = 4)]
    pub request_robs: usize,
    /// FELIX FULL mode: L1 accepts of 12 links at about 5 KB each (4 KiB blocks, 32-bit
    /// trailers), aggregated on one core against a memcpy of the same blocks (0: skip).
    #[arg(long, default_value_t = 2_000)]
    pub full_mode_l1as: usize,
    /// Phase-2: L1 accepts of 48 FULL-mode links at 40 to 280 bytes each, aggregated on
    /// one core: L1 accepts per second, for sizes mixed and for each size of the SW ROD
    /// paper's plot (40, 80, ... 280 bytes) (0: skip).
    #[arg(long, default_value_t = 20_000)]
    pub phase2_l1as: usize,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        elinks,
        l1as,
        chunk_bytes,
        rounds,
        realtime_seconds,
        request_events,
        request_robs,
        full_mode_l1as,
        phase2_l1as,
    } = bench;
    anyhow::ensure!(
        *elinks > 0 && *l1as > 0 && *rounds > 0 && *realtime_seconds >= 0.0,
        "elinks, l1as and rounds must be at least 1, realtime-seconds not negative"
    );
    anyhow::ensure!(
        *request_robs > 0 && usize::from(*elinks) >= *request_robs && *request_events > 0,
        "request-robs must be 1 to the e-links' number, request-events at least 1"
    );
    let config = swdaq_swrod::bench::BenchConfig {
        elinks: *elinks,
        l1as: *l1as,
        chunk_bytes: *chunk_bytes,
        rounds: *rounds,
    };
    let variants = swdaq_swrod::bench::run(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let network = swdaq_swrod::net::bench::network_intake(&config)
        .map_err(|e| anyhow::anyhow!("FELIX network intake: {e}"))?;
    // A ROB's fragment: its e-links' chunks (the ROD header and status aside).
    let fragment_bytes = usize::from(*elinks) / *request_robs * *chunk_bytes;
    let request_path = swdaq_app::models::swrod::apps::bench::request_path(
        *request_robs,
        *request_events,
        fragment_bytes,
    )
    .map_err(|e| anyhow::anyhow!("request path: {e}"))?;
    use swdaq_swrod::bench::{ModeBenchConfig, PHASE2_MESSAGE_BYTES};
    let modes = [
        ModeBenchConfig::full_mode(*full_mode_l1as, *rounds),
        ModeBenchConfig::phase2(*phase2_l1as, *rounds),
    ]
    .into_iter()
    .chain(
        PHASE2_MESSAGE_BYTES
            .iter()
            .map(|&bytes| ModeBenchConfig::phase2_at(bytes, *phase2_l1as, *rounds)),
    )
    .collect::<Vec<_>>();
    let modes = modes
        .iter()
        .filter(|m| m.l1as > 0)
        .map(swdaq_swrod::bench::mode_run)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("FULL-mode rows: {e}"))?;
    let realtime = if *realtime_seconds > 0.0 {
        Some(
            swdaq_swrod::bench::realtime(&config, *realtime_seconds)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    } else {
        None
    };
    if json {
        #[derive(Serialize)]
        struct Report {
            variants: Vec<swdaq_swrod::bench::VariantResult>,
            network_intake: swdaq_swrod::net::bench::IntakeResult,
            request_path: swdaq_app::models::swrod::apps::bench::RequestPathResult,
            realtime: Option<swdaq_swrod::bench::RealtimeResult>,
            /// FELIX FULL mode and Phase-2 (FULL mode, 48 links of small messages).
            modes: Vec<swdaq_swrod::bench::ModeResult>,
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Report {
                variants,
                network_intake: network,
                request_path,
                realtime,
                modes,
            })?
        );
        return Ok(());
    }
    print_results(
        false,
        &variants,
        &[
            "allocation",
            "ring index",
            "Mchunks/s/core",
            "ns/chunk",
            "cards/core",
            "x pool+pow2",
            "complete/fragments",
        ],
        |r| {
            vec![
                format!("{:?}", r.allocation).to_lowercase(),
                format!("{:?}", r.ring_index).to_lowercase(),
                format!("{:.2}", r.chunks_per_second / 1e6),
                format!("{:.2}", r.ns_per_chunk),
                format!("{:.2}", r.cards_per_core),
                format!("{:.2}", r.vs_pool_power_of_two),
                format!("{}/{}", r.complete_fragments, r.fragments),
            ]
        },
    )?;
    print_results(
        false,
        &[network],
        &[
            "FELIX intake",
            "GB/s/core",
            "cards/core",
            "emulator cards/core",
            "x emulator CPU",
            "server CPU s",
        ],
        |r| {
            vec![
                "TCP, 127.0.0.1".into(),
                format!("{:.2}", r.subscriber_gbytes_per_cpu_s),
                format!("{:.2}", r.subscriber_cards_per_core),
                format!("{:.2}", r.emulator_cards_per_core),
                format!("{:.2}", r.subscriber_vs_emulator),
                format!("{:.2}", r.server_cpu_s),
            ]
        },
    )?;
    print_request_path(&request_path)?;
    if !modes.is_empty() {
        print_results(
            false,
            &modes,
            &[
                "FELIX FULL mode",
                "links x bytes",
                "GB/s/core",
                "memcpy GB/s",
                "x memcpy",
                "L1A/s/core",
                "complete/fragments",
            ],
            |r| {
                vec![
                    r.config.name.into(),
                    match (r.config.chunk_min, r.config.chunk_max) {
                        (min, max) if min == max => format!("{} x {min}", r.config.links),
                        (min, max) => format!("{} x {min}-{max}", r.config.links),
                    },
                    format!("{:.2}", r.gbytes_per_s),
                    format!("{:.2}", r.memcpy_gbytes_per_s),
                    format!("{:.2}", r.vs_memcpy),
                    format!("{:.0}", r.l1as_per_s),
                    format!("{}/{}", r.complete_fragments, r.fragments),
                ]
            },
        )?;
    }
    match realtime {
        Some(r) => print_results(
            false,
            &[r],
            &[
                "real time s",
                "Mchunks/s",
                "complete/fragments",
                "problems",
                "max lag ms",
                "CPU busy",
            ],
            |r| {
                vec![
                    format!("{:.1}", r.seconds),
                    format!("{:.2}", r.chunks_per_second / 1e6),
                    format!("{}/{}", r.complete_fragments, r.fragments),
                    r.problems.to_string(),
                    format!("{:.2}", r.max_lag_ms),
                    format!("{:.2}", r.busy_fraction),
                ]
            },
        ),
        None => Ok(()),
    }
}

/// The HLT's request path, in process and over ZeroMQ, with the ratio.
fn print_request_path(
    r: &swdaq_app::models::swrod::apps::bench::RequestPathResult,
) -> anyhow::Result<()> {
    let robs = r.robs;
    let bytes = r.fragment_bytes;
    let ratio = r.zeromq_vs_in_process;
    let per_cpu = r.zeromq_vs_in_process_per_cpu;
    let in_process = |row: &&swdaq_app::models::swrod::apps::bench::RequestPathRow| {
        row.path == r.in_process.path
    };
    print_results(
        false,
        &[&r.in_process, &r.over_zeromq],
        &[
            "HLT requests",
            "ROBs x bytes",
            "kevents/s",
            "krequests/s",
            "krequests/CPU s",
            "GB/s",
            "complete/events",
            "x in process",
            "x per CPU",
        ],
        |row| {
            vec![
                row.path.to_string(),
                format!("{robs} x {bytes}"),
                format!("{:.1}", row.events_per_s / 1e3),
                format!("{:.1}", row.requests_per_s / 1e3),
                format!("{:.1}", row.requests_per_cpu_s / 1e3),
                format!("{:.2}", row.gbytes_per_s),
                format!("{}/{}", row.complete_events, row.events),
                format!("{:.2}", if in_process(row) { 1.0 } else { ratio }),
                format!("{:.2}", if in_process(row) { 1.0 } else { per_cpu }),
            ]
        },
    )
}
