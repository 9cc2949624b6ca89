//! The emulator source: replays frames generated beforehand (by `swdaq-sim`) in a loop, at
//! real-time rate or as fast as possible. The first pass delivers the frames exactly as
//! generated, injected faults included, so counters can be compared with the emulator's
//! truth; later passes shift timestamps and sequence ids by whole passes so the stream
//! continues seamlessly.

use crate::ring::SlotRun;
use crate::source::{Batch, FrameSource, Poll};
use crate::stream_copy::{copy_streaming_unfenced, fence};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_format::FrameFormat;
use swdaq_format::daq_eth::{DaqEthHeader, SEQ_ID_MODULUS};
use swdaq_format::protowib;

/// Frames generated once and shared by every replay of them.
pub struct ReplayTemplate {
    pub format: FrameFormat,
    bytes: Vec<u8>,
    /// (offset, length) of each frame in `bytes`.
    frames: Vec<(usize, usize)>,
    /// Timestamp and sequence-id advance of one whole pass.
    ts_span: u64,
    seq_span: u16,
}

impl ReplayTemplate {
    /// Builds a template from frames in arrival order (lengths may differ: truncated frames
    /// are replayed as they are). The span of a pass is taken from the first and last frames.
    pub fn new<'f>(format: FrameFormat, frames: impl IntoIterator<Item = &'f [u8]>) -> Self {
        let mut bytes = Vec::new();
        let mut index = Vec::new();
        for f in frames {
            index.push((bytes.len(), f.len()));
            bytes.extend_from_slice(f);
        }
        let headers: Vec<_> = index
            .iter()
            .filter_map(|&(o, l)| format.header(&bytes[o..o + l]))
            .collect();
        let (ts_span, seq_span) = match (headers.first(), headers.last()) {
            (Some(first), Some(last)) => {
                let ts = last.timestamp.wrapping_sub(first.timestamp) + format.ticks_per_frame();
                let seq = match (first.seq_id, last.seq_id) {
                    (Some(a), Some(b)) => (b.wrapping_sub(a).wrapping_add(1)) % SEQ_ID_MODULUS,
                    _ => 0,
                };
                (ts, seq)
            }
            _ => (0, 0),
        };
        Self {
            format,
            bytes,
            frames: index,
            ts_span,
            seq_span,
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames as generated.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.frames.iter().map(|&(o, l)| &self.bytes[o..o + l])
    }
}

pub struct ReplaySource {
    template: Arc<ReplayTemplate>,
    next: usize,
    pass: u64,
    /// Frames per second to pace at; `None`: as fast as the link takes them.
    pace: Option<(Instant, f64)>,
    delivered: u64,
    limit: Option<u64>,
    /// Land frames with streaming stores, as DMA would (see [`crate::stream_copy`]).
    streaming: bool,
}

impl ReplaySource {
    /// `rate_hz`: frames per second (e.g. the format's nominal rate) or `None` for flat out;
    /// `limit`: stop after this many frames.
    pub fn new(template: Arc<ReplayTemplate>, rate_hz: Option<f64>, limit: Option<u64>) -> Self {
        Self {
            template,
            next: 0,
            pass: 0,
            pace: rate_hz.map(|r| (Instant::now(), r)),
            delivered: 0,
            limit,
            streaming: false,
        }
    }

    /// Writes frames into their slots with streaming stores: they reach memory without
    /// passing through this core's cache, like a front-end card's DMA.
    pub fn with_streaming_stores(mut self) -> Self {
        self.streaming = true;
        self
    }

    /// Restarts the pacing clock (call when the run starts, after set-up).
    pub fn start_clock(&mut self) {
        if let Some((start, _)) = &mut self.pace {
            *start = Instant::now();
        }
    }
}

/// Frames landed per call: streaming stores are fenced once per batch.
pub const BATCH: usize = 16;
/// The frame's first cache line, restamped on the stack before it is landed: writing the
/// timestamp into a slot already streamed to memory would read the line back first.
const HEAD: usize = 64;

impl ReplaySource {
    /// Writes the next frame into `slot` without fencing streaming stores.
    fn land_next(&mut self, slot: &mut [u8]) -> Poll {
        let t = &*self.template;
        if t.is_empty() || self.limit.is_some_and(|l| self.delivered >= l) {
            return Poll::End;
        }
        if let Some((start, rate)) = self.pace {
            // Deadlines come from the frame count, not from the previous frame: no drift.
            let due = start + Duration::from_secs_f64(self.delivered as f64 / rate);
            if Instant::now() < due {
                return Poll::Idle;
            }
        }
        let (offset, len) = t.frames[self.next];
        let frame = &t.bytes[offset..offset + len];
        let split = len.min(HEAD);
        let mut head = [0u8; HEAD];
        head[..split].copy_from_slice(&frame[..split]);
        if self.pass > 0 {
            restamp(t, self.pass, frame, &mut head[..split]);
        }
        let out = &mut slot[..len];
        if self.streaming {
            copy_streaming_unfenced(&mut out[..split], &head[..split]);
            copy_streaming_unfenced(&mut out[split..], &frame[split..]);
        } else {
            out[..split].copy_from_slice(&head[..split]);
            out[split..].copy_from_slice(&frame[split..]);
        }
        self.next += 1;
        if self.next == t.frames.len() {
            self.next = 0;
            self.pass += 1;
        }
        self.delivered += 1;
        Poll::Frame(len)
    }
}

/// Shifts `frame`'s timestamp and sequence id by `pass` whole passes, writing the new header
/// into `head` (the frame's first bytes).
fn restamp(t: &ReplayTemplate, pass: u64, frame: &[u8], head: &mut [u8]) {
    let Some(header) = t.format.header(frame) else {
        return;
    };
    let timestamp = header.timestamp.wrapping_add(pass.wrapping_mul(t.ts_span));
    match t.format {
        FrameFormat::WibEth => {
            let modulus = SEQ_ID_MODULUS as u64;
            let shift = pass % modulus * t.seq_span as u64;
            let seq = (header.seq_id.unwrap_or(0) as u64 + shift) % modulus;
            DaqEthHeader::restamp(head, timestamp, seq as u16);
        }
        FrameFormat::ProtoWib => protowib::restamp(head, timestamp),
        FrameFormat::Board(_) => swdaq_format::board_frame::restamp(head, timestamp),
    }
}

impl FrameSource for ReplaySource {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        let poll = self.land_next(slot);
        fence();
        Ok(poll)
    }

    fn batch_size(&self) -> usize {
        BATCH
    }

    fn next_frames(&mut self, run: &mut SlotRun<'_>, lens: &mut [usize]) -> io::Result<Batch> {
        let max = run.len().min(lens.len());
        let mut landed = 0;
        let mut last = Poll::Idle;
        while landed < max {
            last = self.land_next(run.slot_mut(landed));
            let Poll::Frame(len) = last else { break };
            lens[landed] = len;
            landed += 1;
        }
        fence();
        Ok(if landed > 0 {
            Batch::Frames(landed)
        } else {
            last.into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::ContinuityChecker;
    use swdaq_format::wibeth::{self, WibEthHeader};

    fn frames(numbers: impl Iterator<Item = u64>) -> Vec<Vec<u8>> {
        numbers
            .map(|n| {
                let mut b = vec![0u8; wibeth::FRAME_SIZE];
                let daq = DaqEthHeader {
                    timestamp: 5000 + n * 2048,
                    seq_id: (n % 4096) as u16,
                    ..Default::default()
                };
                wibeth::encode(
                    &daq,
                    &WibEthHeader::healthy(),
                    &[[n as u16; 64]; 64],
                    &mut b,
                );
                b
            })
            .collect()
    }

    #[test]
    fn passes_join_seamlessly_across_sequence_wrap() {
        let f = frames(4000..4150);
        let t = Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            f.iter().map(|v| &v[..]),
        ));
        let mut src = ReplaySource::new(t, None, Some(150 * 40));
        let mut checker = ContinuityChecker::new(FrameFormat::WibEth);
        let mut slot = vec![0u8; wibeth::FRAME_SIZE];
        let mut n = 0;
        while let Poll::Frame(len) = src.next_frame(&mut slot).unwrap() {
            checker.check(&slot[..len]);
            n += 1;
        }
        assert_eq!(n, 150 * 40);
        assert_eq!(checker.counts.frames_ok, 150 * 40, "{:?}", checker.counts);
    }

    /// Batches (a fence per batch) land the same bytes as single frames, pass after pass,
    /// with streaming stores or without, and end where the limit says, mid-batch.
    #[test]
    fn batches_land_the_frames_single_calls_land() {
        let f = frames(0..40);
        let t = Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            f.iter().map(|v| &v[..]),
        ));
        let mut single = ReplaySource::new(t.clone(), None, Some(105));
        let mut slot = vec![0u8; wibeth::FRAME_SIZE];
        let mut expected = Vec::new();
        while let Poll::Frame(len) = single.next_frame(&mut slot).unwrap() {
            expected.push(slot[..len].to_vec());
        }
        assert_eq!(expected.len(), 105);
        for streaming in [false, true] {
            let mut batched = ReplaySource::new(t.clone(), None, Some(105));
            if streaming {
                batched = batched.with_streaming_stores();
            }
            let buffer = crate::ring::LatencyBuffer::new(64, wibeth::FRAME_SIZE).unwrap();
            let mut producer = buffer.producer().unwrap();
            let mut lens = vec![0; batched.batch_size()];
            let mut landed = Vec::new();
            loop {
                let mut run = producer.next_slots(lens.len()).unwrap();
                match batched.next_frames(&mut run, &mut lens).unwrap() {
                    Batch::Frames(k) => {
                        landed.extend((0..k).map(|i| run.slot(i)[..lens[i]].to_vec()))
                    }
                    Batch::Idle => panic!("an unpaced replay is never idle"),
                    Batch::End => break,
                }
            }
            assert_eq!(landed, expected, "streaming: {streaming}");
        }
    }

    #[test]
    fn first_pass_keeps_faults_as_generated() {
        let f = frames((0..50).filter(|&n| n != 20));
        let t = Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            f.iter().map(|v| &v[..]),
        ));
        let mut src = ReplaySource::new(t, None, Some(49));
        let mut checker = ContinuityChecker::new(FrameFormat::WibEth);
        let mut slot = vec![0u8; wibeth::FRAME_SIZE];
        while let Poll::Frame(len) = src.next_frame(&mut slot).unwrap() {
            checker.check(&slot[..len]);
        }
        assert_eq!(checker.counts.missing_frames, 1);
    }

    #[test]
    fn pacing_holds_frames_until_due() {
        let f = frames(0..4);
        let t = Arc::new(ReplayTemplate::new(
            FrameFormat::WibEth,
            f.iter().map(|v| &v[..]),
        ));
        let mut src = ReplaySource::new(t, Some(100.0), None);
        let mut slot = vec![0u8; wibeth::FRAME_SIZE];
        assert!(matches!(src.next_frame(&mut slot).unwrap(), Poll::Frame(_)));
        assert_eq!(
            src.next_frame(&mut slot).unwrap(),
            Poll::Idle,
            "the second frame is due after 10 ms"
        );
    }
}
