//! `swdaq bench`: the benchmarks behind every performance figure in BENCHMARKS.md, one module
//! per subcommand. Each measures its stage and, where a ratio is claimed, its reference in the
//! same run.

mod evb;
mod evb_udp;
mod monitor;
mod plugin;
mod readout;
mod store;
mod swrod;
mod tpg;
mod transport;

use crate::table;
use serde::Serialize;
use swdaq_format::FrameFormat;

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
    Monitor(monitor::Args),
    /// Hit finding on emulated data: ns per channel-sample per algorithm (`threshold`,
    /// `protodune`, `abs-running-sum`), frame format (WIBEth, ProtoDUNE WIB) and
    /// implementation, AVX2 against the scalar reference in the same run.
    Tpg(tpg::Args),
    /// Transport: fragments of 4 KiB, 64 KiB and 1 MiB through swdaq's ZeroMQ transport
    /// against bare ZeroMQ PUSH/PULL over TCP loopback, same run.
    Transport(transport::Args),
    /// Storage: HDF5 record writing, closed-only, crash-safe and crash-safe synced to the
    /// device, against plain write(2) of the same bytes, same run.
    Store(store::Args),
    /// SW ROD: FELIX block decoding and aggregation into ROB fragments with all checks, one
    /// core, with the paper's ablation in the same run (memory pool vs an allocation per
    /// fragment, power-of-two ring index vs modulo).
    Swrod(swrod::Args),
    /// Readout: ingest into the latency buffer with all checks (vs memcpy, same run), UDP
    /// receive over loopback (batched vs one `recvmsg` per datagram, same run), and data
    /// requests served while ingesting in real time: bare, then on emulated data with hit
    /// finding answered with whole windows and in regions of interest (ROI readout).
    Readout(readout::Args),
    /// CMS-style event builder in one process: built events/s and GB/s flat out (and paced
    /// at a trigger rate), then as applications over ZeroMQ loopback flat out, against the
    /// bare in-process transport and bare ZeroMQ in the same run, with per-fragment and
    /// per-event costs.
    Evb(evb::Args),
    /// What the plugin interface costs: one event's FED data decoded into fragments by
    /// swdaq's own walk and by a C plugin doing the same checks
    /// (`examples/plugins/fed_decoder.c`), alternated in the same run, events/s per core.
    Plugin(plugin::Args),
    /// One readout unit's FED links taking fragments over UDP loopback on one core, one
    /// `recvmsg` per datagram against `recvmmsg` batches, and the same FEDs as FEROL streams
    /// over TCP loopback (two FEDs per stream), in the same run.
    EvbUdp(evb_udp::Args),
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.what {
        What::Monitor(bench) => monitor::run(bench, args.json),
        What::Tpg(bench) => tpg::run(bench, args.json),
        What::Transport(bench) => transport::run(bench, args.json),
        What::Store(bench) => store::run(bench, args.json),
        What::Swrod(bench) => swrod::run(bench, args.json),
        What::Readout(bench) => readout::run(bench, args.json),
        What::Evb(bench) => evb::run(bench, args.json),
        What::Plugin(bench) => plugin::run(bench, args.json),
        What::EvbUdp(bench) => evb_udp::run(bench, args.json),
    }
}

/// With `--json`, the whole `result` as JSON, and `true`; otherwise nothing (the caller
/// prints its tables).
fn printed_as_json<T: Serialize + ?Sized>(json: bool, result: &T) -> anyhow::Result<bool> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
    }
    Ok(json)
}

fn print_results<T: Serialize>(
    json: bool,
    results: &[T],
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    if !printed_as_json(json, results)? {
        print!(
            "{}",
            table::render(header, &results.iter().map(row).collect::<Vec<_>>())
        );
    }
    Ok(())
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
