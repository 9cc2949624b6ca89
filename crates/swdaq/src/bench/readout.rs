use super::{emulated, print_results};
use crate::hwbench;
use serde::Serialize;
use std::sync::Arc;
use swdaq_format::FrameFormat;
use swdaq_readout::replay::ReplayTemplate;

/// `swdaq bench readout`'s arguments (what each measures: `swdaq bench readout --help`).
#[derive(clap::Args)]
pub struct Args {
    /// Frames to ingest flat out.
    #[arg(long, default_value_t = 300_000)]
    pub frames: u64,
    /// Datagrams per UDP measurement.
    #[arg(long, default_value_t = 200_000)]
    pub udp_datagrams: u64,
    /// Datagrams sent before each receive phase (they must fit the socket buffer).
    #[arg(long, default_value_t = 512)]
    pub udp_burst: u64,
    /// Seconds of real-time ingest with requests.
    #[arg(long, default_value_t = 10.0)]
    pub request_seconds: f64,
    #[arg(long, default_value_t = 1000.0)]
    pub request_rate_hz: f64,
    /// Request window in milliseconds.
    #[arg(long, default_value_t = 5.0)]
    pub window_ms: f64,
}

pub fn run(bench: &Args, json: bool) -> anyhow::Result<()> {
    let Args {
        frames,
        udp_datagrams,
        udp_burst,
        request_seconds,
        request_rate_hz,
        window_ms,
    } = bench;
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
        json,
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
