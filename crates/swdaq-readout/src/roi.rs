//! ROI readout: a request for a link's window answered with only the regions of interest
//! around the link's trigger primitives (`swdaq_tpg::roi`), as an ROI fragment
//! (`swdaq_format::roi`), instead of every frame of the window.
//!
//! Everything happens in the request server, on a pinned view of the latency buffer and a
//! copy of the TPs from the link's TP buffer: ingest gains no copy and no lock. Hit finding
//! runs behind the frames (a hit still open at the window's end has no TP yet), so a request
//! waits until the link's TP horizon has passed the window's end plus the regions' reach
//! (margin + one block); at the time-out it is answered with the TPs there are, flagged
//! `TimedOut | Incomplete` and counted (`tps_cut`).

use crate::checks::ErrorInterval;
use crate::request::{DataRequest, RequestPolicy, RequestStatus, Selection, header, select};
use crate::ring::PinnedView;
use crate::tp_buffer::TpBuffer;
use std::collections::HashMap;
use std::sync::Arc;
use swdaq_format::fragment::{FRAGMENT_HEADER_SIZE, fragment_error};
use swdaq_format::protowib::ProtoWibFrame;
use swdaq_format::roi::RoiPayloadWriter;
use swdaq_format::wibeth::WibEthFrame;
use swdaq_format::{Fragment, FragmentType, FrameFormat, SourceId, TriggerPrimitive};
use swdaq_tpg::config::ConfigError;
use swdaq_tpg::{RegionOfInterest, RoiBuilder, RoiConfig};

/// What a link needs to answer in regions of interest.
pub struct RoiLink {
    /// The link's raw-data source id (what requests name).
    pub source_id: SourceId,
    tps: Arc<TpBuffer>,
    config: RoiConfig,
    format: FrameFormat,
    /// Per channel group: the frame's channel indices in it and their offline ids.
    groups: HashMap<u32, (Vec<usize>, Vec<u32>)>,
    /// How far past a window's end a TP can start and still widen a region into it.
    reach_ticks: u64,
}

impl RoiLink {
    /// `channel_ids[c]` is the offline id of the frame's channel `c`.
    pub fn new(
        source_id: SourceId,
        config: RoiConfig,
        format: FrameFormat,
        channel_ids: &[u32],
        tps: Arc<TpBuffer>,
    ) -> Result<Self, ConfigError> {
        RoiBuilder::new(config, format.ticks_per_sample())?;
        let mut groups: HashMap<u32, (Vec<usize>, Vec<u32>)> = HashMap::new();
        for (c, &id) in channel_ids.iter().enumerate().take(format.channels()) {
            let group = groups.entry(id / config.group_channels).or_default();
            group.0.push(c);
            group.1.push(id);
        }
        Ok(Self {
            source_id,
            tps,
            reach_ticks: (config.margin_samples as u64 + config.block_samples as u64)
                * format.ticks_per_sample(),
            config,
            format,
            groups,
        })
    }
}

/// An ROI answer, with what the summary counts.
#[derive(Debug)]
pub struct RoiAnswer {
    pub fragment: Vec<u8>,
    pub status: RequestStatus,
    /// The fragment's size had it held every frame of the window.
    pub full_window_bytes: u64,
    /// The TPs had not reached past the window by the time-out: regions may be missing.
    pub tps_cut: bool,
}

/// Answers `req` with the regions of interest of `link` in the frames of `view` (`None`:
/// the frames or the TPs are not there yet; ask again, or with `timed_out`).
pub fn roi_lookup(
    view: &PinnedView<'_>,
    req: &DataRequest,
    policy: RequestPolicy,
    errors: &[ErrorInterval],
    timed_out: bool,
    link: &RoiLink,
) -> Option<RoiAnswer> {
    let Selection::Frames {
        frames,
        mut error_bits,
        mut status,
    } = select(view, link.format, req, policy, errors, timed_out)
    else {
        return None;
    };
    let (begin, end) = (req.window_begin, req.window_end);
    let tick = link.format.ticks_per_sample();
    let mut tps = Vec::new();
    let mut tps_cut = false;
    if !frames.is_empty() {
        let reach_end = end.saturating_add(link.reach_ticks);
        let horizon = link.tps.reaching(
            begin.saturating_sub(link.reach_ticks),
            reach_end,
            tick,
            &mut tps,
        );
        if horizon < reach_end {
            if !timed_out {
                return None;
            }
            tps_cut = true;
            error_bits |= fragment_error::TIMED_OUT | fragment_error::INCOMPLETE;
            status = RequestStatus::Partial;
        }
    }
    let full_window_bytes =
        (FRAGMENT_HEADER_SIZE + frames.clone().map(|i| view.frame(i).len()).sum::<usize>()) as u64;
    let parsed: Vec<(u64, FrameAdcs<'_>)> = if tps.is_empty() {
        Vec::new()
    } else {
        frames
            .filter_map(|i| {
                let parsed = FrameAdcs::parse(link.format, view.frame(i));
                // An unreadable frame is left out: its samples split the region around it.
                error_bits |= parsed.is_none() as u32 * fragment_error::DATA_ERROR;
                Some((view.meta(i).timestamp, parsed?))
            })
            .collect()
    };
    let mut writer = RoiPayloadWriter::new(tick as u32);
    for region in regions_of(&tps, link) {
        let Some((channels, ids)) = link.groups.get(&region.channel_group) else {
            continue;
        };
        let (from, to) = (region.begin_ts.max(begin), region.end_ts.min(end));
        for piece in pieces(&parsed, from, to, link.format) {
            let samples: usize = piece.iter().map(|(_, s)| s.len()).sum();
            let mut adcs = Vec::with_capacity(channels.len() * samples);
            for &c in channels {
                for (frame, range) in &piece {
                    adcs.extend(range.clone().map(|s| parsed[*frame].1.adc(s, c)));
                }
            }
            let (first_frame, first_samples) = &piece[0];
            let first_ts = parsed[*first_frame].0 + first_samples.start as u64 * tick;
            writer.push(first_ts, region.channel_group, ids, samples, &adcs);
        }
    }
    let fragment = Fragment::assemble(
        header(req, FragmentType::ROI, error_bits),
        [&writer.finish(full_window_bytes)[..]],
    );
    Some(RoiAnswer {
        fragment,
        status,
        full_window_bytes,
        tps_cut,
    })
}

/// The regions of `tps`, by start time then channel group.
fn regions_of(tps: &[TriggerPrimitive], link: &RoiLink) -> Vec<RegionOfInterest> {
    let mut builder = RoiBuilder::new(link.config, link.format.ticks_per_sample())
        .expect("checked by RoiLink::new");
    let mut regions = Vec::new();
    builder.push(tps, &mut regions);
    builder.flush(&mut regions);
    regions.sort_by_key(|r| (r.begin_ts, r.channel_group));
    regions
}

/// The samples of `frames` overlapping `[from, to)`, as runs of consecutive frames: each run
/// a list of (frame position, sample range in it). A gap in the data starts a new run.
fn pieces(
    frames: &[(u64, FrameAdcs<'_>)],
    from: u64,
    to: u64,
    format: FrameFormat,
) -> Vec<Vec<(usize, std::ops::Range<usize>)>> {
    let (tick, step) = (format.ticks_per_sample(), format.ticks_per_frame());
    let mut out: Vec<Vec<(usize, std::ops::Range<usize>)>> = Vec::new();
    let mut previous: Option<u64> = None;
    let first = frames.partition_point(|(ts, _)| ts + step <= from);
    for (k, (ts, _)) in frames.iter().enumerate().skip(first) {
        if *ts >= to {
            break;
        }
        // Sample s covers [ts + s * tick, ts + (s + 1) * tick).
        let a = (from.saturating_sub(*ts) / tick) as usize;
        let b = ((to - ts).div_ceil(tick) as usize).min(format.samples_per_frame());
        if a >= b {
            continue;
        }
        if previous != Some(ts.wrapping_sub(step)) || out.is_empty() {
            out.push(Vec::new());
        }
        out.last_mut().expect("pushed above").push((k, a..b));
        previous = Some(*ts);
    }
    out
}

/// A frame parsed once for reading ADCs.
enum FrameAdcs<'a> {
    WibEth(WibEthFrame<'a>),
    ProtoWib(ProtoWibFrame<'a>),
}

impl<'a> FrameAdcs<'a> {
    fn parse(format: FrameFormat, bytes: &'a [u8]) -> Option<Self> {
        match format {
            FrameFormat::WibEth => WibEthFrame::parse(bytes).ok().map(Self::WibEth),
            FrameFormat::ProtoWib => ProtoWibFrame::parse(bytes).ok().map(Self::ProtoWib),
            // A detector's own payload has no ADCs swdaq reads (configurations refuse ROI).
            FrameFormat::Board(_) => None,
        }
    }

    fn adc(&self, sample: usize, channel: usize) -> u16 {
        match self {
            Self::WibEth(f) => f.adc(sample, channel),
            Self::ProtoWib(f) => f.adc(channel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::frame_flags;
    use crate::request::{Lookup, lookup, test_request};
    use crate::ring::{LatencyBuffer, SlotMeta};
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::roi::RoiPayload;
    use swdaq_format::wibeth::{self, WibEthHeader};

    const STEP: u64 = wibeth::TICKS_PER_FRAME;
    const TICK: u64 = wibeth::TICKS_PER_SAMPLE;
    /// A multiple of both the 12-sample block and the 64-sample frame.
    const T0: u64 = 192 * 1000 * TICK;
    const POLICY: RequestPolicy = RequestPolicy {
        max_window_ticks: 1 << 24,
    };

    /// Every sample's value: a function of channel and time, so any misplaced copy shows.
    fn value(channel: usize, ts: u64) -> u16 {
        ((channel as u64 * 7919 + ts / TICK) % 16384) as u16
    }

    /// Frames `numbers` (timestamp T0 + n * STEP) with `value` ADCs.
    fn buffer_with(numbers: &[u64]) -> LatencyBuffer {
        let b = LatencyBuffer::new(256, wibeth::FRAME_SIZE).unwrap();
        let mut p = b.producer().unwrap();
        let mut prev = None;
        for &n in numbers {
            let ts = T0 + n * STEP;
            let adcs =
                std::array::from_fn(|s| std::array::from_fn(|c| value(c, ts + s as u64 * TICK)));
            let daq = DaqEthHeader {
                timestamp: ts,
                ..Default::default()
            };
            let slot = p.next_slot().unwrap();
            wibeth::encode(&daq, &WibEthHeader::healthy(), &adcs, slot);
            let gap = prev.is_some_and(|p| n != p + 1);
            p.publish(SlotMeta {
                timestamp: ts,
                len: wibeth::FRAME_SIZE as u32,
                flags: if gap { frame_flags::GAP_BEFORE } else { 0 },
            });
            prev = Some(n);
        }
        drop(p);
        b
    }

    /// Offline channel 1000 + c for frame channel c: groups 62 (c 0..8), 63 (8..24), ...
    fn link(tps: Arc<TpBuffer>) -> RoiLink {
        let ids: Vec<u32> = (1000..1064).collect();
        RoiLink::new(
            SourceId::readout(0),
            RoiConfig::default(),
            FrameFormat::WibEth,
            &ids,
            tps,
        )
        .unwrap()
    }

    fn tp(channel: u32, sample: u64, samples: u16) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start: T0 + sample * TICK,
            samples_over_threshold: samples,
            ..Default::default()
        }
    }

    fn request(begin: u64, end: u64) -> DataRequest {
        test_request(SourceId::readout(0), begin, end)
    }

    fn ask(
        b: &LatencyBuffer,
        link: &RoiLink,
        req: &DataRequest,
        timed_out: bool,
    ) -> Option<RoiAnswer> {
        let mut r = b.reader().unwrap();
        r.with_view(b.oldest_readable(), |v| {
            roi_lookup(v, req, POLICY, &[], timed_out, link)
        })
        .unwrap()
    }

    fn full_fragment_len(b: &LatencyBuffer, req: &DataRequest) -> usize {
        let mut r = b.reader().unwrap();
        let l = r
            .with_view(b.oldest_readable(), |v| {
                lookup(v, FrameFormat::WibEth, req, POLICY, &[], true)
            })
            .unwrap();
        let Lookup::Answered { fragment, .. } = l else {
            panic!("timed out answers")
        };
        fragment.len()
    }

    /// (group, channel ids, first ts, samples), every ADC checked against `value`.
    fn regions(answer: &RoiAnswer) -> Vec<(u32, Vec<u32>, u64, usize)> {
        let f = Fragment::parse(&answer.fragment).unwrap();
        assert_eq!(f.header.fragment_type, FragmentType::ROI);
        let p = RoiPayload::parse(f.payload).unwrap();
        assert_eq!(p.full_window_bytes, answer.full_window_bytes);
        p.regions()
            .map(|r| {
                for c in 0..r.channels {
                    for s in 0..r.samples {
                        let channel = (r.channel_id(c) - 1000) as usize;
                        let ts = r.first_timestamp + s as u64 * TICK;
                        assert_eq!(r.adc(c, s), value(channel, ts), "channel {channel} at {ts}");
                    }
                }
                (
                    r.channel_group,
                    r.channel_ids().collect(),
                    r.first_timestamp,
                    r.samples,
                )
            })
            .collect()
    }

    #[test]
    fn regions_hold_exactly_the_frames_samples_around_the_tps() {
        let b = buffer_with(&(0..40).collect::<Vec<_>>());
        let tps = Arc::new(TpBuffer::new(SourceId::trigger(0), u64::MAX, 0));
        // Channel 1010 (group 63) samples 1000..1005, block 83 (996..1008) -> 946..1058.
        tps.push(&[tp(1010, 1000, 5)], T0 + 2000 * TICK);
        let link = link(tps);
        let req = request(T0 + 900 * TICK, T0 + 1500 * TICK);
        let answer = ask(&b, &link, &req, false).unwrap();
        assert_eq!(
            (answer.status, answer.tps_cut),
            (RequestStatus::Complete, false)
        );
        assert_eq!(answer.full_window_bytes, full_fragment_len(&b, &req) as u64);
        assert!(answer.fragment.len() < answer.full_window_bytes as usize / 10);
        assert_eq!(
            regions(&answer),
            [(63, (1008..1024).collect(), T0 + 946 * TICK, 1058 - 946)]
        );
        // Clipped to the window.
        let req = request(T0 + 1000 * TICK, T0 + 1020 * TICK);
        assert_eq!(
            regions(&ask(&b, &link, &req, false).unwrap()),
            [(63, (1008..1024).collect(), T0 + 1000 * TICK, 20)]
        );
        // No TP, no region.
        let req = request(T0 + 1100 * TICK, T0 + 1500 * TICK);
        assert!(regions(&ask(&b, &link, &req, false).unwrap()).is_empty());
    }

    #[test]
    fn a_gap_splits_a_region_and_a_long_hit_from_before_the_window_still_counts() {
        // Frame 16 (samples 1024..1088) missing.
        let numbers: Vec<u64> = (0..40).filter(|&n| n != 16).collect();
        let b = buffer_with(&numbers);
        let tps = Arc::new(TpBuffer::new(SourceId::trigger(0), u64::MAX, 0));
        // Samples 500..1100 over threshold on channel 1000 (group 62: ids 992..1008 -> 1000..1008).
        tps.push(&[tp(1000, 500, 600)], T0 + 2000 * TICK);
        let link = link(tps);
        let req = request(T0 + 1000 * TICK, T0 + 1200 * TICK);
        let answer = ask(&b, &link, &req, false).unwrap();
        assert_eq!(answer.status, RequestStatus::Partial, "the gap");
        let ids: Vec<u32> = (1000..1008).collect();
        // Region 500 - 8 - 50 .. 1104 + 50 = 1154, cut by the gap at 1024..1088.
        assert_eq!(
            regions(&answer),
            [
                (62, ids.clone(), T0 + 1000 * TICK, 24),
                (62, ids, T0 + 1088 * TICK, 1154 - 1088)
            ]
        );
    }

    #[test]
    fn waits_for_the_tps_to_pass_the_window_then_answers_cut_at_the_time_out() {
        let b = buffer_with(&(0..40).collect::<Vec<_>>());
        let tps = Arc::new(TpBuffer::new(SourceId::trigger(0), u64::MAX, 0));
        tps.push(&[tp(1010, 1000, 5)], T0 + 1100 * TICK);
        let link = link(tps.clone());
        let req = request(T0 + 900 * TICK, T0 + 1100 * TICK);
        assert!(
            ask(&b, &link, &req, false).is_none(),
            "a TP up to 62 samples later may widen a region into the window"
        );
        let cut = ask(&b, &link, &req, true).unwrap();
        assert!(cut.tps_cut);
        assert_eq!(cut.status, RequestStatus::Partial);
        let bits = Fragment::parse(&cut.fragment).unwrap().header.error_bits;
        assert_eq!(bits, fragment_error::TIMED_OUT | fragment_error::INCOMPLETE);
        tps.push(&[], T0 + 1162 * TICK);
        assert!(!ask(&b, &link, &req, false).unwrap().tps_cut);
    }
}
