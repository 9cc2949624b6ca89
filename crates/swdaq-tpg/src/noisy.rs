//! Noisy-channel detection: each channel's TP rate over a sliding window of data time is
//! compared with the median over the link's channels; channels far above it are reported
//! (and may be masked by the caller). DUNE masks only after hit finding, by hand.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use swdaq_format::TriggerPrimitive;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NoisyConfig {
    /// Length of one counting window, in clock ticks (default 1 s of the 62.5 MHz clock).
    pub window_ticks: u64,
    /// A channel is noisy when its TP count exceeds `factor` x max(median, `min_count`).
    pub factor: f64,
    pub min_count: u64,
    /// Mask noisy channels automatically (otherwise only report them).
    pub auto_mask: bool,
}

impl Default for NoisyConfig {
    fn default() -> Self {
        Self {
            window_ticks: 62_500_000,
            factor: 10.0,
            min_count: 5,
            auto_mask: false,
        }
    }
}

/// A channel found over-active in one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NoisyChannel {
    pub channel: u32,
    pub tps_in_window: u64,
    pub median_in_window: f64,
}

pub struct NoisyChannelDetector {
    config: NoisyConfig,
    counts: HashMap<u32, u64>,
    channels: Vec<u32>,
    window_start: Option<u64>,
}

impl NoisyChannelDetector {
    /// Watches `channels` (offline ids; masked ones should be left out).
    pub fn new(config: NoisyConfig, channels: Vec<u32>) -> Self {
        Self {
            config,
            counts: HashMap::new(),
            channels,
            window_start: None,
        }
    }

    /// Counts `tps` (in time order); when the window that started at the first TP's time has
    /// passed `now`, closes it and returns the noisy channels found in it.
    pub fn observe(&mut self, tps: &[TriggerPrimitive], now: u64) -> Vec<NoisyChannel> {
        let start = *self.window_start.get_or_insert(now);
        for tp in tps {
            *self.counts.entry(tp.channel).or_default() += 1;
        }
        if now < start + self.config.window_ticks {
            return Vec::new();
        }
        self.window_start = Some(now);
        let counts = std::mem::take(&mut self.counts);
        let mut per_channel: Vec<u64> = self
            .channels
            .iter()
            .map(|c| counts.get(c).copied().unwrap_or(0))
            .collect();
        per_channel.sort_unstable();
        let median = match per_channel.len() {
            0 => 0.0,
            n if n % 2 == 1 => per_channel[n / 2] as f64,
            n => (per_channel[n / 2 - 1] + per_channel[n / 2]) as f64 / 2.0,
        };
        let limit = self.config.factor * median.max(self.config.min_count as f64);
        let mut noisy: Vec<NoisyChannel> = self
            .channels
            .iter()
            .filter_map(|&channel| {
                let n = counts.get(&channel).copied().unwrap_or(0);
                (n as f64 > limit).then_some(NoisyChannel {
                    channel,
                    tps_in_window: n,
                    median_in_window: median,
                })
            })
            .collect();
        noisy.sort_by_key(|n| n.channel);
        noisy
    }

    /// Stops watching `channel` (after masking it).
    pub fn forget(&mut self, channel: u32) {
        self.channels.retain(|&c| c != channel);
    }

    pub fn auto_mask(&self) -> bool {
        self.config.auto_mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(channel: u32, t: u64) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start: t,
            ..Default::default()
        }
    }

    #[test]
    fn a_channel_far_above_the_median_is_reported_when_the_window_closes() {
        let config = NoisyConfig {
            window_ticks: 1000,
            factor: 5.0,
            min_count: 2,
            auto_mask: false,
        };
        let mut d = NoisyChannelDetector::new(config, (0..10).collect());
        let mut tps: Vec<_> = (0..10)
            .flat_map(|c| (0..3).map(move |i| tp(c, i)))
            .collect();
        tps.extend((0..40).map(|i| tp(7, i)));
        assert!(d.observe(&tps, 0).is_empty(), "the window is still open");
        let noisy = d.observe(&[], 1000);
        assert_eq!(
            noisy,
            vec![NoisyChannel {
                channel: 7,
                tps_in_window: 43,
                median_in_window: 3.0
            }]
        );
        assert!(
            d.observe(&[], 2000).is_empty(),
            "counts start again each window"
        );
    }

    #[test]
    fn a_quiet_link_reports_nothing() {
        let mut d = NoisyChannelDetector::new(
            NoisyConfig {
                window_ticks: 10,
                ..Default::default()
            },
            (0..4).collect(),
        );
        assert!(
            d.observe(&[tp(1, 0), tp(1, 1), tp(1, 2)], 20).is_empty(),
            "3 TPs < 10 x min_count 5"
        );
    }
}
