//! Readout benchmarks (library side of `swdaq bench readout`): ingest throughput into the
//! latency buffer with all checks, UDP receive over loopback, and request serving while
//! ingesting in real time.

use crate::hit_finding::HitFindingObserver;
use crate::link::{FrameObserver, Ingest, LinkShared};
use crate::replay::{ReplaySource, ReplayTemplate};
use crate::request::{DataRequest, RequestPolicy, RequestStatus};
use crate::roi::RoiLink;
use crate::server::{Outcome, ServerConfig, serve};
use crate::source::{Batch, FrameSource, Poll};
use crate::stream_copy;
use crate::thread::run_links;
use crate::tp_buffer::TpBuffer;
use crate::udp::{UdpSender, UdpSource};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_format::SourceId;
use swdaq_tpg::{HitFinder, RoiConfig};

#[derive(Debug, Clone, Serialize)]
pub struct IngestResult {
    pub frames: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub gbps: f64,
    pub frames_per_second: f64,
    pub drops: u64,
}

/// Replays `frames` frames of `template` flat out through one ingest loop (checks on, the
/// given observer) on the calling thread, and hands the observer back. `streaming`: the
/// source lands frames with streaming stores, as DMA would.
pub fn ingest<O: FrameObserver>(
    template: Arc<ReplayTemplate>,
    frames: u64,
    buffer_seconds: f64,
    streaming: bool,
    observer: O,
) -> std::io::Result<(IngestResult, O)> {
    let link = LinkShared::new(SourceId::readout(0), template.format, buffer_seconds)?;
    let mut source = ReplaySource::new(template, None, Some(frames));
    if streaming {
        source = source.with_streaming_stores();
    }
    let mut ingest = Ingest::new(&link, source, observer).expect("a new link has no producer yet");
    let start = Instant::now();
    ingest.run(|| true)?;
    let seconds = start.elapsed().as_secs_f64();
    let c = ingest.counts;
    let result = IngestResult {
        frames: c.frames,
        bytes: c.bytes,
        seconds,
        gbps: c.bytes as f64 / seconds / 1e9,
        frames_per_second: c.frames as f64 / seconds,
        drops: c.dropped,
    };
    Ok((result, ingest.into_parts().1))
}

/// How [`frame_copy_gbps`] writes each frame into its slot.
#[derive(Debug, Clone, Copy)]
pub enum Landing {
    /// `copy_from_slice`: ordinary stores through this core's cache.
    Ordinary,
    /// Streaming stores as the emulator source lands frames, with a fence after every
    /// `fence_every` frames (the source fences once per batch).
    Streaming { fence_every: u64 },
}

/// The copy ingest cannot avoid, alone: every frame of `template` written into consecutive
/// slots of a ring the size of `buffer_seconds` of data. Returns GB/s. Ingest over this is
/// the cost of everything but the copy.
pub fn frame_copy_gbps(
    template: &ReplayTemplate,
    frames: u64,
    buffer_seconds: f64,
    landing: Landing,
) -> std::io::Result<f64> {
    let slots = ((buffer_seconds * template.format.frame_rate_hz()) as usize).next_power_of_two();
    let stride = template.format.frame_size().next_multiple_of(64);
    let mut ring = memmap2::MmapOptions::new()
        .len(slots * stride)
        .populate()
        .map_anon()?;
    let start = Instant::now();
    let mut bytes = 0;
    for (n, frame) in (0..frames).zip(template.frames().cycle()) {
        let at = (n as usize % slots) * stride;
        let slot = &mut ring[at..at + frame.len()];
        match landing {
            Landing::Ordinary => slot.copy_from_slice(frame),
            Landing::Streaming { fence_every } => {
                stream_copy::copy_streaming_unfenced(slot, frame);
                if (n + 1).is_multiple_of(fence_every.max(1)) {
                    stream_copy::fence();
                }
            }
        }
        bytes += frame.len();
    }
    stream_copy::fence();
    std::hint::black_box(&ring);
    Ok(bytes as f64 / start.elapsed().as_secs_f64() / 1e9)
}

#[derive(Debug, Clone, Serialize)]
pub struct UdpReceiveResult {
    /// Datagrams asked for per receive call (1: one `recvmsg` each, the baseline).
    pub batch: usize,
    pub sent: u64,
    /// Frames buffered (checked and published in the latency buffer).
    pub received: u64,
    /// Sent but never buffered: dropped by the kernel or rejected by the checks.
    pub lost: u64,
    /// Time spent receiving only; the sender was idle meanwhile.
    pub receive_seconds: f64,
    /// Per core: this one thread did all the receiving.
    pub datagrams_per_second: f64,
    pub gbps: f64,
    /// The same thread's rate while sending the bursts (the kernel's send path).
    pub send_datagrams_per_second: f64,
}

/// One core's UDP receive rate over loopback with every check on. This thread sends a burst
/// of `burst` WIBEth datagrams (few enough to wait in the socket buffer), then receives them
/// through a [`UdpSource`] taking `batch` per call into a latency buffer, and repeats until
/// `datagrams` are sent. Only receiving is timed, so the figure is the receive path alone,
/// free of wake-ups and of scheduling between cores.
pub fn udp_receive(
    template: Arc<ReplayTemplate>,
    datagrams: u64,
    batch: usize,
    burst: u64,
) -> std::io::Result<UdpReceiveResult> {
    let (link, source, mut sender) = udp_loopback_link(template, batch)?;
    let mut ingest = Ingest::new(&link, source, ()).expect("a new link has no producer yet");
    let (mut sent, mut send_seconds, mut receive_seconds) = (0, 0.0, 0.0);
    while sent < datagrams {
        let n = burst.min(datagrams - sent);
        let start = Instant::now();
        for _ in 0..n {
            sender.send_next()?;
        }
        send_seconds += start.elapsed().as_secs_f64();
        sent += n;
        let start = Instant::now();
        let mut last_frame = start;
        // Until the burst is in; a time-out means the rest was lost (the sum shows it).
        while ingest.counts.frames + ingest.checker.counts.bad_size < sent {
            match ingest.step()? {
                Batch::Frames(_) => last_frame = Instant::now(),
                Batch::Idle | Batch::End => break,
            }
        }
        receive_seconds += (last_frame - start).as_secs_f64();
    }
    let c = ingest.counts;
    Ok(UdpReceiveResult {
        batch: ingest.into_parts().0.batch_size(),
        sent,
        received: c.frames,
        lost: sent - c.frames,
        receive_seconds,
        datagrams_per_second: c.frames as f64 / receive_seconds,
        gbps: c.bytes as f64 / receive_seconds / 1e9,
        send_datagrams_per_second: sent as f64 / send_seconds,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct UdpStreamResult {
    pub batch: usize,
    pub sent: u64,
    pub received: u64,
    /// Sent but never buffered: the receiver fell behind and the socket buffer overflowed,
    /// or the checks rejected them.
    pub lost: u64,
    /// From the first send to the last frame buffered.
    pub seconds: f64,
    pub datagrams_per_second: f64,
    pub gbps: f64,
    /// Share of a core the receiving thread used (it sleeps in the kernel when idle).
    pub receiver_core_share: f64,
}

/// Loopback end to end: one thread sends `datagrams` WIBEth datagrams as fast as it can while
/// another receives them (`batch` per call) into a latency buffer. On a 2-core machine the
/// sender is the ceiling; what the receiver keeps up with, and at what share of its core,
/// is the figure.
pub fn udp_stream(
    template: Arc<ReplayTemplate>,
    datagrams: u64,
    batch: usize,
) -> std::io::Result<UdpStreamResult> {
    let (link, source, mut sender) = udp_loopback_link(template, batch)?;
    let sent_all = AtomicBool::new(false);
    std::thread::scope(|s| {
        let start = Instant::now();
        let sent = s.spawn(|| {
            let _done = SetOnDrop(&sent_all);
            for _ in 0..datagrams {
                sender.send_next()?;
            }
            Ok::<_, std::io::Error>(())
        });
        let mut ingest = Ingest::new(&link, source, ()).expect("a new link has no producer yet");
        let cpu = cpu_time::ThreadTime::now();
        let mut last_frame = start;
        loop {
            match ingest.step()? {
                Batch::Frames(_) => last_frame = Instant::now(),
                // A receive time-out after the sender finished: all that will arrive has.
                Batch::Idle | Batch::End if sent_all.load(Ordering::Acquire) => break,
                Batch::Idle | Batch::End => {}
            }
        }
        let receiver_cpu = cpu.elapsed().as_secs_f64();
        sent.join().expect("sender thread")?;
        let seconds = (last_frame - start).as_secs_f64();
        let c = ingest.counts;
        Ok(UdpStreamResult {
            batch: ingest.into_parts().0.batch_size(),
            sent: datagrams,
            received: c.frames,
            lost: datagrams - c.frames,
            seconds,
            datagrams_per_second: c.frames as f64 / seconds,
            gbps: c.bytes as f64 / seconds / 1e9,
            receiver_core_share: receiver_cpu / start.elapsed().as_secs_f64(),
        })
    })
}

/// A link, a UDP source on a free loopback port taking `batch` datagrams per call, and a
/// sender of `template`'s frames to it.
fn udp_loopback_link(
    template: Arc<ReplayTemplate>,
    batch: usize,
) -> std::io::Result<(LinkShared, UdpSource, StreamSender)> {
    let link = LinkShared::new(SourceId::readout(0), template.format, 0.1)?;
    let source = UdpSource::bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?.with_batch_size(batch);
    let sender = StreamSender::new(template, source.local_addr()?)?;
    Ok((link, source, sender))
}

/// Sends a template's frames as one continuous stream (timestamps and sequence ids rewritten
/// each pass, as the replay source does), so the receiver's checks see a healthy link.
struct StreamSender {
    frames: ReplaySource,
    frame: Vec<u8>,
    socket: UdpSender,
}

impl StreamSender {
    fn new(template: Arc<ReplayTemplate>, dest: std::net::SocketAddr) -> std::io::Result<Self> {
        Ok(Self {
            frame: vec![0; template.format.frame_size()],
            frames: ReplaySource::new(template, None, None),
            socket: UdpSender::connect(dest)?,
        })
    }

    fn send_next(&mut self) -> std::io::Result<()> {
        match self.frames.next_frame(&mut self.frame)? {
            Poll::Frame(len) => self.socket.send(&self.frame[..len]),
            Poll::Idle | Poll::End => {
                unreachable!("an unpaced, unlimited replay always has a frame")
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestResult {
    pub seconds: f64,
    pub requests: u64,
    pub request_rate_hz: f64,
    pub complete: u64,
    pub not_complete: u64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub ingest_drops: u64,
    /// With ROI readout: bytes answered over the bytes the whole windows would have been.
    pub roi_bytes_ratio: Option<f64>,
}

/// Hit finding in the ingest loop, feeding the link's TP buffer, for the request benchmark;
/// with `roi`, requests are answered in regions of interest.
pub struct TpFeed {
    pub finder: HitFinder,
    /// Offline id of each of the frame's channels.
    pub channel_ids: Vec<u32>,
    pub roi: Option<RoiConfig>,
}

/// Ingests `template` at its real-time rate for `seconds` while a requester asks for
/// `window_ticks`-wide windows ending just behind the newest data at `rate_hz`; one
/// server thread answers. Uses three threads (ingest, server, requester). With `tps`, ingest
/// runs hit finding into the link's TP buffer (and the server may answer in ROIs).
pub fn requests(
    template: Arc<ReplayTemplate>,
    seconds: f64,
    rate_hz: f64,
    window_ticks: u64,
    tps: Option<TpFeed>,
) -> std::io::Result<RequestResult> {
    let format = template.format;
    let link = Arc::new(LinkShared::new(SourceId::readout(0), format, 1.0)?);
    let tp_buffer = Arc::new(TpBuffer::new(SourceId::trigger(0), u64::MAX, 0));
    let (finder, roi_links) = match tps {
        None => (None, Vec::new()),
        Some(feed) => {
            let roi = match feed.roi {
                Some(config) => vec![
                    RoiLink::new(
                        link.source_id,
                        config,
                        format,
                        &feed.channel_ids,
                        Arc::clone(&tp_buffer),
                    )
                    .map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                    })?,
                ],
                None => Vec::new(),
            };
            (Some(feed.finder), roi)
        }
    };
    let (req_tx, req_rx) = crossbeam_channel::unbounded();
    let (resp_tx, resp_rx) = crossbeam_channel::unbounded();
    let config = ServerConfig {
        policy: RequestPolicy {
            max_window_ticks: window_ticks * 4,
        },
        timeout: Duration::from_millis(100),
        poll: Duration::from_micros(200),
    };
    let stop = AtomicBool::new(false);
    let step = format.ticks_per_frame();
    std::thread::scope(|s| {
        let ingest = s.spawn(|| {
            let source = ReplaySource::new(template, Some(format.frame_rate_hz()), None);
            let keep_going = || !stop.load(Ordering::Relaxed);
            match finder {
                None => {
                    let mut ingest =
                        Ingest::new(&link, source, ()).expect("a new link has no producer yet");
                    ingest.run(keep_going).map(|_| ingest.counts.dropped)
                }
                Some(finder) => {
                    let observer = HitFindingObserver::new(finder, format);
                    let ingest = Ingest::new(&link, source, observer)
                        .expect("a new link has no producer yet");
                    let mut ingests = [ingest];
                    let mut found = Vec::new();
                    // As `swdaq run`'s readout threads do: TPs to the buffer after each burst.
                    let results = run_links(&mut ingests, keep_going, Duration::ZERO, |_, i, _| {
                        let observer = i.observer_mut();
                        observer.take_tps(&mut found);
                        tp_buffer.push(&found, observer.horizon());
                        found.clear();
                    });
                    let [ingest] = ingests;
                    results
                        .into_iter()
                        .next()
                        .expect("one link")
                        .map(|_| ingest.counts.dropped)
                }
            }
        });
        // Stops ingest however this scope ends (a panic must not leave it spinning).
        let _stop_ingest = SetOnDrop(&stop);
        let links = [link.clone()];
        let server = s.spawn(move || {
            serve(
                &links,
                &[],
                &roi_links,
                req_rx,
                resp_tx,
                config,
                None,
                |_| {},
            )
        });
        // Consume answers as they come, as a record builder would (and free their memory).
        let collector = s.spawn(move || {
            let (mut latencies, mut complete, mut not_complete) = (Vec::new(), 0u64, 0u64);
            for r in resp_rx {
                latencies.push(r.latency.as_secs_f64() * 1e6);
                match r.outcome {
                    Outcome::Served(RequestStatus::Complete) => complete += 1,
                    _ => not_complete += 1,
                }
            }
            (latencies, complete, not_complete)
        });
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let due = start + Duration::from_secs_f64(sent as f64 / rate_hz);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            // Ask for the window that ends where the newest frame ends: it is complete or
            // about to be, the case a trigger with a short latency produces.
            let newest = newest_timestamp(&link);
            let Some(end) = newest.map(|t| t + step) else {
                continue;
            };
            let request = DataRequest {
                trigger_number: sent,
                trigger_timestamp: end.saturating_sub(window_ticks / 2),
                run_number: 1,
                sequence_number: 0,
                source: link.source_id,
                window_begin: end.saturating_sub(window_ticks),
                window_end: end,
                destination: 0,
            };
            if req_tx.send(request).is_err() {
                break;
            }
            sent += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        drop(req_tx);
        let roi = server.join().map(|c| c.roi).unwrap_or_default();
        stop.store(true, Ordering::Relaxed);
        let drops = ingest.join().expect("ingest thread")?;
        let (mut latencies, complete, not_complete) = collector.join().expect("collector thread");
        latencies.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        Ok(RequestResult {
            seconds: elapsed,
            requests: sent,
            request_rate_hz: sent as f64 / elapsed,
            complete,
            not_complete,
            latency_p50_us: pct(0.5),
            latency_p99_us: pct(0.99),
            ingest_drops: drops,
            roi_bytes_ratio: (roi.fragments > 0)
                .then(|| roi.bytes as f64 / roi.full_window_bytes as f64),
        })
    })
}

/// Sets its flag when dropped, however the scope holding it ends (a panic included).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn newest_timestamp(link: &LinkShared) -> Option<u64> {
    let mut reader = link.buffer.reader()?;
    let newest = link.buffer.published().checked_sub(1)?;
    reader
        .with_view(newest, |v| {
            (v.first < v.end).then(|| v.meta(v.first).timestamp)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::FrameFormat;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};

    fn template(n: u64) -> Arc<ReplayTemplate> {
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let mut b = vec![0u8; wibeth::FRAME_SIZE];
                let daq = DaqEthHeader {
                    timestamp: i * 2048,
                    seq_id: i as u16 & 0xfff,
                    ..Default::default()
                };
                wibeth::encode(&daq, &WibEthHeader::healthy(), &[[0; 64]; 64], &mut b);
                b
            })
            .collect();
        Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            frames.iter().map(|f| &f[..]),
        ))
    }

    #[test]
    fn ingest_bench_counts_every_frame_however_frames_land() {
        for streaming in [false, true] {
            let (r, ()) = ingest(template(64), 1000, 0.05, streaming, ()).unwrap();
            assert_eq!(
                (r.frames, r.bytes, r.drops),
                (1000, 1000 * wibeth::FRAME_SIZE as u64, 0)
            );
            assert!(r.gbps > 0.0);
        }
    }

    #[test]
    fn udp_receive_bench_buffers_every_datagram_of_every_burst() {
        for batch in [1, 16] {
            let r = udp_receive(template(64), 1000, batch, 300).unwrap();
            assert_eq!(
                (r.batch, r.sent, r.received, r.lost),
                (batch, 1000, 1000, 0)
            );
            assert!(r.datagrams_per_second > 0.0 && r.gbps > 0.0);
        }
    }

    #[test]
    fn udp_stream_bench_accounts_for_every_datagram() {
        let r = udp_stream(template(64), 2000, 16).unwrap();
        assert_eq!(r.received + r.lost, 2000);
        assert!(r.received > 0, "nothing arrived over loopback");
        assert!(r.receiver_core_share > 0.0 && r.receiver_core_share <= 1.5);
    }

    #[test]
    fn request_bench_answers_its_requests() {
        let r = requests(template(256), 0.3, 200.0, 5 * 62_500, None).unwrap();
        assert!(r.requests > 10);
        assert_eq!(r.complete + r.not_complete, r.requests);
        assert_eq!(r.ingest_drops, 0);
        assert_eq!(r.roi_bytes_ratio, None);
    }

    #[test]
    fn request_bench_with_roi_answers_every_request_in_regions() {
        let feed = TpFeed {
            finder: HitFinder::new(
                swdaq_tpg::ThresholdConfig::default(),
                (0..64).collect(),
                swdaq_format::wibeth::TICKS_PER_SAMPLE,
                swdaq_format::DETECTOR_ID_HD_TPC as u8,
                swdaq_tpg::Implementation::best(),
            )
            .unwrap(),
            channel_ids: (0..64).collect(),
            roi: Some(RoiConfig::default()),
        };
        let r = requests(template(256), 0.3, 200.0, 5 * 62_500, Some(feed)).unwrap();
        assert!(r.requests > 10);
        assert_eq!(r.complete + r.not_complete, r.requests);
        let ratio = r.roi_bytes_ratio.expect("ROI fragments answered");
        assert!(ratio > 0.0 && ratio <= 1.0, "{ratio}");
    }
}
