//! A streaming board's link (#35): its packets decoded into board frames (one per time slice,
//! `swdaq_format::board_frame`) by a plugin's decoder or a packet format, buffered and read
//! out by time window like a TPC link's frames, and its hits found by the detector's own
//! `process_fragments` plugin: the primitives feed the self-trigger and the link's TP buffer
//! like the hit finder's.

use crate::decoded::{DecodedSource, Framed, Framing};
use crate::link::FrameObserver;
use crate::ring::SlotMeta;
use crate::source::FrameSource;
use std::ops::Range;
use swdaq_format::TriggerPrimitive;
use swdaq_format::board_frame::{BoardFrame, BoardFrames, frame_size};
use swdaq_plugin::{DecoderSection, Fragment, FragmentProcessor, FragmentRef, SectionError};
use swdaq_tpg::TpOrderer;

/// Frames each decoded fragment with a timestamp as a board frame of the link.
pub struct BoardFraming {
    frames: BoardFrames,
}

impl Framing for BoardFraming {
    fn frame(&mut self, fragment: &Fragment, bytes: &[u8], out: &mut Vec<u8>) -> Framed {
        let Some(timestamp) = fragment.timestamp else {
            return Framed::Refused("a fragment without a timestamp (links are read out by time)");
        };
        if bytes.len() > self.frames.max_payload as usize {
            return Framed::Refused("a fragment longer than the board's max_payload_bytes");
        }
        let start = out.len();
        out.resize(start + frame_size(bytes.len()), 0);
        BoardFrame {
            timestamp,
            source_id: fragment.source_id,
            flags: fragment.flags,
            payload: bytes,
        }
        .write(&mut out[start..]);
        Framed::Good
    }
}

/// A board link's `input` (blocks of at most `max_block` bytes) through the decoder `section`
/// makes, as board frames of `frames`; `label` names the link in the line naming its first
/// decode problem.
pub fn board_source(
    label: String,
    input: Box<dyn FrameSource>,
    max_block: usize,
    section: &DecoderSection,
    frames: BoardFrames,
) -> Result<DecodedSource<BoardFraming>, SectionError> {
    Ok(DecodedSource::new(
        label,
        input,
        max_block,
        section.make()?,
        section.max_message_bytes,
        BoardFraming { frames },
    ))
}

/// What a board link's processing counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessCounts {
    /// Frames handed to the plugin, and those it did not finish (a plugin error).
    pub frames_processed: u64,
    pub frames_unprocessed: u64,
    /// The plugin's failed calls (each named once on stderr).
    pub plugin_errors: u64,
    /// Primitives refused: starting before what was already released to the trigger (later
    /// than `max_hit_ticks` allows), after the data they came from, or on a channel beyond 24
    /// bits.
    pub late_primitives: u64,
    pub impossible_primitives: u64,
}

/// A frame waiting for the plugin: where its payload lies in `pending`, and its header.
struct PendingFrame {
    payload: Range<usize>,
    timestamp: u64,
    source_id: u32,
    flags: u32,
}

/// Runs a board link's `process_fragments` plugin on its frames, on the link's thread. Frames
/// are gathered as they are published and handed to the plugin in one call per readout burst
/// ([`Self::process_pending`]), so a call costs the plugin's work, not a call per slice.
pub struct BoardProcessor {
    processor: Option<Box<dyn FragmentProcessor + Send>>,
    frames: BoardFrames,
    max_hit_ticks: u64,
    /// Payloads waiting for the next call (copied: the ring's slots are not the plugin's to
    /// hold), and each one's place and header.
    pending: Vec<u8>,
    pending_frames: Vec<PendingFrame>,
    primitives: Vec<swdaq_plugin::TriggerPrimitive>,
    orderer: TpOrderer,
    ready: Vec<TriggerPrimitive>,
    /// Every sample before this tick has been processed.
    processed_until: u64,
    /// Every primitive starting before this tick has been released to `ready`.
    horizon: u64,
    found: u64,
    counts: ProcessCounts,
    named: bool,
    label: String,
}

impl BoardProcessor {
    /// A link's processing by `processor` (`None`: the link has no hit finding, its data time
    /// still moves the trigger on); a hit may start at most `max_hit_ticks` before the end of
    /// the slice that ends it.
    pub fn new(
        label: String,
        processor: Option<Box<dyn FragmentProcessor + Send>>,
        frames: BoardFrames,
        max_hit_ticks: u64,
    ) -> Self {
        Self {
            processor,
            frames,
            max_hit_ticks,
            pending: Vec::new(),
            pending_frames: Vec::new(),
            primitives: Vec::new(),
            orderer: TpOrderer::default(),
            ready: Vec::new(),
            processed_until: 0,
            horizon: 0,
            found: 0,
            counts: ProcessCounts::default(),
            named: false,
            label,
        }
    }

    pub fn counts(&self) -> ProcessCounts {
        self.counts
    }

    /// Every primitive of this link starting before this tick has been released.
    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// Moves the time-ordered primitives released so far into `out`.
    pub fn take_tps(&mut self, out: &mut Vec<TriggerPrimitive>) {
        out.append(&mut self.ready);
    }

    /// Hands the frames gathered since the last call to the plugin and releases the
    /// primitives no later hit can precede.
    pub fn process_pending(&mut self) {
        if !self.pending_frames.is_empty() {
            self.call_plugin();
        }
        // Without a processor no hit can come: the data's own time is the horizon.
        let reach = if self.processor.is_some() {
            self.max_hit_ticks
        } else {
            0
        };
        self.horizon = self.horizon.max(self.processed_until.saturating_sub(reach));
        self.orderer.release(self.horizon, &mut self.ready);
    }

    /// Processes what is left and releases every primitive (end of run).
    pub fn finish(&mut self) {
        self.process_pending();
        self.orderer.drain(&mut self.ready);
        self.horizon = self.horizon.max(self.processed_until);
    }

    fn call_plugin(&mut self) {
        let Some(processor) = &mut self.processor else {
            self.pending_frames.clear();
            return;
        };
        let refs: Vec<FragmentRef<'_>> = self
            .pending_frames
            .iter()
            .map(|f| FragmentRef {
                data: &self.pending[f.payload.clone()],
                source_id: f.source_id,
                event_number: 0,
                timestamp: f.timestamp,
                flags: f.flags,
            })
            .collect();
        self.primitives.clear();
        let result = processor.process(&refs, &mut self.primitives);
        drop(refs);
        let batch = self.pending_frames.len() as u64;
        self.pending_frames.clear();
        self.pending.clear();
        match result {
            Ok(()) => self.counts.frames_processed += batch,
            Err(e) => {
                let done = (e.fragments_done as u64).min(batch);
                self.counts.frames_processed += done;
                self.counts.frames_unprocessed += batch - done;
                self.counts.plugin_errors += 1;
                if !self.named {
                    self.named = true;
                    eprintln!(
                        "{}: processor: {e} (every failed call is counted in the link's processing)",
                        self.label
                    );
                }
            }
        }
        self.take_primitives();
    }

    /// Checks the plugin's primitives and queues the good ones for time ordering.
    fn take_primitives(&mut self) {
        let ticks_per_sample = self.frames.ticks_per_sample.max(1);
        for p in self.primitives.drain(..) {
            if p.timestamp >= self.processed_until || p.channel > TriggerPrimitive::MAX_CHANNEL {
                self.counts.impossible_primitives += 1;
                continue;
            }
            if p.timestamp < self.horizon {
                self.counts.late_primitives += 1;
                continue;
            }
            let samples = u64::from(p.time_over_threshold).div_ceil(ticks_per_sample);
            self.orderer.push([TriggerPrimitive {
                flags: 0,
                detector_id: 0,
                channel: p.channel,
                samples_over_threshold: samples.min(u64::from(u16::MAX)) as u16,
                time_start: p.timestamp,
                samples_to_peak: 0,
                adc_integral: p.adc_integral,
                adc_peak: p.adc_peak.min(u32::from(u16::MAX)) as u16,
            }]);
            self.found += 1;
        }
    }
}

impl FrameObserver for BoardProcessor {
    fn observe(&mut self, _meta: &SlotMeta, frame: &[u8]) {
        // The link's checks kept only frames whose header reads: this cannot fail.
        let Ok(board) = BoardFrame::parse(frame) else {
            return;
        };
        let end = board.timestamp.saturating_add(self.frames.ticks_per_frame);
        self.processed_until = self.processed_until.max(end);
        if self.processor.is_none() {
            return;
        }
        let start = self.pending.len();
        self.pending.extend_from_slice(board.payload);
        self.pending_frames.push(PendingFrame {
            payload: start..self.pending.len(),
            timestamp: board.timestamp,
            source_id: board.source_id,
            flags: board.flags,
        });
    }

    fn tps_found(&self) -> u64 {
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decoded::Blocks;
    use crate::source::Poll;
    use swdaq_plugin::{ErrorKind, PluginError, ProcessError, TriggerPrimitive as PluginTp};

    const FRAMES: BoardFrames = BoardFrames {
        max_payload: 64,
        ticks_per_frame: 100,
        ticks_per_sample: 10,
        clock_hz: 1_000_000,
    };

    /// Packets as a no-code format: magic u16 0x5B0A, source u16, timestamp u64, length u32
    /// (big-endian), then the payload.
    fn section() -> DecoderSection {
        let format = r#"
            framing = "length_field"
            header_bytes = 16
            magic = { offset = 0, width = 2, order = "big", value = 0x5B0A }
            source_id = { offset = 2, width = 2, order = "big" }
            timestamp = { offset = 4, width = 8, order = "big" }
            length = { offset = 12, width = 4, order = "big" }
            max_packet_bytes = 4096
        "#;
        DecoderSection {
            format: Some(toml::from_str(format).unwrap()),
            ..Default::default()
        }
    }

    fn packet(source: u16, timestamp: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = 0x5B0Au16.to_be_bytes().to_vec();
        out.extend(source.to_be_bytes());
        out.extend(timestamp.to_be_bytes());
        out.extend((payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Packets become board frames carrying each whole packet and its timestamp; a packet
    /// longer than the largest payload is refused and counted, the next one still kept.
    #[test]
    fn packets_become_board_frames_and_an_oversized_one_is_counted() {
        let packets = [
            packet(3, 1000, b"abc"),
            packet(3, 1100, &[7; 60]),
            packet(3, 1200, b""),
        ];
        let blocks = Blocks(packets.iter().cloned().collect());
        let mut source =
            board_source("test".into(), Box::new(blocks), 256, &section(), FRAMES).unwrap();
        let mut slot = vec![0u8; FRAMES.max_frame_size()];
        let mut read = Vec::new();
        while let Poll::Frame(len) = source.next_frame(&mut slot).unwrap() {
            let frame = BoardFrame::parse(&slot[..len]).unwrap();
            read.push((frame.timestamp, frame.source_id, frame.payload.to_vec()));
        }
        assert_eq!(
            read,
            [(1000, 3, packets[0].clone()), (1200, 3, packets[2].clone())]
        );
        assert_eq!(source.counts().refused, 1);
        assert_eq!(source.decode_errors(), 1);
    }

    /// A processor made of a closure over the batch it is given.
    struct Fake<F>(F);

    impl<F: FnMut(&[FragmentRef<'_>], &mut Vec<PluginTp>) -> Result<(), ProcessError> + Send>
        FragmentProcessor for Fake<F>
    {
        fn process(
            &mut self,
            fragments: &[FragmentRef<'_>],
            out: &mut Vec<PluginTp>,
        ) -> Result<(), ProcessError> {
            (self.0)(fragments, out)
        }
    }

    fn frame(timestamp: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0; frame_size(payload.len())];
        BoardFrame {
            timestamp,
            source_id: 0,
            flags: 0,
            payload,
        }
        .write(&mut out);
        out
    }

    fn tp(timestamp: u64, channel: u32) -> PluginTp {
        PluginTp {
            timestamp,
            channel,
            time_over_threshold: 25,
            adc_peak: 70_000,
            adc_integral: 9,
            flags: 0,
        }
    }

    fn observe(p: &mut BoardProcessor, timestamps: &[u64]) {
        for &t in timestamps {
            p.observe(&SlotMeta::default(), &frame(t, &t.to_le_bytes()));
        }
    }

    /// One call per burst with every frame's payload; primitives leave in time order, up to
    /// `max_hit_ticks` before the end of the data, converted (time over threshold in samples,
    /// peak saturated to 16 bits).
    #[test]
    fn primitives_leave_in_time_order_behind_the_hit_horizon() {
        let mut batches = Vec::new();
        let fake = Fake(
            move |fragments: &[FragmentRef<'_>], out: &mut Vec<PluginTp>| {
                batches.push(fragments.len());
                let last = fragments.last().unwrap();
                assert_eq!(last.data, &last.timestamp.to_le_bytes());
                // A hit closing now may have started up to 150 ticks before the slice's end.
                out.extend([tp(last.timestamp + 50, 2), tp(last.timestamp - 60, 1)]);
                Ok(())
            },
        );
        let mut p = BoardProcessor::new("test".into(), Some(Box::new(fake)), FRAMES, 150);
        observe(&mut p, &[1000, 1100, 1200]);
        p.process_pending();
        assert_eq!(p.horizon(), 1300 - 150);
        let mut tps = Vec::new();
        p.take_tps(&mut tps);
        assert_eq!(tps.len(), 1);
        assert_eq!((tps[0].time_start, tps[0].channel), (1140, 1));
        assert_eq!(
            (tps[0].samples_over_threshold, tps[0].adc_peak),
            (3, u16::MAX)
        );
        p.finish();
        p.take_tps(&mut tps);
        let starts: Vec<u64> = tps.iter().map(|t| t.time_start).collect();
        assert_eq!(starts, [1140, 1250]);
        assert_eq!(p.counts().frames_processed, 3);
        assert_eq!(p.horizon(), 1300);
    }

    /// A primitive before what was released, after the data it came from, or on a channel
    /// beyond 24 bits is counted and never reaches the trigger.
    #[test]
    fn late_and_impossible_primitives_are_counted_not_used() {
        let fake = Fake(|fragments: &[FragmentRef<'_>], out: &mut Vec<PluginTp>| {
            let t = fragments[0].timestamp;
            if t == 2000 {
                out.extend([tp(100, 1), tp(5000, 1), tp(2000, 1 << 24), tp(2010, 4)]);
            }
            Ok(())
        });
        let mut p = BoardProcessor::new("test".into(), Some(Box::new(fake)), FRAMES, 100);
        observe(&mut p, &[1000]);
        p.process_pending();
        observe(&mut p, &[2000]);
        p.finish();
        let mut tps = Vec::new();
        p.take_tps(&mut tps);
        assert_eq!(tps.iter().map(|t| t.channel).collect::<Vec<_>>(), [4]);
        let counts = p.counts();
        assert_eq!(
            (counts.late_primitives, counts.impossible_primitives),
            (1, 2)
        );
        assert_eq!(p.tps_found(), 1);
    }

    /// A failing call keeps the primitives of the fragments it finished, counts the rest as
    /// unprocessed, and the next burst is processed again.
    #[test]
    fn a_plugin_error_is_counted_and_the_link_goes_on() {
        let fake = Fake(|fragments: &[FragmentRef<'_>], out: &mut Vec<PluginTp>| {
            out.push(tp(fragments[0].timestamp, 1));
            if fragments.len() == 3 {
                return Err(ProcessError {
                    fragments_done: 1,
                    error: PluginError {
                        plugin: "fake".into(),
                        kind: ErrorKind::Reported("broken".into()),
                    },
                });
            }
            Ok(())
        });
        let mut p = BoardProcessor::new("test".into(), Some(Box::new(fake)), FRAMES, 100);
        observe(&mut p, &[1000, 1100, 1200]);
        p.process_pending();
        observe(&mut p, &[1300]);
        p.finish();
        let counts = p.counts();
        assert_eq!(counts.plugin_errors, 1);
        assert_eq!((counts.frames_processed, counts.frames_unprocessed), (2, 2));
        let mut tps = Vec::new();
        p.take_tps(&mut tps);
        assert_eq!(tps.len(), 2);
    }

    /// Without a processor the link's data time alone moves the horizon on.
    #[test]
    fn without_a_processor_the_horizon_follows_the_data() {
        let mut p = BoardProcessor::new("test".into(), None, FRAMES, 100);
        observe(&mut p, &[1000, 1100]);
        p.process_pending();
        assert_eq!(p.horizon(), 1200);
        assert_eq!(p.tps_found(), 0);
    }
}
