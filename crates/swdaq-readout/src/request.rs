//! Data requests: a trigger asks a link for the frames overlapping a time window
//! `[begin, end)` and gets exactly one fragment back, flagged when it is not complete.

use crate::checks::{ErrorInterval, frame_flags};
use crate::ring::PinnedView;
use swdaq_format::FrameFormat;
use swdaq_format::fragment::fragment_error;
use swdaq_format::{DETECTOR_ID_HD_TPC, Fragment, FragmentHeader, FragmentType, SourceId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DataRequest {
    pub trigger_number: u64,
    pub trigger_timestamp: u64,
    pub run_number: u32,
    pub sequence_number: u16,
    pub source: SourceId,
    pub window_begin: u64,
    pub window_end: u64,
    /// The record builder that wants the answer (its element id), so a readout application
    /// serving several builders knows where the fragment goes; 0 in one process.
    pub destination: u32,
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RequestStatus {
    /// Every frame of the window is in the fragment.
    Complete,
    /// Some frames are missing (evicted, never arrived, or not there by the time-out).
    Partial,
    /// Nothing of the window is left (or ever came): an empty fragment.
    NotFound,
    /// The window is empty, reversed or wider than allowed: an empty fragment.
    InvalidWindow,
}

/// The result of looking a request up now.
#[derive(Debug)]
pub enum Lookup {
    Answered {
        fragment: Vec<u8>,
        status: RequestStatus,
    },
    /// The end of the window has not arrived yet: ask again later (or time out).
    NotYet,
}

/// Limits a link applies to requests.
#[derive(Debug, Clone, Copy)]
pub struct RequestPolicy {
    pub max_window_ticks: u64,
}

/// Which frames of a view answer a request, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Buffer indices of the window's frames (empty for an empty answer).
    Frames {
        frames: std::ops::Range<u64>,
        error_bits: u32,
        status: RequestStatus,
    },
    /// The end of the window has not arrived yet: ask again later (or time out).
    NotYet,
}

/// Answers `req` from the frames in `view`. `timed_out` turns "not yet" into a partial or
/// empty answer flagged `TIMED_OUT`; `errors` are the link's known bad intervals.
pub fn lookup(
    view: &PinnedView<'_>,
    format: FrameFormat,
    req: &DataRequest,
    policy: RequestPolicy,
    errors: &[ErrorInterval],
    timed_out: bool,
) -> Lookup {
    match select(view, format, req, policy, errors, timed_out) {
        Selection::NotYet => Lookup::NotYet,
        // The fragment is sized once and filled from the slots.
        Selection::Frames {
            frames,
            error_bits,
            status,
        } => Lookup::Answered {
            fragment: Fragment::assemble(
                header(req, format.fragment_type(), error_bits),
                frames.map(|i| view.frame(i)),
            ),
            status,
        },
    }
}

/// The frames of `view` that answer `req` (see [`lookup`]).
pub fn select(
    view: &PinnedView<'_>,
    format: FrameFormat,
    req: &DataRequest,
    policy: RequestPolicy,
    errors: &[ErrorInterval],
    timed_out: bool,
) -> Selection {
    let step = format.ticks_per_frame();
    let (begin, end) = (req.window_begin, req.window_end);
    let answer = |frames, error_bits, status| Selection::Frames {
        frames,
        error_bits,
        status,
    };
    if begin >= end || end - begin > policy.max_window_ticks {
        return answer(
            0..0,
            fragment_error::INVALID_WINDOW,
            RequestStatus::InvalidWindow,
        );
    }
    let newest_end = (view.first..view.end)
        .next_back()
        .map(|i| view.meta(i).timestamp + step);
    if newest_end.is_none_or(|t| t < end) && !timed_out {
        return Selection::NotYet;
    }
    let first = first_overlapping(view, begin, step);
    let last = (first..view.end)
        .find(|&i| view.meta(i).timestamp >= end)
        .unwrap_or(view.end);
    let mut error_bits = 0;
    if timed_out && newest_end.is_none_or(|t| t < end) {
        error_bits |= fragment_error::TIMED_OUT;
    }
    if errors.iter().any(|e| e.begin < end && e.end > begin) {
        error_bits |= fragment_error::DATA_ERROR;
    }
    if first == last {
        return answer(
            0..0,
            error_bits | fragment_error::DATA_NOT_FOUND,
            RequestStatus::NotFound,
        );
    }
    let covers_begin = view.meta(first).timestamp <= begin;
    let covers_end = view.meta(last - 1).timestamp + step >= end;
    let contiguous = (first + 1..last).all(|i| {
        let m = view.meta(i);
        m.flags & frame_flags::GAP_BEFORE == 0 && m.timestamp == view.meta(i - 1).timestamp + step
    });
    let status = if covers_begin && covers_end && contiguous {
        RequestStatus::Complete
    } else {
        error_bits |= fragment_error::INCOMPLETE;
        RequestStatus::Partial
    };
    answer(first..last, error_bits, status)
}

/// Index of the first frame that ends after `begin`: O(1) for gap-free fixed-rate data,
/// binary search otherwise.
fn first_overlapping(view: &PinnedView<'_>, begin: u64, step: u64) -> u64 {
    if view.first == view.end {
        return view.end;
    }
    let overlaps = |i: u64| view.meta(i).timestamp + step > begin;
    let oldest = view.meta(view.first).timestamp;
    let guess = view.first + begin.saturating_sub(oldest) / step;
    if guess < view.end && overlaps(guess) && (guess == view.first || !overlaps(guess - 1)) {
        return guess;
    }
    // Timestamps increase along the ring (a backwards jump breaks this only around itself).
    let (mut lo, mut hi) = (view.first, view.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if overlaps(mid) {
            hi = mid
        } else {
            lo = mid + 1
        }
    }
    lo
}

/// The header of the fragment answering `req`, before its size is known.
pub fn header(req: &DataRequest, fragment_type: FragmentType, error_bits: u32) -> FragmentHeader {
    FragmentHeader {
        size: 0,
        trigger_number: req.trigger_number,
        trigger_timestamp: req.trigger_timestamp,
        window_begin: req.window_begin,
        window_end: req.window_end,
        run_number: req.run_number,
        error_bits,
        fragment_type,
        sequence_number: req.sequence_number,
        detector_id: DETECTOR_ID_HD_TPC,
        element_id: req.source,
    }
}

/// Tests' request for `[begin, end)` of `source` (trigger 1, run 1).
#[cfg(test)]
pub(crate) fn test_request(source: SourceId, begin: u64, end: u64) -> DataRequest {
    DataRequest {
        trigger_number: 1,
        trigger_timestamp: begin,
        run_number: 1,
        sequence_number: 0,
        source,
        window_begin: begin,
        window_end: end,
        destination: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{LatencyBuffer, SlotMeta};
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthFrame, WibEthHeader};

    const STEP: u64 = 2048;
    const T0: u64 = 1_000_000;
    const POLICY: RequestPolicy = RequestPolicy {
        max_window_ticks: 1 << 20,
    };

    /// A buffer holding frames with the given frame numbers (timestamp T0 + n * STEP).
    fn buffer_with(frame_numbers: &[u64], capacity: usize) -> LatencyBuffer {
        let b = LatencyBuffer::new(capacity, wibeth::FRAME_SIZE).unwrap();
        let mut p = b.producer().unwrap();
        let mut prev = None;
        for &n in frame_numbers {
            let ts = T0 + n * STEP;
            let slot = p.next_slot().unwrap();
            let daq = DaqEthHeader {
                timestamp: ts,
                seq_id: n as u16,
                ..Default::default()
            };
            wibeth::encode(
                &daq,
                &WibEthHeader::healthy(),
                &[[n as u16; 64]; 64],
                &mut slot[..wibeth::FRAME_SIZE],
            );
            let gap = prev.is_some_and(|p| n != p + 1);
            let flags = if gap { frame_flags::GAP_BEFORE } else { 0 };
            p.publish(SlotMeta {
                timestamp: ts,
                len: wibeth::FRAME_SIZE as u32,
                flags,
            });
            prev = Some(n);
        }
        drop(p);
        b
    }

    fn request(begin: u64, end: u64) -> DataRequest {
        DataRequest {
            trigger_number: 42,
            trigger_timestamp: begin,
            run_number: 7,
            sequence_number: 0,
            source: SourceId::readout(3),
            window_begin: begin,
            window_end: end,
            destination: 0,
        }
    }

    fn ask(
        b: &LatencyBuffer,
        begin: u64,
        end: u64,
        timed_out: bool,
        errors: &[ErrorInterval],
    ) -> Option<(Vec<u64>, RequestStatus, u32)> {
        let mut r = b.reader().unwrap();
        let from = b.oldest_readable();
        let lookup = r
            .with_view(from, |v| {
                lookup(
                    v,
                    FrameFormat::WibEth,
                    &request(begin, end),
                    POLICY,
                    errors,
                    timed_out,
                )
            })
            .unwrap();
        match lookup {
            Lookup::NotYet => None,
            Lookup::Answered { fragment, status } => {
                let f = Fragment::parse(&fragment).unwrap();
                assert_eq!(f.header.element_id, SourceId::readout(3));
                assert_eq!((f.header.window_begin, f.header.window_end), (begin, end));
                let frames = f
                    .payload
                    .chunks_exact(wibeth::FRAME_SIZE)
                    .map(|c| (WibEthFrame::parse(c).unwrap().timestamp() - T0) / STEP)
                    .collect();
                Some((frames, status, f.header.error_bits))
            }
        }
    }

    fn ts(n: u64) -> u64 {
        T0 + n * STEP
    }

    #[test]
    fn window_edges_select_exactly_the_overlapping_frames() {
        let b = buffer_with(&(0..100).collect::<Vec<_>>(), 128);
        // Aligned window: frames 10..20.
        assert_eq!(
            ask(&b, ts(10), ts(20), false, &[]).unwrap(),
            ((10..20).collect(), RequestStatus::Complete, 0)
        );
        // One tick inside frame 9's end / frame 20's start pulls those frames in.
        assert_eq!(
            ask(&b, ts(10) - 1, ts(20) + 1, false, &[]).unwrap().0,
            (9..21).collect::<Vec<_>>()
        );
        // A window inside one frame returns that frame.
        assert_eq!(
            ask(&b, ts(30) + 5, ts(30) + 6, false, &[]).unwrap().0,
            vec![30]
        );
        // End is exclusive: [ts(40), ts(41)) is frame 40 only.
        assert_eq!(ask(&b, ts(40), ts(41), false, &[]).unwrap().0, vec![40]);
    }

    #[test]
    fn invalid_windows_get_an_empty_flagged_fragment() {
        let b = buffer_with(&(0..10).collect::<Vec<_>>(), 16);
        for (begin, end) in [(ts(5), ts(5)), (ts(6), ts(5)), (ts(0), ts(0) + (1 << 21))] {
            let (frames, status, bits) = ask(&b, begin, end, false, &[]).unwrap();
            assert!(frames.is_empty());
            assert_eq!(status, RequestStatus::InvalidWindow);
            assert_eq!(bits, fragment_error::INVALID_WINDOW);
        }
    }

    #[test]
    fn future_data_waits_then_times_out_partial() {
        let b = buffer_with(&(0..10).collect::<Vec<_>>(), 16);
        assert!(
            ask(&b, ts(8), ts(12), false, &[]).is_none(),
            "must wait for frames 10 and 11"
        );
        let (frames, status, bits) = ask(&b, ts(8), ts(12), true, &[]).unwrap();
        assert_eq!((frames, status), (vec![8, 9], RequestStatus::Partial));
        assert_eq!(bits, fragment_error::INCOMPLETE | fragment_error::TIMED_OUT);
        let (frames, status, bits) = ask(&b, ts(20), ts(22), true, &[]).unwrap();
        assert_eq!((frames.len(), status), (0, RequestStatus::NotFound));
        assert_eq!(
            bits,
            fragment_error::DATA_NOT_FOUND | fragment_error::TIMED_OUT
        );
    }

    #[test]
    fn evicted_data_is_not_found_or_partial() {
        // Capacity 16, guard 1: of frames 0..40 only 25..40 are readable.
        let b = buffer_with(&(0..40).collect::<Vec<_>>(), 16);
        let (frames, status, bits) = ask(&b, ts(5), ts(10), false, &[]).unwrap();
        assert_eq!(
            (frames.len(), status, bits),
            (0, RequestStatus::NotFound, fragment_error::DATA_NOT_FOUND)
        );
        let (frames, status, bits) = ask(&b, ts(20), ts(27), false, &[]).unwrap();
        assert_eq!(
            (frames, status, bits),
            (
                vec![25, 26],
                RequestStatus::Partial,
                fragment_error::INCOMPLETE
            )
        );
    }

    #[test]
    fn gaps_and_error_intervals_flag_the_fragment() {
        let numbers: Vec<u64> = (0..50).filter(|n| !(20..23).contains(n)).collect();
        let b = buffer_with(&numbers, 64);
        let (frames, status, bits) = ask(&b, ts(18), ts(25), false, &[]).unwrap();
        assert_eq!(
            (frames, status),
            (vec![18, 19, 23, 24], RequestStatus::Partial)
        );
        assert_eq!(bits, fragment_error::INCOMPLETE);
        let bad = [ErrorInterval {
            begin: ts(30) + 1,
            end: ts(31),
            flags: frame_flags::HEADER_ERROR,
        }];
        let (_, status, bits) = ask(&b, ts(30), ts(32), false, &bad).unwrap();
        assert_eq!(
            (status, bits),
            (RequestStatus::Complete, fragment_error::DATA_ERROR)
        );
        let (_, _, bits) = ask(&b, ts(31), ts(32), false, &bad).unwrap();
        assert_eq!(
            bits, 0,
            "an interval ending where the window begins does not touch it"
        );
    }

    #[test]
    fn lookup_after_a_gap_uses_the_search_path() {
        let numbers: Vec<u64> = (0..10).chain(1000..1100).collect();
        let b = buffer_with(&numbers, 128);
        assert_eq!(
            ask(&b, ts(1050), ts(1052), false, &[]).unwrap().0,
            vec![1050, 1051]
        );
        assert_eq!(ask(&b, ts(5), ts(7), false, &[]).unwrap().0, vec![5, 6]);
    }

    proptest::proptest! {
        #[test]
        fn any_window_returns_exactly_the_overlapping_frames(begin_off in 0u64..60 * STEP, len in 1u64..20 * STEP) {
            let b = buffer_with(&(0..64).collect::<Vec<_>>(), 128);
            let (begin, end) = (T0 + begin_off, T0 + begin_off + len);
            let expected: Vec<u64> = (0..64).filter(|&n| ts(n) < end && ts(n) + STEP > begin).collect();
            match ask(&b, begin, end, true, &[]) {
                Some((frames, _, _)) => proptest::prop_assert_eq!(frames, expected),
                None => proptest::prop_assert!(false, "timed-out lookups always answer"),
            }
        }
    }
}
