//! Readout benchmarks (library side of `swdaq bench readout`): ingest throughput into the
//! latency buffer with all checks, and request serving while ingesting in real time.

use crate::link::{FrameObserver, Ingest, LinkShared};
use crate::replay::{ReplaySource, ReplayTemplate};
use crate::request::{DataRequest, RequestPolicy, RequestStatus};
use crate::server::{Outcome, ServerConfig, serve};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_format::SourceId;

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

/// The copy ingest cannot avoid, alone: every frame of `template` copied with
/// `copy_from_slice` into consecutive slots of a ring the size of `buffer_seconds` of data.
/// Returns GB/s. Ingest over this is the cost of everything but the copy.
pub fn frame_copy_gbps(
    template: &ReplayTemplate,
    frames: u64,
    buffer_seconds: f64,
) -> std::io::Result<f64> {
    let slots = ((buffer_seconds * template.format.frame_rate_hz()) as usize).next_power_of_two();
    let stride = template.format.frame_size().next_multiple_of(64);
    let mut ring = memmap2::MmapOptions::new()
        .len(slots * stride)
        .populate()
        .map_anon()?;
    let start = Instant::now();
    let mut bytes = 0;
    for (n, frame) in (0..frames as usize).zip(template.frames().cycle()) {
        let at = (n % slots) * stride;
        ring[at..at + frame.len()].copy_from_slice(frame);
        bytes += frame.len();
    }
    std::hint::black_box(&ring);
    Ok(bytes as f64 / start.elapsed().as_secs_f64() / 1e9)
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
}

/// Ingests `template` at its real-time rate for `seconds` while a requester asks for
/// `window_ticks`-wide windows ending just behind the newest data at `rate_hz`; one
/// server thread answers. Uses three threads (ingest, server, requester).
pub fn requests(
    template: Arc<ReplayTemplate>,
    seconds: f64,
    rate_hz: f64,
    window_ticks: u64,
) -> std::io::Result<RequestResult> {
    let format = template.format;
    let link = Arc::new(LinkShared::new(SourceId::readout(0), format, 1.0)?);
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
            let mut ingest =
                Ingest::new(&link, source, ()).expect("a new link has no producer yet");
            ingest
                .run(|| !stop.load(Ordering::Relaxed))
                .map(|_| ingest.counts.dropped)
        });
        // Stops ingest however this scope ends (a panic must not leave it spinning).
        let _stop_ingest = StopOnDrop(&stop);
        let links = [link.clone()];
        let server = s.spawn(move || serve(&links, &[], req_rx, resp_tx, config, None));
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
            };
            if req_tx.send(request).is_err() {
                break;
            }
            sent += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        drop(req_tx);
        let _ = server.join();
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
        })
    })
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
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
    use crate::link_format::LinkFormat;
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
            LinkFormat::WibEth,
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
    fn request_bench_answers_its_requests() {
        let r = requests(template(256), 0.3, 200.0, 5 * 62_500).unwrap();
        assert!(r.requests > 10);
        assert_eq!(r.complete + r.not_complete, r.requests);
        assert_eq!(r.ingest_drops, 0);
    }
}
