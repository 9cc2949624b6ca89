//! A link's trigger primitives kept for a while, time-ordered, and requestable like raw data:
//! a request for `[begin, end)` is answered with one fragment holding every TP of the link
//! that starts in the window (DUNE's TP fragments select by start time too).
//!
//! The readout thread appends whole batches (about one per millisecond of data), so the lock
//! is taken per batch, never per frame or per TP, and the request server holds it only while
//! copying one window's TPs out.

use crate::request::{DataRequest, Lookup, RequestPolicy, RequestStatus, header};
use std::collections::VecDeque;
use std::sync::Mutex;
use swdaq_format::fragment::fragment_error;
use swdaq_format::tp::TP_SIZE;
use swdaq_format::{Fragment, FragmentType, SourceId, TriggerPrimitive};

struct Kept {
    tps: VecDeque<TriggerPrimitive>,
    /// Every TP starting before this has been appended.
    horizon: u64,
    /// TPs starting before this have been evicted (or never kept).
    kept_from: u64,
    /// The most samples over threshold of any TP appended: how far back a TP that still
    /// reaches a given time can have started (ROI readout).
    longest_samples: u16,
}

pub struct TpBuffer {
    pub source_id: SourceId,
    retention_ticks: u64,
    kept: Mutex<Kept>,
}

impl TpBuffer {
    /// A buffer keeping `retention_ticks` of data time, starting empty at `start` (TPs before
    /// it never existed: a request there is answered as not found, not waited for).
    pub fn new(source_id: SourceId, retention_ticks: u64, start: u64) -> Self {
        Self {
            source_id,
            retention_ticks,
            kept: Mutex::new(Kept {
                tps: VecDeque::new(),
                horizon: start,
                kept_from: start,
                longest_samples: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends time-ordered TPs, all starting at or after the previous horizon, and moves the
    /// horizon to `horizon`; TPs older than the retention are evicted.
    pub fn push(&self, tps: &[TriggerPrimitive], horizon: u64) {
        let longest = tps.iter().map(|tp| tp.samples_over_threshold).max();
        let mut k = self.lock();
        k.longest_samples = k.longest_samples.max(longest.unwrap_or(0));
        k.tps.extend(tps.iter().copied());
        k.horizon = k.horizon.max(horizon);
        let keep_from = k.horizon.saturating_sub(self.retention_ticks);
        while k.tps.front().is_some_and(|tp| tp.time_start < keep_from) {
            k.tps.pop_front();
        }
        k.kept_from = k.kept_from.max(keep_from);
    }

    /// Copies into `out` (time-ordered) every kept TP that starts before `to` and whose last
    /// sample is at or after `from`; returns the horizon (every TP starting before it is in).
    pub fn reaching(
        &self,
        from: u64,
        to: u64,
        ticks_per_sample: u64,
        out: &mut Vec<TriggerPrimitive>,
    ) -> u64 {
        let k = self.lock();
        let lookback = k.longest_samples as u64 * ticks_per_sample;
        let first = k
            .tps
            .partition_point(|tp| tp.time_start < from.saturating_sub(lookback));
        let last = k.tps.partition_point(|tp| tp.time_start < to);
        out.extend(
            k.tps
                .range(first..last.max(first))
                .filter(|tp| tp.time_end(ticks_per_sample) >= from),
        );
        k.horizon
    }

    /// Answers `req` (a window on this buffer's source) from what is kept now.
    pub fn lookup(&self, req: &DataRequest, policy: RequestPolicy, timed_out: bool) -> Lookup {
        let (begin, end) = (req.window_begin, req.window_end);
        let answer = |payload: &[u8], error_bits, status| Lookup::Answered {
            fragment: Fragment::assemble(
                header(req, FragmentType::TRIGGER_PRIMITIVE, error_bits),
                std::iter::once(payload),
            ),
            status,
        };
        if begin >= end || end - begin > policy.max_window_ticks {
            return answer(
                &[],
                fragment_error::INVALID_WINDOW,
                RequestStatus::InvalidWindow,
            );
        }
        let k = self.lock();
        if k.horizon < end && !timed_out {
            return Lookup::NotYet;
        }
        let mut error_bits = 0;
        if k.horizon < end {
            error_bits |= fragment_error::TIMED_OUT;
        }
        if k.kept_from >= end || k.horizon <= begin {
            return answer(
                &[],
                error_bits | fragment_error::DATA_NOT_FOUND,
                RequestStatus::NotFound,
            );
        }
        let first = k.tps.partition_point(|tp| tp.time_start < begin);
        let last = k.tps.partition_point(|tp| tp.time_start < end);
        let mut payload = Vec::with_capacity((last - first) * TP_SIZE);
        for tp in k.tps.range(first..last) {
            payload.extend_from_slice(&tp.to_bytes());
        }
        let status = if k.kept_from <= begin && k.horizon >= end {
            RequestStatus::Complete
        } else {
            error_bits |= fragment_error::INCOMPLETE;
            RequestStatus::Partial
        };
        drop(k);
        answer(&payload, error_bits, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::test_request;

    const POLICY: RequestPolicy = RequestPolicy {
        max_window_ticks: 1 << 20,
    };

    fn tp(time_start: u64) -> TriggerPrimitive {
        TriggerPrimitive {
            channel: 7,
            time_start,
            ..Default::default()
        }
    }

    fn request(begin: u64, end: u64) -> DataRequest {
        test_request(SourceId::trigger(0), begin, end)
    }

    fn answered(l: Lookup) -> (Vec<u64>, u32, RequestStatus) {
        let Lookup::Answered { fragment, status } = l else {
            panic!("not answered")
        };
        let f = Fragment::parse(&fragment).unwrap();
        assert_eq!(f.header.fragment_type, FragmentType::TRIGGER_PRIMITIVE);
        let times = TriggerPrimitive::decode_all(f.payload)
            .unwrap()
            .iter()
            .map(|tp| tp.time_start)
            .collect();
        (times, f.header.error_bits, status)
    }

    #[test]
    fn a_window_gets_exactly_the_tps_starting_inside_it_edges_included_and_excluded() {
        let b = TpBuffer::new(SourceId::trigger(0), 10_000, 0);
        b.push(&[tp(99), tp(100), tp(150), tp(199), tp(200)], 300);
        let (times, bits, status) = answered(b.lookup(&request(100, 200), POLICY, false));
        assert_eq!(times, [100, 150, 199]);
        assert_eq!((bits, status), (0, RequestStatus::Complete));
        let (times, bits, status) = answered(b.lookup(&request(201, 299), POLICY, false));
        assert!(times.is_empty(), "no hits is a complete answer");
        assert_eq!((bits, status), (0, RequestStatus::Complete));
    }

    #[test]
    fn a_window_not_yet_reached_waits_then_times_out_partial() {
        let b = TpBuffer::new(SourceId::trigger(0), 10_000, 0);
        b.push(&[tp(100)], 150);
        assert!(matches!(
            b.lookup(&request(50, 200), POLICY, false),
            Lookup::NotYet
        ));
        let (times, bits, status) = answered(b.lookup(&request(50, 200), POLICY, true));
        assert_eq!(times, [100]);
        assert_eq!(bits, fragment_error::TIMED_OUT | fragment_error::INCOMPLETE);
        assert_eq!(status, RequestStatus::Partial);
    }

    #[test]
    fn evicted_windows_are_not_found_and_half_evicted_ones_partial() {
        let b = TpBuffer::new(SourceId::trigger(0), 1_000, 0);
        b.push(&[tp(10), tp(500), tp(1500)], 2_000);
        let (_, bits, status) = answered(b.lookup(&request(0, 900), POLICY, false));
        assert_eq!(status, RequestStatus::NotFound);
        assert_ne!(bits & fragment_error::DATA_NOT_FOUND, 0);
        let (times, _, status) = answered(b.lookup(&request(900, 1600), POLICY, false));
        assert_eq!((times, status), (vec![1500], RequestStatus::Partial));
    }

    #[test]
    fn reaching_finds_long_hits_that_started_well_before() {
        let b = TpBuffer::new(SourceId::trigger(0), 1_000_000, 0);
        let long = TriggerPrimitive {
            samples_over_threshold: 100,
            ..tp(1_000)
        };
        b.push(&[tp(500), long, tp(3_000), tp(5_000)], 6_000);
        let mut out = Vec::new();
        // The long hit (samples 1000..1099 at 32 ticks) reaches 4000; tp(500) does not.
        assert_eq!(b.reaching(4_000, 5_000, 32, &mut out), 6_000);
        assert_eq!(out, [long]);
        out.clear();
        b.reaching(0, 5_001, 32, &mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn reversed_or_too_wide_windows_are_invalid() {
        let b = TpBuffer::new(SourceId::trigger(0), 1_000, 0);
        let (_, bits, status) = answered(b.lookup(&request(10, 10), POLICY, false));
        assert_eq!(
            (bits, status),
            (fragment_error::INVALID_WINDOW, RequestStatus::InvalidWindow)
        );
        let (_, _, status) = answered(b.lookup(&request(0, 1 << 21), POLICY, false));
        assert_eq!(status, RequestStatus::InvalidWindow);
    }
}
