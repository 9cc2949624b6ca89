//! Merging the per-link TP streams into one time-ordered stream.
//!
//! Each link sends its TPs time-ordered with a *horizon*: every TP of that link starting
//! before it has been sent. The merged stream releases TPs up to the smallest horizon of the
//! live links, so its order is exact. A link whose horizon has not moved for the late-link
//! wait (wall clock) is left out of that minimum, so one silent link delays the trigger by a
//! bounded time and never stops it; TPs it sends later that fall before what was already
//! released are late: counted and dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use swdaq_format::TriggerPrimitive;

/// TPs from one link, as the readout releases them.
#[derive(Debug, Clone)]
pub struct TpBatch {
    /// The link's index among the merger's inputs.
    pub link: usize,
    /// Time-ordered by `time_start`.
    pub tps: Vec<TriggerPrimitive>,
    /// Every TP of this link with `time_start < horizon` has been sent.
    pub horizon: u64,
    /// When the readout released this batch: the start of the trigger-latency clock.
    pub released_at: Instant,
}

struct LinkInput {
    queue: VecDeque<TriggerPrimitive>,
    horizon: u64,
    /// Wall time the horizon last moved, and when the batch that moved it was released.
    advanced_at: Instant,
    released_at: Instant,
    ended: bool,
    stale: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MergeCounts {
    pub tps_in: u64,
    /// TPs that arrived after the merged stream had passed their time (a late link).
    pub late_tps: u64,
    /// Times a link was left out of the horizon for being silent too long.
    pub stale_link_events: u64,
}

pub struct TpMerger {
    links: Vec<LinkInput>,
    late_wait: Duration,
    /// Every TP with `time_start < released_to` has been released.
    released_to: u64,
    /// (merged horizon, when the data completing it was released by the readout).
    horizon_times: VecDeque<(u64, Instant)>,
    pub counts: MergeCounts,
}

impl TpMerger {
    pub fn new(links: usize, late_wait: Duration, now: Instant) -> Self {
        Self {
            links: (0..links)
                .map(|_| LinkInput {
                    queue: VecDeque::new(),
                    horizon: 0,
                    advanced_at: now,
                    released_at: now,
                    ended: false,
                    stale: false,
                })
                .collect(),
            late_wait,
            released_to: 0,
            horizon_times: VecDeque::new(),
            counts: MergeCounts::default(),
        }
    }

    /// Takes a batch in; a batch naming an unknown link is refused (its TPs counted as late).
    pub fn push(&mut self, batch: TpBatch, now: Instant) {
        self.counts.tps_in += batch.tps.len() as u64;
        let Some(link) = self.links.get_mut(batch.link) else {
            self.counts.late_tps += batch.tps.len() as u64;
            return;
        };
        for tp in batch.tps {
            if tp.time_start < self.released_to {
                self.counts.late_tps += 1;
            } else {
                link.queue.push_back(tp);
            }
        }
        if batch.horizon > link.horizon {
            link.horizon = batch.horizon;
            link.advanced_at = now;
            link.released_at = batch.released_at;
            link.stale = false;
        }
    }

    /// The link sends nothing more (its source ended): it no longer holds the stream back.
    pub fn end_link(&mut self, link: usize) {
        if let Some(l) = self.links.get_mut(link) {
            l.ended = true;
        }
    }

    /// The merged horizon now: the smallest horizon of the links still live and not silent
    /// for longer than the late-link wait; with none left, the largest horizon seen.
    fn horizon(&mut self, now: Instant) -> (u64, Instant) {
        let mut live: Option<(u64, Instant)> = None;
        let mut any = (self.released_to, now);
        for l in &mut self.links {
            if l.horizon > any.0 {
                any = (l.horizon, now);
            }
            if l.ended {
                continue;
            }
            if now.duration_since(l.advanced_at) > self.late_wait {
                if !l.stale {
                    l.stale = true;
                    self.counts.stale_link_events += 1;
                }
                continue;
            }
            // Among equal horizons the data was complete when the last of them arrived.
            if live.is_none_or(|(h, t)| l.horizon < h || (l.horizon == h && l.released_at > t)) {
                live = Some((l.horizon, l.released_at));
            }
        }
        live.unwrap_or(any)
    }

    /// Appends, time-ordered, every queued TP before the merged horizon; returns the horizon.
    pub fn release(&mut self, now: Instant, out: &mut Vec<TriggerPrimitive>) -> u64 {
        let (horizon, data_time) = self.horizon(now);
        if horizon <= self.released_to {
            return self.released_to;
        }
        let start = out.len();
        for l in &mut self.links {
            while l.queue.front().is_some_and(|tp| tp.time_start < horizon) {
                out.extend(l.queue.pop_front());
            }
        }
        // Stable: TPs at the same time keep link order, so the result is deterministic.
        out[start..].sort_by_key(|tp| (tp.time_start, tp.channel));
        self.released_to = horizon;
        self.horizon_times.push_back((horizon, data_time));
        horizon
    }

    /// When the data at `timestamp` was complete (released by the slowest live link), if known.
    /// Entries at or before `timestamp` are no longer needed once asked about.
    pub fn data_time_of(&mut self, timestamp: u64) -> Option<Instant> {
        while self
            .horizon_times
            .front()
            .is_some_and(|&(h, _)| h <= timestamp && self.horizon_times.len() > 1)
        {
            self.horizon_times.pop_front();
        }
        self.horizon_times
            .front()
            .filter(|&&(h, _)| h > timestamp)
            .map(|&(_, t)| t)
    }

    /// Ends every link and releases everything queued (end of run).
    pub fn drain(&mut self, now: Instant, out: &mut Vec<TriggerPrimitive>) -> u64 {
        for l in &mut self.links {
            l.ended = true;
        }
        let queued_max = self
            .links
            .iter()
            .filter_map(|l| l.queue.back().map(|tp| tp.time_start + 1))
            .max()
            .unwrap_or(0);
        for l in &mut self.links {
            l.horizon = l.horizon.max(queued_max);
        }
        self.release(now, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(channel: u32, time_start: u64) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start,
            ..Default::default()
        }
    }

    fn batch(link: usize, times: &[u64], horizon: u64, at: Instant) -> TpBatch {
        TpBatch {
            link,
            tps: times.iter().map(|&t| tp(link as u32, t)).collect(),
            horizon,
            released_at: at,
        }
    }

    #[test]
    fn releases_in_time_order_up_to_the_slowest_link() {
        let t0 = Instant::now();
        let mut m = TpMerger::new(2, Duration::from_secs(10), t0);
        m.push(batch(0, &[10, 30, 50], 60, t0), t0);
        m.push(batch(1, &[20, 40], 45, t0), t0);
        let mut out = Vec::new();
        assert_eq!(m.release(t0, &mut out), 45);
        let times: Vec<u64> = out.iter().map(|t| t.time_start).collect();
        assert_eq!(times, [10, 20, 30, 40]);
        out.clear();
        m.push(batch(1, &[55], 100, t0), t0);
        assert_eq!(m.release(t0, &mut out), 60);
        assert_eq!(
            out.iter().map(|t| t.time_start).collect::<Vec<_>>(),
            [50, 55]
        );
    }

    #[test]
    fn a_silent_link_is_waited_for_only_the_late_link_wait_and_its_late_tps_are_counted() {
        let t0 = Instant::now();
        let wait = Duration::from_millis(50);
        let mut m = TpMerger::new(2, wait, t0);
        m.push(batch(0, &[10, 500], 1000, t0), t0);
        let mut out = Vec::new();
        assert_eq!(m.release(t0, &mut out), 0, "link 1 holds the stream");
        let later = t0 + wait * 2;
        m.push(batch(0, &[], 1001, later), later);
        assert_eq!(m.release(later, &mut out), 1001);
        assert_eq!(out.len(), 2);
        assert_eq!(m.counts.stale_link_events, 1);
        m.push(batch(1, &[400, 1200], 1300, later), later);
        assert_eq!(m.counts.late_tps, 1, "400 was before the released horizon");
        out.clear();
        m.push(batch(0, &[], 2000, later), later);
        assert_eq!(m.release(later, &mut out), 1300);
        assert_eq!(out.iter().map(|t| t.time_start).collect::<Vec<_>>(), [1200]);
    }

    #[test]
    fn ended_links_do_not_hold_the_stream_and_drain_releases_everything() {
        let t0 = Instant::now();
        let mut m = TpMerger::new(2, Duration::from_secs(10), t0);
        m.push(batch(0, &[5, 7], 8, t0), t0);
        m.end_link(1);
        let mut out = Vec::new();
        assert_eq!(m.release(t0, &mut out), 8);
        m.push(batch(0, &[9, 100], 50, t0), t0);
        out.clear();
        m.drain(t0, &mut out);
        assert_eq!(
            out.iter().map(|t| t.time_start).collect::<Vec<_>>(),
            [9, 100]
        );
    }

    #[test]
    fn data_time_is_when_the_slowest_link_completed_the_data() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(3);
        let mut m = TpMerger::new(2, Duration::from_secs(10), t0);
        m.push(batch(0, &[], 100, t0), t0);
        m.push(batch(1, &[], 100, t1), t1);
        m.release(t1, &mut Vec::new());
        assert_eq!(m.data_time_of(50), Some(t1));
        assert_eq!(m.data_time_of(100), None, "not complete yet");
    }
}
