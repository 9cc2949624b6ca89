//! Hit finding scored against truth over the whole run. Replayed data (the emulator's
//! template, a looping file) repeats the same frames with timestamps shifted by whole passes,
//! so pass p's truth is the first pass's pulses shifted by p spans. Each pass is scored as
//! soon as the link's data has passed its end, and its TPs are then dropped: memory stays one
//! pass deep however long the run. Data without a span (UDP) is one pass, scored at the end.

use super::inputs::LinkInput;
use std::collections::HashMap;
use swdaq_format::TriggerPrimitive;
use swdaq_sim::TruePulse;
use swdaq_tpg::quality::Score;

/// One link's scoring.
pub struct PassScorer<'a> {
    input: &'a LinkInput,
    /// Offline channel number to the link's channel index (the truth's numbering).
    index: HashMap<u32, u32>,
    /// The pass being collected, and its TPs so far (link-local channels, time order).
    pass: u64,
    tps: Vec<TriggerPrimitive>,
    score: Option<Score>,
}

impl<'a> PassScorer<'a> {
    pub fn new(input: &'a LinkInput) -> Self {
        Self {
            input,
            index: input
                .channel_ids
                .iter()
                .enumerate()
                .map(|(i, &c)| (c, i as u32))
                .collect(),
            pass: 0,
            tps: Vec::new(),
            score: None,
        }
    }

    /// Pulses too close to where the data stops may not have closed their hits: the last
    /// this many ticks of each scored stretch are left out.
    fn margin(&self) -> u64 {
        64 * self.input.format.ticks_per_sample()
    }

    /// Takes the link's next TPs (time-ordered), every TP before `horizon` now sent, and
    /// scores the passes the data has left behind.
    pub fn add(&mut self, tps: &[TriggerPrimitive], horizon: u64) {
        self.tps.extend(tps.iter().filter_map(|tp| {
            Some(TriggerPrimitive {
                channel: *self.index.get(&tp.channel)?,
                ..*tp
            })
        }));
        let (Some(truth), Some(span)) = (self.input.truth.as_deref(), self.input.span_ticks) else {
            return;
        };
        while span > 0 && horizon >= self.pass_begin(self.pass + 1) {
            let (begin, end) = (self.pass_begin(self.pass), self.pass_begin(self.pass + 1));
            self.score_stretch(truth, begin, end);
            let done = self.tps.partition_point(|tp| tp.time_start < end);
            self.tps.drain(..done);
            self.pass += 1;
        }
    }

    fn pass_begin(&self, pass: u64) -> u64 {
        let span = self.input.span_ticks.unwrap_or(0);
        self.input.first_timestamp + pass * span
    }

    /// Scores the pass under way up to `horizon` (where the data stopped), against the
    /// link's truth or else `truth_at_end`; `None` without truth.
    pub fn finish(mut self, horizon: u64, truth_at_end: Option<&[TruePulse]>) -> Option<Score> {
        let truth = self.input.truth.as_deref().or(truth_at_end)?;
        let begin = self.pass_begin(self.pass);
        let end = match self.input.span_ticks {
            Some(_) => horizon.min(self.pass_begin(self.pass + 1)),
            None => horizon,
        };
        self.score_stretch(truth, begin, end);
        Some(self.score.unwrap_or_default())
    }

    /// Adds the score of `[begin, end)` of the data, the truth shifted to the pass there.
    fn score_stretch(&mut self, truth: &[TruePulse], begin: u64, end: u64) {
        // Scored, even if too short to hold anything: the link has truth.
        self.score.get_or_insert_default();
        let margin = self.margin();
        if end <= begin + margin {
            return;
        }
        let shift = begin - self.input.first_timestamp;
        let inside = |t: u64| t >= begin && t + margin < end;
        let pulses: Vec<TruePulse> = truth
            .iter()
            .map(|p| TruePulse {
                start_tick: p.start_tick + shift,
                peak_tick: p.peak_tick + shift,
                ..*p
            })
            .filter(|p| inside(p.peak_tick))
            .collect();
        let tps: Vec<TriggerPrimitive> = self
            .tps
            .iter()
            .filter(|tp| inside(tp.time_start))
            .copied()
            .collect();
        let seconds = (end - margin - begin) as f64 / self.input.format.clock_hz();
        self.score.get_or_insert_default().add(&Score::of(
            &pulses,
            &tps,
            &self.input.sigma,
            &self.input.collection,
            seconds,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::chain::inputs::test_link::{self, SPAN, START};
    use swdaq_sim::{Plane, PulseKind};

    const PEAK: u64 = 50_000;

    /// A link whose truth is one 10-sigma pulse on channel 3, `PEAK` ticks into each pass.
    fn input() -> LinkInput {
        test_link::with_truth(vec![TruePulse {
            link: 0,
            channel: 3,
            offline_channel: 103,
            plane: Plane::X,
            start_tick: START + PEAK - 64,
            peak_tick: START + PEAK,
            charge: 100.0,
            peak_adc: 10.0,
            kind: PulseKind::Blip,
        }])
    }

    /// A hit on offline channel `channel` starting at `time`, 4 samples long.
    fn tp(channel: u32, time: u64) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start: time,
            samples_over_threshold: 4,
            ..Default::default()
        }
    }

    #[test]
    fn every_pass_is_scored_against_the_truth_shifted_to_it() {
        let input = input();
        let mut scorer = PassScorer::new(&input);
        let hit = |pass: u64| tp(103, START + pass * SPAN + PEAK - 64);
        // Pass 0 found, pass 1 missed (and a fake hit), pass 2 found, pass 3 cut short
        // before its pulse.
        scorer.add(&[hit(0)], START + SPAN / 2);
        scorer.add(&[], START + SPAN + 10);
        assert_eq!(scorer.pass, 1, "pass 0 scored once the data left it");
        assert!(scorer.tps.is_empty(), "its TPs dropped");
        scorer.add(&[tp(110, START + SPAN + 7_000)], START + 2 * SPAN);
        scorer.add(&[hit(2)], START + 3 * SPAN + PEAK / 2);
        let score = scorer.finish(START + 3 * SPAN + PEAK / 2, None).unwrap();
        assert_eq!(score.pulses_5_sigma, 3);
        assert_eq!(score.found_5_sigma, 2);
        assert_eq!(score.fake_tps, 1);
        let seconds = 64.0 * (3.0 * SPAN as f64 + PEAK as f64 / 2.0 - 4.0 * 2048.0) / 62.5e6;
        assert!((score.channel_seconds - seconds).abs() < 1e-9, "{score:?}");
    }

    #[test]
    fn without_truth_nothing_is_scored_unless_it_comes_at_the_end() {
        let mut input = input();
        let truth = input.truth.take().unwrap();
        input.span_ticks = None;
        let mut scorer = PassScorer::new(&input);
        scorer.add(&[tp(103, START + PEAK - 64)], START + SPAN);
        assert!(PassScorer::new(&input).finish(START + SPAN, None).is_none());
        let score = scorer.finish(START + SPAN, Some(&truth)).unwrap();
        assert_eq!((score.pulses_5_sigma, score.found_5_sigma), (1, 1));
    }
}
