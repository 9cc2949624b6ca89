//! `swdaq bench`: the benchmarks behind every performance figure in BENCHMARKS.md. Each
//! subcommand measures its stage and, where a ratio is claimed, its reference in the same run.

use crate::{hwbench, table};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use swdaq_format::FrameFormat;
use swdaq_readout::replay::ReplayTemplate;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum What {
    /// Monitoring cost: routing threads with statistics off, swdaq's per-thread blocks, and
    /// the paper's slow designs (shared atomics, a queue), in the same run.
    Monitor {
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Milliseconds per trial.
        #[arg(long, default_value_t = 500)]
        trial_ms: u64,
        #[arg(long, default_value_t = 7)]
        rounds: usize,
    },
    /// Hit finding on emulated data: ns per channel-sample per algorithm (`threshold`,
    /// `protodune`, `abs-running-sum`), frame format (WIBEth, ProtoDUNE WIB) and
    /// implementation, AVX2 against the scalar reference in the same run.
    Tpg {
        /// Emulated WIBEth frames (replayed `passes` times); ProtoDUNE WIB gets as many
        /// channel-samples.
        #[arg(long, default_value_t = 2000)]
        frames: u64,
        #[arg(long, default_value_t = 5)]
        passes: usize,
        /// `threshold`'s threshold in ADC counts over the pedestal.
        #[arg(long, default_value_t = 20)]
        threshold: i16,
    },
    /// Transport: fragments of 4 KiB, 64 KiB and 1 MiB through swdaq's ZeroMQ transport
    /// against bare ZeroMQ PUSH/PULL over TCP loopback, same run.
    Transport {
        /// MiB moved per measurement and size.
        #[arg(long, default_value_t = 512)]
        mib_per_round: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Storage: HDF5 record writing, closed-only, crash-safe and crash-safe synced to the
    /// device, against plain write(2) of the same bytes, same run.
    Store {
        /// Directory to write into (RAM-backed by default).
        #[arg(long, default_value = "/dev/shm")]
        dir: std::path::PathBuf,
        #[arg(long, default_value_t = 200)]
        records: u64,
        #[arg(long, default_value_t = 8)]
        fragments: usize,
        /// Bytes per fragment payload.
        #[arg(long, default_value_t = 1 << 20)]
        fragment_bytes: usize,
        /// Crash-safe run: flush at most this long after a record (0: no time bound)...
        #[arg(long, default_value_t = swdaq_store::StoreConfig::default().flush_interval_ms)]
        flush_interval_ms: u64,
        /// ... or every this many records (0: no count bound).
        #[arg(long, default_value_t = swdaq_store::StoreConfig::default().flush_every_records)]
        flush_every_records: u64,
    },
    /// SW ROD: FELIX block decoding and aggregation into ROB fragments with all checks, one
    /// core, with the paper's ablation in the same run (memory pool vs an allocation per
    /// fragment, power-of-two ring index vs modulo).
    Swrod {
        /// E-links of the emulated card (one ROB).
        #[arg(long, default_value_t = 192)]
        elinks: u16,
        /// L1 accepts emulated (before timing), decoded once per round and variant.
        #[arg(long, default_value_t = 10_000)]
        l1as: usize,
        #[arg(long, default_value_t = 40)]
        chunk_bytes: usize,
        #[arg(long, default_value_t = 7)]
        rounds: usize,
        /// Then replay the card at its real rate (e-links x 100 kHz chunks) for this many
        /// seconds on one core and report lag, CPU use and losses (0: skip).
        #[arg(long, default_value_t = 0.0)]
        realtime_seconds: f64,
        /// Events an HLT asks its ROBs for, flat out, in process and over ZeroMQ (the
        /// request path; the card's e-links split over `request_robs` ROBs).
        #[arg(long, default_value_t = 50_000)]
        request_events: u64,
        #[arg(long, default_value_t = 4)]
        request_robs: usize,
        /// FELIX FULL mode: L1 accepts of 12 links at about 5 KB each (4 KiB blocks, 32-bit
        /// trailers), aggregated on one core against a memcpy of the same blocks (0: skip).
        #[arg(long, default_value_t = 2_000)]
        full_mode_l1as: usize,
        /// Phase-2: L1 accepts of 48 FULL-mode links at 40 to 280 bytes each, aggregated on
        /// one core: L1 accepts per second (0: skip).
        #[arg(long, default_value_t = 20_000)]
        phase2_l1as: usize,
    },
    /// Readout: ingest into the latency buffer with all checks (vs memcpy, same run), UDP
    /// receive over loopback (batched vs one `recvmsg` per datagram, same run), and data
    /// requests served while ingesting in real time: bare, then on emulated data with hit
    /// finding answered with whole windows and in regions of interest (ROI readout).
    Readout {
        /// Frames to ingest flat out.
        #[arg(long, default_value_t = 300_000)]
        frames: u64,
        /// Datagrams per UDP measurement.
        #[arg(long, default_value_t = 200_000)]
        udp_datagrams: u64,
        /// Datagrams sent before each receive phase (they must fit the socket buffer).
        #[arg(long, default_value_t = 512)]
        udp_burst: u64,
        /// Seconds of real-time ingest with requests.
        #[arg(long, default_value_t = 10.0)]
        request_seconds: f64,
        #[arg(long, default_value_t = 1000.0)]
        request_rate_hz: f64,
        /// Request window in milliseconds.
        #[arg(long, default_value_t = 5.0)]
        window_ms: f64,
    },
    /// CMS-style event builder in one process: built events/s and GB/s flat out (and paced
    /// at a trigger rate), then as applications over ZeroMQ loopback flat out, against the
    /// bare in-process transport and bare ZeroMQ in the same run, with per-fragment and
    /// per-event costs.
    Evb {
        /// Events built flat out.
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 2)]
        rus: u16,
        #[arg(long, default_value_t = 4)]
        feds_per_ru: u16,
        /// Mean FED fragment size in bytes (spread: an eighth of it).
        #[arg(long, default_value_t = 1024)]
        fed_bytes: u32,
        #[arg(long, default_value_t = 2)]
        bus: u16,
        /// Trigger rate of the paced run in Hz.
        #[arg(long, default_value_t = 100_000.0)]
        rate: f64,
        /// Seconds of the paced run (0: none).
        #[arg(long, default_value_t = 10.0)]
        paced_seconds: f64,
        /// Directory for the files (RAM-backed by default); emptied after each run.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Seconds of the run as applications over ZeroMQ loopback, flat out.
        #[arg(long, default_value_t = 10.0)]
        zeromq_seconds: f64,
    },
    /// What the plugin interface costs: one event's FED data decoded into fragments by
    /// swdaq's own walk and by a C plugin doing the same checks
    /// (`examples/plugins/fed_decoder.c`), alternated in the same run, events/s per core.
    Plugin {
        /// The FED decoder plugin's shared library.
        #[arg(long)]
        plugin: std::path::PathBuf,
        /// Events decoded per round and path.
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        #[arg(long, default_value_t = 8)]
        feds: u16,
        /// Mean FED fragment size in bytes (spread: an eighth of it).
        #[arg(long, default_value_t = 1024)]
        fed_bytes: u32,
    },
    /// One readout unit's FED links taking fragments over UDP loopback on one core, one
    /// `recvmsg` per datagram against `recvmmsg` batches, and the same FEDs as FEROL streams
    /// over TCP loopback (two FEDs per stream), in the same run.
    EvbUdp {
        #[arg(long, default_value_t = 100_000)]
        events: u64,
        #[arg(long, default_value_t = 4)]
        feds: u16,
        /// Mean FED fragment size in bytes (spread: an eighth of it).
        #[arg(long, default_value_t = 1024)]
        fed_bytes: u32,
    },
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.what {
        What::Monitor {
            threads,
            trial_ms,
            rounds,
        } => {
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
                args.json,
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
        What::Tpg {
            frames,
            passes,
            threshold,
        } => {
            anyhow::ensure!(
                *frames > 0 && *passes > 0,
                "frames and passes must be at least 1"
            );
            let config = swdaq_tpg::ThresholdConfig {
                threshold: *threshold,
                ..Default::default()
            };
            config.validate()?;
            let wibeth = emulated(FrameFormat::WibEth, *frames);
            let protowib = emulated(FrameFormat::ProtoWib, *frames * 16);
            let links = [
                (FrameFormat::WibEth, &wibeth),
                (FrameFormat::ProtoWib, &protowib),
            ]
            .map(|(format, bytes)| swdaq_tpg::bench::LinkFrames { format, bytes });
            let results = swdaq_tpg::bench::run(&links, config, *passes);
            print_results(
                args.json,
                &results,
                &[
                    "algorithm",
                    "format",
                    "implementation",
                    "ns/ch-sample",
                    "channels/core",
                    "links/core",
                    "x scalar",
                    "TPs",
                ],
                |r| {
                    vec![
                        r.algorithm.to_string(),
                        r.format.to_string(),
                        format!("{:?}", r.implementation).to_lowercase(),
                        format!("{:.3}", r.ns_per_channel_sample),
                        format!("{:.0}", r.channels_per_core_realtime),
                        format!("{:.1}", r.links_per_core_realtime),
                        format!("{:.2}", r.speedup_vs_scalar),
                        r.tps.to_string(),
                    ]
                },
            )
        }
        What::Transport {
            mib_per_round,
            rounds,
        } => {
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
                args.json,
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
        What::Store {
            dir,
            records,
            fragments,
            fragment_bytes,
            flush_interval_ms,
            flush_every_records,
        } => {
            anyhow::ensure!(
                *records > 0 && *fragments > 0,
                "records and fragments must be at least 1"
            );
            let result = swdaq_store::bench::run(
                dir,
                *records,
                *fragments,
                *fragment_bytes,
                (*flush_interval_ms, *flush_every_records),
            )?;
            print_results(
                args.json,
                std::slice::from_ref(&result),
                &[
                    "records",
                    "fragments x bytes",
                    "HDF5 GB/s",
                    "crash-safe GB/s",
                    "synced GB/s",
                    "flush every",
                    "write(2) GB/s",
                    "HDF5 / write(2)",
                    "crash-safe / HDF5",
                    "synced / crash-safe",
                ],
                |r| {
                    vec![
                        r.records.to_string(),
                        format!("{} x {}", r.fragments_per_record, r.fragment_bytes),
                        format!("{:.2}", r.hdf5_gbps),
                        format!("{:.2}", r.hdf5_crash_safe_gbps),
                        format!("{:.2}", r.hdf5_synced_gbps),
                        format!(
                            "{} records / {} ms",
                            r.flush_every_records, r.flush_interval_ms
                        ),
                        format!("{:.2}", r.raw_write_gbps),
                        format!("{:.2}", r.hdf5_vs_raw),
                        format!("{:.2}", r.crash_safe_vs_hdf5),
                        format!("{:.2}", r.synced_vs_crash_safe),
                    ]
                },
            )
        }
        What::Swrod {
            elinks,
            l1as,
            chunk_bytes,
            rounds,
            realtime_seconds,
            request_events,
            request_robs,
            full_mode_l1as,
            phase2_l1as,
        } => {
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
            let modes = [
                swdaq_swrod::bench::ModeBenchConfig::full_mode(*full_mode_l1as, *rounds),
                swdaq_swrod::bench::ModeBenchConfig::phase2(*phase2_l1as, *rounds),
            ]
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
            if args.json {
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
                            format!(
                                "{} x {}-{}",
                                r.config.links, r.config.chunk_min, r.config.chunk_max
                            ),
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
        What::Readout {
            frames,
            udp_datagrams,
            udp_burst,
            request_seconds,
            request_rate_hz,
            window_ms,
        } => {
            anyhow::ensure!(
                *frames > 0
                    && *udp_datagrams > 0
                    && *udp_burst > 0
                    && *request_seconds > 0.0
                    && *request_rate_hz > 0.0
                    && *window_ms > 0.0,
                "all readout bench parameters must be positive"
            );
            let udp = UdpParams {
                datagrams: *udp_datagrams,
                burst: *udp_burst,
            };
            let result = readout(*frames, udp, *request_seconds, *request_rate_hz, *window_ms)?;
            print_results(
                args.json,
                std::slice::from_ref(&result),
                &[
                    "ingest GB/s",
                    "memcpy GB/s",
                    "ratio",
                    "cached GB/s",
                    "frame copy GB/s",
                    "ratio",
                    "streamed copy GB/s",
                    "fence/frame GB/s",
                    "links/core w/ TPG",
                    "UDP Mdgram/s",
                    "UDP GB/s",
                    "x recvmsg",
                    "drops",
                    "req/s",
                    "p50 us",
                    "p99 us",
                    "w/ TPs p50/p99 us",
                    "ROI p50/p99 us",
                    "ROI bytes %",
                ],
                |r| {
                    vec![
                        format!("{:.2}", r.ingest_gbps),
                        format!("{:.2}", r.memcpy_gbps),
                        format!("{:.2}", r.ingest_vs_memcpy),
                        format!("{:.2}", r.ingest_cached_gbps),
                        format!("{:.2}", r.frame_copy_gbps),
                        format!("{:.2}", r.ingest_vs_frame_copy),
                        format!("{:.2}", r.frame_copy_streaming_gbps),
                        format!("{:.2}", r.frame_copy_fence_per_frame_gbps),
                        format!("{:.1}", r.links_per_core_with_tpg),
                        format!("{:.3}", r.udp.receive.datagrams_per_second / 1e6),
                        format!("{:.2}", r.udp.receive.gbps),
                        format!("{:.2}", r.udp.batched_vs_per_datagram),
                        r.drops.to_string(),
                        format!("{:.0}", r.request_rate_hz),
                        format!("{:.0}", r.request_latency_p50_us),
                        format!("{:.0}", r.request_latency_p99_us),
                        format!(
                            "{:.0}/{:.0}",
                            r.requests_with_tps.latency_p50_us, r.requests_with_tps.latency_p99_us
                        ),
                        format!(
                            "{:.0}/{:.0}",
                            r.requests_roi.latency_p50_us, r.requests_roi.latency_p99_us
                        ),
                        r.requests_roi
                            .roi_bytes_ratio
                            .map_or("-".into(), |x| format!("{:.2}", 100.0 * x)),
                    ]
                },
            )
        }
        What::Plugin {
            plugin,
            events,
            feds,
            fed_bytes,
        } => {
            anyhow::ensure!(
                *events > 0 && *feds > 0 && *fed_bytes >= 16,
                "events and feds must be at least 1, fed-bytes at least 16"
            );
            let result = swdaq_evb::bench_plugin::decode_cost(plugin, *feds, *fed_bytes, *events)
                .map_err(|e| anyhow::anyhow!("bench plugin: {e}"))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
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
        What::EvbUdp {
            events,
            feds,
            fed_bytes,
        } => {
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
            if args.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
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
        What::Evb {
            events,
            rus,
            feds_per_ru,
            fed_bytes,
            bus,
            rate,
            paced_seconds,
            dir,
            zeromq_seconds,
        } => {
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
            if args.json {
                println!("{}", serde_json::to_string_pretty(&all)?);
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
                    "w/ TPs p50/p99 us",
                    "ROI p50/p99 us",
                    "ROI bytes %",
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

fn print_results<T: Serialize>(
    json: bool,
    results: &[T],
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(results)?);
    } else {
        print!(
            "{}",
            table::render(header, &results.iter().map(row).collect::<Vec<_>>())
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct ReadoutResult {
    format: &'static str,
    /// Ingest with all checks, frames landed by streaming stores as a card's DMA writes them.
    ingest_gbps: f64,
    ingest_frames_per_second: f64,
    /// Single-core memcpy bandwidth measured in this run (the reference for ingest).
    memcpy_gbps: f64,
    ingest_vs_memcpy: f64,
    /// Ingest when the source writes frames through this core's cache (ordinary stores).
    ingest_cached_gbps: f64,
    /// The frame-by-frame copy alone (7200-byte `copy_from_slice` into a ring), same run.
    frame_copy_gbps: f64,
    ingest_vs_frame_copy: f64,
    /// The same copy with streaming stores, fenced once per batch as the source does.
    frame_copy_streaming_gbps: f64,
    /// Streaming stores fenced after every frame (the source's first design), same run.
    frame_copy_fence_per_frame_gbps: f64,
    /// Ingest with `threshold` hit finding (AVX2 where available) on emulated data, frames
    /// landed by streaming stores as DMA would: the hit finder reads them from memory.
    ingest_with_tpg_frames_per_second: f64,
    /// WIBEth links (30.5 kHz of frames each) one core ingests with hit finding.
    links_per_core_with_tpg: f64,
    tps_found: u64,
    udp: UdpSummary,
    /// Frames not buffered during ingest and during the request test.
    drops: u64,
    request_rate_hz: f64,
    requests: u64,
    requests_complete: u64,
    request_latency_p50_us: f64,
    request_latency_p99_us: f64,
    /// The same requests on emulated data with hit finding in ingest, answered with the whole
    /// windows and then in regions of interest (ROI readout), one after the other.
    requests_with_tps: swdaq_readout::bench::RequestResult,
    requests_roi: swdaq_readout::bench::RequestResult,
    /// ROI p50 latency over the whole-window p50, both with hit finding, same run.
    roi_vs_whole_p50: f64,
}

/// UDP receive over loopback, one core.
#[derive(Serialize)]
struct UdpSummary {
    /// Batched receive (`recvmmsg`, the source's default batch).
    receive: swdaq_readout::bench::UdpReceiveResult,
    /// The baseline: one `recvmsg` per datagram, same run.
    receive_per_datagram: swdaq_readout::bench::UdpReceiveResult,
    batched_vs_per_datagram: f64,
    /// Sender and receiver on separate threads at once, batched receive.
    stream: swdaq_readout::bench::UdpStreamResult,
}

#[derive(Clone, Copy)]
struct UdpParams {
    datagrams: u64,
    burst: u64,
}

fn udp_loopback(template: &Arc<ReplayTemplate>, p: UdpParams) -> anyhow::Result<UdpSummary> {
    use swdaq_readout::bench::{udp_receive, udp_stream};
    use swdaq_readout::udp::DEFAULT_BATCH;
    let receive = udp_receive(template.clone(), p.datagrams, DEFAULT_BATCH, p.burst)?;
    let per_datagram = udp_receive(template.clone(), p.datagrams, 1, p.burst)?;
    anyhow::ensure!(
        receive.lost + per_datagram.lost == 0,
        "{} of {} loopback datagrams were lost: --udp-burst {} overflows this host's socket \
         buffer (net.core.rmem_max); use a smaller burst",
        receive.lost + per_datagram.lost,
        2 * p.datagrams,
        p.burst
    );
    Ok(UdpSummary {
        batched_vs_per_datagram: receive.datagrams_per_second / per_datagram.datagrams_per_second,
        stream: udp_stream(template.clone(), p.datagrams, DEFAULT_BATCH)?,
        receive,
        receive_per_datagram: per_datagram,
    })
}

fn readout(
    frames: u64,
    udp: UdpParams,
    request_seconds: f64,
    request_rate_hz: f64,
    window_ms: f64,
) -> anyhow::Result<ReadoutResult> {
    let template = Arc::new(wibeth_template(4096));
    let memcpy = hwbench::memcpy(256 << 20, 5);
    use swdaq_readout::bench::{Landing, frame_copy_gbps};
    let frame_copy = frame_copy_gbps(&template, frames, 1.0, Landing::Ordinary)?;
    let streamed =
        |fence_every| frame_copy_gbps(&template, frames, 1.0, Landing::Streaming { fence_every });
    let frame_copy_streaming = streamed(swdaq_readout::replay::BATCH as u64)?;
    let frame_copy_fence_per_frame = streamed(1)?;
    // Frames land the way a card's DMA writes them (streaming stores), and, for comparison,
    // through this core's cache (ordinary stores).
    let (ingest, ()) = swdaq_readout::bench::ingest(template.clone(), frames, 1.0, true, ())?;
    let (cached, ()) = swdaq_readout::bench::ingest(template.clone(), frames, 1.0, false, ())?;
    let emulated = emulated(FrameFormat::WibEth, 4096);
    let emulated = Arc::new(ReplayTemplate::new(
        FrameFormat::WibEth,
        emulated.chunks_exact(swdaq_format::wibeth::FRAME_SIZE),
    ));
    let finder = swdaq_tpg::HitFinder::new(
        swdaq_tpg::ThresholdConfig::default(),
        (0..64).collect(),
        swdaq_format::wibeth::TICKS_PER_SAMPLE,
        swdaq_format::DETECTOR_ID_HD_TPC as u8,
        swdaq_tpg::Implementation::best(),
    )?;
    let observer = swdaq_readout::hit_finding::HitFindingObserver::new(finder, FrameFormat::WibEth);
    let (with_tpg, mut observer) =
        swdaq_readout::bench::ingest(emulated.clone(), frames, 1.0, true, observer)?;
    observer.finish();
    let mut tps = Vec::new();
    observer.take_tps(&mut tps);
    let udp = udp_loopback(&template, udp)?;
    let window_ticks = (window_ms * 62_500.0) as u64;
    let requests = swdaq_readout::bench::requests(
        template,
        request_seconds,
        request_rate_hz,
        window_ticks,
        None,
    )?;
    let with_tps = |roi| -> anyhow::Result<_> {
        let feed = swdaq_readout::bench::TpFeed {
            finder: swdaq_tpg::HitFinder::new(
                swdaq_tpg::ThresholdConfig::default(),
                (0..64).collect(),
                swdaq_format::wibeth::TICKS_PER_SAMPLE,
                swdaq_format::DETECTOR_ID_HD_TPC as u8,
                swdaq_tpg::Implementation::best(),
            )?,
            channel_ids: (0..64).collect(),
            roi,
        };
        Ok(swdaq_readout::bench::requests(
            emulated.clone(),
            request_seconds,
            request_rate_hz,
            window_ticks,
            Some(feed),
        )?)
    };
    let requests_with_tps = with_tps(None)?;
    let requests_roi = with_tps(Some(swdaq_tpg::RoiConfig::default()))?;
    Ok(ReadoutResult {
        format: "wibeth",
        ingest_gbps: ingest.gbps,
        ingest_frames_per_second: ingest.frames_per_second,
        memcpy_gbps: memcpy.gbps,
        ingest_vs_memcpy: ingest.gbps / memcpy.gbps,
        ingest_cached_gbps: cached.gbps,
        frame_copy_gbps: frame_copy,
        ingest_vs_frame_copy: ingest.gbps / frame_copy,
        frame_copy_streaming_gbps: frame_copy_streaming,
        frame_copy_fence_per_frame_gbps: frame_copy_fence_per_frame,
        ingest_with_tpg_frames_per_second: with_tpg.frames_per_second,
        links_per_core_with_tpg: with_tpg.frames_per_second / FrameFormat::WibEth.frame_rate_hz(),
        tps_found: tps.len() as u64,
        udp,
        drops: ingest.drops
            + cached.drops
            + with_tpg.drops
            + requests.ingest_drops
            + requests_with_tps.ingest_drops
            + requests_roi.ingest_drops,
        request_rate_hz: requests.request_rate_hz,
        requests: requests.requests,
        requests_complete: requests.complete,
        request_latency_p50_us: requests.latency_p50_us,
        request_latency_p99_us: requests.latency_p99_us,
        roi_vs_whole_p50: requests_roi.latency_p50_us / requests_with_tps.latency_p50_us,
        requests_with_tps,
        requests_roi,
    })
}

/// `frames` frames of emulated link 1 (collection channels) at the emulator's defaults.
fn emulated(format: FrameFormat, frames: u64) -> Vec<u8> {
    let detector =
        swdaq_sim::Detector::new(swdaq_sim::SimConfig::default()).expect("default config is valid");
    let mut link = detector.link(1, format, 0);
    let mut data = vec![0u8; frames as usize * format.frame_size()];
    for f in data.chunks_exact_mut(format.frame_size()) {
        link.next_frame(f);
    }
    data
}

/// Consecutive WIBEth frames with varying ADCs (content does not matter to ingest).
fn wibeth_template(frames: u64) -> ReplayTemplate {
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};
    let mut bytes = vec![0u8; frames as usize * wibeth::FRAME_SIZE];
    for (n, f) in bytes.chunks_exact_mut(wibeth::FRAME_SIZE).enumerate() {
        let daq = DaqEthHeader {
            timestamp: n as u64 * wibeth::TICKS_PER_FRAME,
            seq_id: n as u16 & 0xfff,
            ..Default::default()
        };
        let adcs =
            std::array::from_fn(|s| std::array::from_fn(|c| ((n + s * 7 + c * 13) % 4096) as u16));
        wibeth::encode(&daq, &WibEthHeader::healthy(), &adcs, f);
    }
    ReplayTemplate::new(FrameFormat::WibEth, bytes.chunks_exact(wibeth::FRAME_SIZE))
}
