//! The trigger: merged TPs -> makers -> candidates -> decisions, under inhibit.
//!
//! Overlap rule: a candidate whose time falls before the end of the open decision's readout
//! window (`t + window_after`) is *merged* into it: its type bits are OR'd in and the window
//! stays that of the first candidate. The open decision is issued once the merged stream has
//! passed the end of its window, so every candidate that could merge has been seen; a
//! candidate that still lands inside an already issued window (an activity maker looking back
//! further than the window) is *vetoed* and counted.
//!
//! Inhibit: the record builder grants credits (one per record it can take). A decision issued
//! without credit is held (policy `hold`, up to `max_held_decisions`) or dropped (`drop`);
//! held decisions go out, in order, as credit returns. Every drop is counted; trigger numbers
//! are given at issue, so records stay consecutive.

use crate::calibration::{CalibrationTrigger, Periodic, Random};
use crate::config::{ConfigError, InhibitPolicy, TriggerChange, TriggerConfig};
use crate::decision::{Candidate, ReadoutWindow, TriggerDecision};
use crate::makers::{ActivityMaker, GroupActivity, Measure, Prescale, TrackMaker};
use crate::merge::{MergeCounts, TpBatch, TpMerger};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use swdaq_format::{SourceId, TriggerPrimitive};

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TriggerCounts {
    pub merge: MergeCounts,
    /// Candidates proposed (before prescale) and kept (after).
    pub candidates: u64,
    pub prescaled_away: u64,
    pub merged: u64,
    pub vetoed_overlapping: u64,
    pub issued: u64,
    /// Decisions dropped for lack of credit (busy), by policy.
    pub dropped_busy: u64,
    /// Decisions issued only after waiting for credit.
    pub held_then_issued: u64,
    /// Candidates not taken while triggers were paused (run control).
    pub paused_away: u64,
    /// Run-control changes refused (checked before they are sent, so none are expected).
    pub refused_controls: u64,
    /// Times the data time jumped too far for a calibration trigger to fill in (a front end
    /// restarted, or garbage taken for timestamps): it started again from the new time.
    pub data_time_jumps: u64,
}

/// What run control asks of a running trigger.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TriggerControl {
    /// Issue no new decisions (readout goes on); the open decision is still issued.
    Pause,
    Resume,
    Change(TriggerChange),
}

struct Source<T> {
    /// Its configuration key (`SOURCE_KEYS`).
    key: &'static str,
    inner: T,
    prescale: Prescale,
}

struct Open {
    candidate: Candidate,
    candidates: u32,
}

pub struct Trigger {
    config: TriggerConfig,
    sources: Vec<SourceId>,
    merger: TpMerger,
    makers: Vec<Source<Box<dyn ActivityMaker>>>,
    calibration: Vec<Source<Box<dyn CalibrationTrigger>>>,
    open: Option<Open>,
    /// End of the last issued decision's readout window.
    last_window_end: u64,
    held: VecDeque<(Open, Instant)>,
    credits: u64,
    next_number: u64,
    counts: TriggerCounts,
    latencies: Vec<Duration>,
    scratch_tps: Vec<TriggerPrimitive>,
    scratch_candidates: Vec<Candidate>,
    /// The run is stopping: no new candidates are taken.
    stopping: bool,
    /// Run control paused the triggers: no new candidates are taken until resumed.
    paused: bool,
}

impl Trigger {
    /// A trigger over `links` TP streams, reading out `sources` for each decision; it may
    /// issue `credits` decisions before the record builder grants more. `clock_hz`: the
    /// links' data-time ticks per second, which turn the calibration triggers' rates into
    /// periods.
    pub fn new(
        config: TriggerConfig,
        clock_hz: f64,
        links: usize,
        sources: Vec<SourceId>,
        credits: u64,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut makers: Vec<Source<Box<dyn ActivityMaker>>> = Vec::new();
        let c = config.multiplicity;
        if c.enabled {
            makers.push(Source {
                key: "multiplicity",
                inner: Box::new(GroupActivity::new(c, Measure::Multiplicity)),
                prescale: Prescale::new(c.prescale),
            });
        }
        let c = config.adc_sum;
        if c.enabled {
            makers.push(Source {
                key: "adc_sum",
                inner: Box::new(GroupActivity::new(c, Measure::AdcSum)),
                prescale: Prescale::new(c.prescale),
            });
        }
        let c = config.track;
        if c.enabled {
            makers.push(Source {
                key: "track",
                inner: Box::new(TrackMaker::new(c)),
                prescale: Prescale::new(c.prescale),
            });
        }
        let mut calibration: Vec<Source<Box<dyn CalibrationTrigger>>> = Vec::new();
        let c = &config.periodic;
        if c.enabled {
            calibration.push(Source {
                key: "periodic",
                inner: Box::new(Periodic::new(c, clock_hz)),
                prescale: Prescale::new(c.prescale),
            });
        }
        let c = &config.random;
        if c.enabled {
            calibration.push(Source {
                key: "random",
                inner: Box::new(Random::new(c, clock_hz)),
                prescale: Prescale::new(c.prescale),
            });
        }
        Ok(Self {
            merger: TpMerger::new(links, Duration::from_millis(config.late_link_wait_ms), now),
            config,
            sources,
            makers,
            calibration,
            open: None,
            last_window_end: 0,
            held: VecDeque::new(),
            credits,
            next_number: 1,
            counts: TriggerCounts::default(),
            latencies: Vec::new(),
            scratch_tps: Vec::new(),
            scratch_candidates: Vec::new(),
            stopping: false,
            paused: false,
        })
    }

    pub fn on_tps(&mut self, batch: TpBatch, now: Instant) {
        self.merger.push(batch, now);
    }

    /// A link's TP stream ended.
    pub fn end_link(&mut self, link: usize) {
        self.merger.end_link(link);
    }

    /// The record builder can take `n` more records.
    pub fn add_credits(&mut self, n: u64, now: Instant, out: &mut Vec<TriggerDecision>) {
        self.credits += n;
        self.issue_held(now, out);
    }

    pub fn counts(&self) -> TriggerCounts {
        let mut c = self.counts.clone();
        c.merge = self.merger.counts;
        c
    }

    /// Decisions held for credit right now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Run stop: no new candidates from now on; the open decision is still issued once the
    /// data has passed its window (see [`Self::is_stopped`]).
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Carries out a run-control request; a change that does not apply is refused (counted)
    /// and nothing changes.
    pub fn control(&mut self, control: &TriggerControl) -> Result<(), ConfigError> {
        match control {
            TriggerControl::Pause => self.paused = true,
            TriggerControl::Resume => self.paused = false,
            TriggerControl::Change(change) => {
                if let Err(e) = self.config.apply(change) {
                    self.counts.refused_controls += 1;
                    return Err(e);
                }
                let makers = self
                    .makers
                    .iter_mut()
                    .map(|m| (m.key, &mut m.prescale, None));
                let calibration = self.calibration.iter_mut().map(|c| {
                    let inner: &mut dyn CalibrationTrigger = c.inner.as_mut();
                    (c.key, &mut c.prescale, Some(inner))
                });
                for (_, prescale, rate) in makers
                    .chain(calibration)
                    .filter(|(key, ..)| *key == change.trigger)
                {
                    if let Some(every) = change.prescale {
                        *prescale = Prescale::new(every);
                    }
                    if let (Some(hz), Some(rate)) = (change.rate_hz, rate) {
                        rate.set_rate(hz);
                    }
                }
            }
        }
        Ok(())
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Stopping, and nothing left to issue but decisions held for credit.
    pub fn is_stopped(&self) -> bool {
        self.stopping && self.open.is_none()
    }

    /// Gives up on the decisions held for credit (end of run): they are counted as dropped.
    pub fn drop_held(&mut self) {
        self.counts.dropped_busy += self.held.len() as u64;
        self.held.clear();
    }

    /// Data-time-to-decision latencies of the decisions issued so far.
    pub fn latencies(&self) -> &[Duration] {
        &self.latencies
    }

    /// Processes what the merged stream can release now; appends the decisions issued.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<TriggerDecision>) {
        let mut tps = std::mem::take(&mut self.scratch_tps);
        let horizon = self.merger.release(now, &mut tps);
        self.process(&tps, horizon, now, out);
        tps.clear();
        self.scratch_tps = tps;
    }

    /// End of run: every link ended, everything queued processed, the open decision issued.
    pub fn finish(&mut self, now: Instant, out: &mut Vec<TriggerDecision>) {
        let mut tps = std::mem::take(&mut self.scratch_tps);
        let horizon = self.merger.drain(now, &mut tps);
        self.process(&tps, horizon, now, out);
        if let Some(open) = self.open.take() {
            self.issue(open, now, out);
        }
    }

    fn process(
        &mut self,
        tps: &[TriggerPrimitive],
        horizon: u64,
        now: Instant,
        out: &mut Vec<TriggerDecision>,
    ) {
        let mut candidates = std::mem::take(&mut self.scratch_candidates);
        for tp in tps {
            for maker in &mut self.makers {
                if let Some(c) = maker.inner.on_tp(tp) {
                    self.counts.candidates += 1;
                    if maker.prescale.keep() {
                        candidates.push(c);
                    } else {
                        self.counts.prescaled_away += 1;
                    }
                }
            }
        }
        // Calibration triggers start with the data (horizon 0: no link has reported yet).
        for cal in self.calibration.iter_mut().filter(|_| horizon > 0) {
            let from = candidates.len();
            if cal.inner.advance(horizon, &mut candidates) {
                self.counts.data_time_jumps += 1;
            }
            let proposed = candidates.len() - from;
            self.counts.candidates += proposed as u64;
            let mut index = 0;
            candidates.retain(|_| {
                index += 1;
                index <= from || cal.prescale.keep()
            });
            self.counts.prescaled_away += (from + proposed - candidates.len()) as u64;
        }
        if self.paused && !self.stopping {
            self.counts.paused_away += candidates.len() as u64;
        }
        if self.stopping || self.paused {
            candidates.clear();
        }
        candidates.sort_by_key(|c| c.timestamp);
        for c in candidates.drain(..) {
            self.add_candidate(c, now, out);
        }
        self.scratch_candidates = candidates;
        if let Some(open) = &self.open
            && horizon >= self.window_end(&open.candidate)
        {
            let open = self.open.take().expect("checked above");
            self.issue(open, now, out);
        }
    }

    /// The end of the readout window around `candidate`; saturating, since a timestamp may be
    /// anything a damaged frame carried.
    fn window_end(&self, candidate: &Candidate) -> u64 {
        candidate
            .timestamp
            .saturating_add(self.config.window_after_ticks)
    }

    fn add_candidate(&mut self, c: Candidate, now: Instant, out: &mut Vec<TriggerDecision>) {
        if c.timestamp < self.last_window_end {
            self.counts.vetoed_overlapping += 1;
            return;
        }
        match &mut self.open {
            Some(open)
                if c.timestamp
                    < open
                        .candidate
                        .timestamp
                        .saturating_add(self.config.window_after_ticks) =>
            {
                open.candidate.trigger_type |= c.trigger_type;
                open.candidates += 1;
                self.counts.merged += 1;
            }
            _ => {
                if let Some(previous) = self.open.take() {
                    self.issue(previous, now, out);
                }
                self.open = Some(Open {
                    candidate: c,
                    candidates: 1,
                });
            }
        }
    }

    /// Sends the decision out if there is credit, else holds or drops it by policy.
    fn issue(&mut self, open: Open, now: Instant, out: &mut Vec<TriggerDecision>) {
        self.last_window_end = self.window_end(&open.candidate);
        if self.credits > 0 && self.held.is_empty() {
            self.emit(open, now, out);
            return;
        }
        match self.config.inhibit {
            InhibitPolicy::Hold if self.held.len() < self.config.max_held_decisions => {
                self.held.push_back((open, now));
            }
            _ => self.counts.dropped_busy += 1,
        }
        self.issue_held(now, out);
    }

    fn issue_held(&mut self, now: Instant, out: &mut Vec<TriggerDecision>) {
        while self.credits > 0
            && let Some((open, _)) = self.held.pop_front()
        {
            self.counts.held_then_issued += 1;
            self.emit(open, now, out);
        }
    }

    fn emit(&mut self, open: Open, now: Instant, out: &mut Vec<TriggerDecision>) {
        self.credits -= 1;
        let t = open.candidate.timestamp;
        if let Some(data_time) = self.merger.data_time_of(t) {
            self.latencies
                .push(now.saturating_duration_since(data_time));
        }
        let windows = self
            .sources
            .iter()
            .map(|&source| ReadoutWindow {
                source,
                begin: t.saturating_sub(self.config.window_before_ticks),
                end: t.saturating_add(self.config.window_after_ticks),
            })
            .collect();
        out.push(TriggerDecision {
            trigger_number: self.next_number,
            timestamp: t,
            trigger_type: open.candidate.trigger_type,
            candidates: open.candidates,
            windows,
        });
        self.next_number += 1;
        self.counts.issued += 1;
    }
}
