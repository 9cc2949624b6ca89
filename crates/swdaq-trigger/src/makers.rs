//! Activity makers: each looks at the merged, time-ordered TP stream and proposes candidates.

use crate::config::{ActivityConfig, TrackConfig};
use crate::decision::{Candidate, trigger_type};
use std::collections::{BTreeMap, HashMap, VecDeque};
use swdaq_format::TriggerPrimitive;

/// Keeps one candidate in `every`.
#[derive(Debug, Clone, Copy)]
pub struct Prescale {
    every: u32,
    seen: u64,
}

impl Prescale {
    pub fn new(every: u32) -> Self {
        Self {
            every: every.max(1),
            seen: 0,
        }
    }

    pub fn keep(&mut self) -> bool {
        self.seen += 1;
        self.seen.is_multiple_of(self.every as u64)
    }
}

pub trait ActivityMaker: Send {
    /// Sees the next TP of the time-ordered stream.
    fn on_tp(&mut self, tp: &TriggerPrimitive) -> Option<Candidate>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Number of TPs.
    Multiplicity,
    /// Sum of the TPs' ADC integrals.
    AdcSum,
}

/// TP multiplicity or ADC sum within a sliding window, per group of adjacent channels. It
/// fires at the time of the oldest TP in the window (where the activity starts) and then
/// forgets the window, so one burst of activity makes one candidate.
pub struct GroupActivity {
    config: ActivityConfig,
    measure: Measure,
    groups: HashMap<u32, (VecDeque<(u64, u64)>, u64)>,
}

impl GroupActivity {
    pub fn new(config: ActivityConfig, measure: Measure) -> Self {
        Self {
            config,
            measure,
            groups: HashMap::new(),
        }
    }
}

impl ActivityMaker for GroupActivity {
    fn on_tp(&mut self, tp: &TriggerPrimitive) -> Option<Candidate> {
        let (window, total) = self
            .groups
            .entry(tp.channel / self.config.group_channels)
            .or_default();
        while let Some(&(t, weight)) = window.front() {
            if t + self.config.window_ticks > tp.time_start {
                break;
            }
            window.pop_front();
            *total -= weight;
        }
        let weight = match self.measure {
            Measure::Multiplicity => 1,
            Measure::AdcSum => tp.adc_integral as u64,
        };
        window.push_back((tp.time_start, weight));
        *total += weight;
        if *total < self.config.threshold {
            return None;
        }
        let start = window.front().map_or(tp.time_start, |&(t, _)| t);
        window.clear();
        *total = 0;
        Some(Candidate {
            timestamp: start,
            trigger_type: match self.measure {
                Measure::Multiplicity => trigger_type::MULTIPLICITY,
                Measure::AdcSum => trigger_type::ADC_SUM,
            },
        })
    }
}

/// Track-like activity: within a short window, a run of at least `min_adjacent_channels`
/// channel numbers hit, allowing gaps of up to `max_channel_gap` missing channels.
pub struct TrackMaker {
    config: TrackConfig,
    window: VecDeque<(u64, u32)>,
    /// TPs in the window per channel.
    hits: BTreeMap<u32, u32>,
}

impl TrackMaker {
    pub fn new(config: TrackConfig) -> Self {
        Self {
            config,
            window: VecDeque::new(),
            hits: BTreeMap::new(),
        }
    }

    /// The number of distinct hit channels in the gap-tolerant run through `channel`.
    fn run_through(&self, channel: u32) -> u32 {
        let step = self.config.max_channel_gap + 1;
        let mut run = 1;
        let mut at = channel;
        while let Some((&c, _)) = self.hits.range(at + 1..=at.saturating_add(step)).next() {
            run += 1;
            at = c;
        }
        at = channel;
        while let Some((&c, _)) = self.hits.range(at.saturating_sub(step)..at).next_back() {
            run += 1;
            at = c;
        }
        run
    }
}

impl ActivityMaker for TrackMaker {
    fn on_tp(&mut self, tp: &TriggerPrimitive) -> Option<Candidate> {
        while let Some(&(t, c)) = self.window.front() {
            if t + self.config.window_ticks > tp.time_start {
                break;
            }
            self.window.pop_front();
            if let Some(n) = self.hits.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.hits.remove(&c);
                }
            }
        }
        self.window.push_back((tp.time_start, tp.channel));
        *self.hits.entry(tp.channel).or_default() += 1;
        if self.run_through(tp.channel) < self.config.min_adjacent_channels {
            return None;
        }
        let start = self.window.front().map_or(tp.time_start, |&(t, _)| t);
        self.window.clear();
        self.hits.clear();
        Some(Candidate {
            timestamp: start,
            trigger_type: trigger_type::TRACK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(channel: u32, time_start: u64, adc_integral: u32) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start,
            adc_integral,
            ..Default::default()
        }
    }

    fn activity(measure: Measure, threshold: u64) -> GroupActivity {
        GroupActivity::new(
            ActivityConfig {
                enabled: true,
                group_channels: 10,
                window_ticks: 100,
                threshold,
                prescale: 1,
            },
            measure,
        )
    }

    #[test]
    fn multiplicity_fires_on_the_nth_tp_in_the_window_at_the_activity_start() {
        let mut m = activity(Measure::Multiplicity, 3);
        assert_eq!(m.on_tp(&tp(1, 1000, 5)), None);
        assert_eq!(m.on_tp(&tp(2, 1050, 5)), None);
        let c = m
            .on_tp(&tp(3, 1099, 5))
            .expect("three TPs within 100 ticks");
        assert_eq!(c.timestamp, 1000);
        assert_eq!(c.trigger_type, trigger_type::MULTIPLICITY);
        assert_eq!(m.on_tp(&tp(4, 1100, 5)), None, "the window restarts");
    }

    #[test]
    fn multiplicity_forgets_tps_that_left_the_window_and_keeps_groups_apart() {
        let mut m = activity(Measure::Multiplicity, 3);
        assert_eq!(m.on_tp(&tp(1, 1000, 5)), None);
        assert_eq!(m.on_tp(&tp(2, 1050, 5)), None);
        assert_eq!(m.on_tp(&tp(13, 1060, 5)), None, "another group");
        assert_eq!(m.on_tp(&tp(3, 1100, 5)), None, "1000 is out of the window");
        assert!(m.on_tp(&tp(4, 1120, 5)).is_some());
    }

    #[test]
    fn adc_sum_fires_on_the_charge_not_the_count() {
        let mut m = activity(Measure::AdcSum, 1000);
        assert_eq!(m.on_tp(&tp(1, 0, 400)), None);
        assert_eq!(m.on_tp(&tp(2, 10, 599)), None);
        assert_eq!(
            m.on_tp(&tp(3, 20, 1)).unwrap().trigger_type,
            trigger_type::ADC_SUM
        );
    }

    #[test]
    fn track_needs_a_run_of_adjacent_channels_gaps_allowed_up_to_the_limit() {
        let config = TrackConfig {
            enabled: true,
            window_ticks: 1000,
            min_adjacent_channels: 5,
            max_channel_gap: 1,
            prescale: 1,
        };
        let mut m = TrackMaker::new(config);
        // 100, 102, 104, 106 (gaps of one) then 110 (gap of three: not part of the run).
        for (i, c) in [100, 102, 104, 106, 110].into_iter().enumerate() {
            assert_eq!(m.on_tp(&tp(c, 10 * i as u64, 1)), None, "channel {c}");
        }
        let c = m
            .on_tp(&tp(108, 60, 1))
            .expect("100..=110 is now a run of 6");
        assert_eq!((c.timestamp, c.trigger_type), (0, trigger_type::TRACK));
    }

    #[test]
    fn track_ignores_hits_spread_over_longer_than_the_window() {
        let config = TrackConfig {
            enabled: true,
            window_ticks: 100,
            min_adjacent_channels: 3,
            max_channel_gap: 0,
            prescale: 1,
        };
        let mut m = TrackMaker::new(config);
        assert_eq!(m.on_tp(&tp(1, 0, 1)), None);
        assert_eq!(m.on_tp(&tp(2, 60, 1)), None);
        assert_eq!(
            m.on_tp(&tp(3, 120, 1)),
            None,
            "channel 1 has left the window"
        );
        assert!(m.on_tp(&tp(1, 130, 1)).is_some());
    }

    #[test]
    fn prescale_keeps_one_in_n() {
        let mut p = Prescale::new(3);
        let kept: Vec<bool> = (0..6).map(|_| p.keep()).collect();
        assert_eq!(kept, [false, false, true, false, false, true]);
    }
}
