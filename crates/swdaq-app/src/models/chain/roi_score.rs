//! ROI readout scored against truth: of the true pulses a full readout of the requested
//! windows would have held, how many the regions of interest hold. The pulses are those hit
//! finding is scored on (collection channels, peak >= 5 noise sigma), each replay pass's
//! truth shifted to it as in `pass_score`. A pulse's samples are taken as its rise and as
//! long again after the peak (`[start, start + 2 (peak - start))`: down to about 30% of the
//! peak on the unipolar shape); it counts for a window that holds all of them, and as
//! covered when one region of its channel holds all of them.
//!
//! Scored in the request server, on the ROI fragments it sends (a fragment the builder then
//! drops for being late is still counted).

use super::inputs::Inputs;
use std::collections::HashMap;
use swdaq_format::roi::RoiPayload;
use swdaq_format::{Fragment, FragmentType, SourceId};
use swdaq_monitor::{Counter, MonitorError, Registry};

/// How many strong true pulses fell in the requested windows, and how many of those lie in
/// a region that was sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoiCoverage {
    pub pulses_5_sigma: u64,
    pub in_regions: u64,
}

impl RoiCoverage {
    pub fn add(&mut self, o: &RoiCoverage) {
        self.pulses_5_sigma += o.pulses_5_sigma;
        self.in_regions += o.in_regions;
    }

    pub fn fraction(&self) -> f64 {
        self.in_regions as f64 / self.pulses_5_sigma as f64
    }
}

/// One link's strong pulses as (offline channel, first tick, end tick) of the first pass.
struct LinkTruth {
    pulses: Vec<(u32, u64, u64)>,
    first_timestamp: u64,
    span_ticks: Option<u64>,
    /// The longest pulse: how far before a window a pulse of an earlier pass can start.
    longest: u64,
}

pub struct RoiScorer {
    links: HashMap<SourceId, LinkTruth>,
    coverage: RoiCoverage,
    /// The coverage as it grows, on `/metrics`.
    counters: Option<[Counter; 2]>,
}

impl RoiScorer {
    /// `None` when no link has truth.
    pub fn new(inputs: &Inputs) -> Option<Self> {
        let links: HashMap<SourceId, LinkTruth> = inputs
            .iter()
            .filter_map(|(&i, input)| {
                let truth = input.truth.as_ref()?;
                let pulses: Vec<(u32, u64, u64)> = truth
                    .iter()
                    .filter(|p| {
                        let c = p.channel as usize;
                        input.collection.get(c) == Some(&true) && p.peak_adc / input.sigma[c] >= 5.0
                    })
                    .map(|p| {
                        let end = p.peak_tick + (p.peak_tick - p.start_tick).max(1);
                        (input.channel_ids[p.channel as usize], p.start_tick, end)
                    })
                    .collect();
                let longest = pulses.iter().map(|&(_, b, e)| e - b).max().unwrap_or(0);
                Some((
                    SourceId::readout(i as u32),
                    LinkTruth {
                        pulses,
                        first_timestamp: input.first_timestamp,
                        span_ticks: input.span_ticks,
                        longest,
                    },
                ))
            })
            .collect();
        (!links.is_empty()).then_some(Self {
            links,
            coverage: RoiCoverage::default(),
            counters: None,
        })
    }

    /// Publishes the coverage in `registry` under the thread `thread`.
    pub fn with_metrics(mut self, registry: &Registry, thread: &str) -> Result<Self, MonitorError> {
        let mut block = registry.block(thread, &[]);
        self.counters = Some([
            block.counter(
                "swdaq_readout_roi_true_pulses_total",
                "True collection pulses >= 5 sigma whose samples lie in a requested window (ROI readout)",
            )?,
            block.counter(
                "swdaq_readout_roi_true_pulses_in_regions_total",
                "Of those, pulses whose samples lie in one region of interest sent",
            )?,
        ]);
        Ok(self)
    }

    /// Scores one answered fragment (anything but a readable ROI fragment is ignored).
    pub fn score(&mut self, fragment: &[u8]) {
        let Ok(f) = Fragment::parse(fragment) else {
            return;
        };
        if f.header.fragment_type != FragmentType::ROI {
            return;
        }
        let (Some(truth), Ok(roi)) = (
            self.links.get(&f.header.element_id),
            RoiPayload::parse(f.payload),
        ) else {
            return;
        };
        let tick = roi.ticks_per_sample as u64;
        let regions: Vec<_> = roi.regions().collect();
        let (begin, end) = (f.header.window_begin, f.header.window_end);
        let mut scored = RoiCoverage::default();
        for (channel, first, last) in truth.passes_in(begin, end) {
            scored.pulses_5_sigma += 1;
            let covered = regions.iter().any(|r| {
                r.first_timestamp <= first
                    && r.end_timestamp(tick) >= last
                    && r.channel_ids().any(|c| c == channel)
            });
            scored.in_regions += covered as u64;
        }
        self.coverage.add(&scored);
        if let Some([pulses, in_regions]) = &self.counters {
            pulses.add(scored.pulses_5_sigma);
            in_regions.add(scored.in_regions);
        }
    }

    pub fn finish(self) -> RoiCoverage {
        self.coverage
    }
}

impl LinkTruth {
    /// The pulses (shifted to their pass) whose samples all lie in `[begin, end)`.
    fn passes_in(&self, begin: u64, end: u64) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        // Data without a span (UDP) is one pass.
        let span = self.span_ticks.filter(|&s| s > 0);
        let pass = |t: u64| span.map_or(0, |s| t.saturating_sub(self.first_timestamp) / s);
        let passes = pass(begin.saturating_sub(self.longest))..=pass(end);
        passes.flat_map(move |p| {
            let shift = span.map_or(0, |s| p * s);
            self.pulses
                .iter()
                .map(move |&(c, b, e)| (c, b + shift, e + shift))
                .filter(move |&(_, b, e)| b >= begin && e <= end)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::chain::inputs::test_link::{self, SPAN, START};
    use swdaq_format::roi::RoiPayloadWriter;
    use swdaq_readout::request::{DataRequest, header};
    use swdaq_sim::{Plane, PulseKind, TruePulse};

    /// One link: a 10-sigma pulse on channel index 3 (offline 103) at START + 50_000, its
    /// samples to START + 50_000 + 2 * 64; a 3-sigma one on channel 4.
    fn inputs() -> Inputs {
        let pulse = |channel: u32, peak_adc: f64| TruePulse {
            link: 0,
            channel,
            offline_channel: 100 + channel,
            plane: Plane::X,
            start_tick: START + 50_000,
            peak_tick: START + 50_064,
            charge: 100.0,
            peak_adc,
            kind: PulseKind::Blip,
        };
        Inputs::from([(
            0,
            test_link::with_truth(vec![pulse(3, 10.0), pulse(4, 3.0)]),
        )])
    }

    /// An ROI fragment for `[begin, end)` with one region of `ids` over `[from, to)`.
    fn fragment(begin: u64, end: u64, ids: &[u32], from: u64, to: u64) -> Vec<u8> {
        let req = DataRequest {
            trigger_number: 1,
            trigger_timestamp: begin,
            run_number: 1,
            sequence_number: 0,
            source: SourceId::readout(0),
            window_begin: begin,
            window_end: end,
            destination: 0,
        };
        let samples = ((to - from) / 32) as usize;
        let mut w = RoiPayloadWriter::new(32);
        w.push(from, 6, ids, samples, &vec![0; ids.len() * samples]);
        Fragment::assemble(header(&req, FragmentType::ROI, 0), [&w.finish(0)[..]])
    }

    #[test]
    fn strong_pulses_in_the_window_count_and_a_region_of_their_channel_covers_them() {
        let mut s = RoiScorer::new(&inputs()).unwrap();
        let t = START + 50_000;
        // Pass 0: covered. Pass 2: the region misses the channel. Pass 3: region too short.
        s.score(&fragment(
            t - 5_000,
            t + 5_000,
            &[96, 103],
            t - 320,
            t + 320,
        ));
        s.score(&fragment(
            t + 2 * SPAN - 500,
            t + 2 * SPAN + 500,
            &[104],
            t + 2 * SPAN,
            t + 2 * SPAN + 320,
        ));
        s.score(&fragment(
            t + 3 * SPAN - 500,
            t + 3 * SPAN + 500,
            &[103],
            t + 3 * SPAN,
            t + 3 * SPAN + 96,
        ));
        // A window ending inside the pulse does not count it.
        s.score(&fragment(
            t + 4 * SPAN - 500,
            t + 4 * SPAN + 100,
            &[103],
            t + 4 * SPAN - 500,
            t + 4 * SPAN + 100,
        ));
        assert_eq!(
            s.finish(),
            RoiCoverage {
                pulses_5_sigma: 3,
                in_regions: 1
            }
        );
    }
}
