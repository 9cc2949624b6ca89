//! Region-of-interest readout (the ProtoDUNE talk's "poor man's ROI"), built from the TPs.
//!
//! Reading of the talk: time is cut into blocks of `block_samples` (12) samples, aligned to
//! absolute timestamps (block `b` covers ticks `[b, b + 1) * 12 * ticks_per_sample`), and
//! channels into groups of `group_channels` offline channel ids (`channel / 16`). A block of
//! a group is active when a hit on one of its channels is ongoing in it or ends in it, i.e.
//! every block from the one holding the TP's first sample to the one holding its last. The
//! active blocks widened by `margin_samples` (50) *samples* on each side form the regions;
//! overlapping or touching regions of a group merge. Timestamps are 62.5 MHz ticks,
//! `end_ts` exclusive.

use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use swdaq_format::TriggerPrimitive;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoiConfig {
    pub block_samples: u32,
    pub margin_samples: u32,
    pub group_channels: u32,
}

impl Default for RoiConfig {
    fn default() -> Self {
        Self {
            block_samples: 12,
            margin_samples: 50,
            group_channels: 16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RegionOfInterest {
    /// `channel / group_channels`.
    pub channel_group: u32,
    pub begin_ts: u64,
    /// First tick after the region.
    pub end_ts: u64,
}

/// Turns a link's time-ordered TP stream into regions of interest.
pub struct RoiBuilder {
    config: RoiConfig,
    block_ticks: u64,
    margin_ticks: u64,
    ticks_per_sample: u64,
    /// The region still growing, per channel group.
    open: BTreeMap<u32, (u64, u64)>,
}

impl RoiBuilder {
    pub fn new(config: RoiConfig, ticks_per_sample: u64) -> Result<Self, ConfigError> {
        let bad = |field, reason| Err(ConfigError { field, reason });
        if config.block_samples == 0 {
            return bad("block_samples", "must be at least 1");
        }
        if config.group_channels == 0 {
            return bad("group_channels", "must be at least 1");
        }
        if ticks_per_sample == 0 {
            return bad("ticks_per_sample", "must be at least 1");
        }
        Ok(Self {
            block_ticks: config.block_samples as u64 * ticks_per_sample,
            margin_ticks: config.margin_samples as u64 * ticks_per_sample,
            ticks_per_sample,
            config,
            open: BTreeMap::new(),
        })
    }

    /// Adds TPs (in time order, as a `HitFinder` releases them).
    pub fn push(&mut self, tps: &[TriggerPrimitive], out: &mut Vec<RegionOfInterest>) {
        for tp in tps {
            let first = tp.time_start / self.block_ticks;
            let last = tp.time_end(self.ticks_per_sample) / self.block_ticks;
            let begin = (first * self.block_ticks).saturating_sub(self.margin_ticks);
            let end = (last + 1) * self.block_ticks + self.margin_ticks;
            let group = tp.channel / self.config.group_channels;
            match self.open.get_mut(&group) {
                Some(region) if begin <= region.1 => region.1 = region.1.max(end),
                Some(region) => {
                    let (begin_ts, end_ts) = std::mem::replace(region, (begin, end));
                    out.push(RegionOfInterest {
                        channel_group: group,
                        begin_ts,
                        end_ts,
                    });
                }
                None => {
                    self.open.insert(group, (begin, end));
                }
            }
        }
    }

    /// Emits the regions no TP starting at or after `horizon` can extend.
    pub fn release(&mut self, horizon: u64, out: &mut Vec<RegionOfInterest>) {
        let earliest_begin =
            (horizon / self.block_ticks * self.block_ticks).saturating_sub(self.margin_ticks);
        self.open.retain(|&group, &mut (begin_ts, end_ts)| {
            let done = end_ts < earliest_begin;
            if done {
                out.push(RegionOfInterest {
                    channel_group: group,
                    begin_ts,
                    end_ts,
                });
            }
            !done
        });
    }

    /// Emits every region (end of run).
    pub fn flush(&mut self, out: &mut Vec<RegionOfInterest>) {
        self.release(u64::MAX, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(channel: u32, start_sample: u64, samples: u16) -> TriggerPrimitive {
        TriggerPrimitive {
            channel,
            time_start: start_sample * 32,
            samples_over_threshold: samples,
            ..Default::default()
        }
    }

    #[test]
    fn blocks_widen_by_the_margin_and_merge() {
        let mut b = RoiBuilder::new(RoiConfig::default(), 32).unwrap();
        let mut out = Vec::new();
        // Samples 1000..1005: block 83 (996..1008) -> samples 946..1058.
        b.push(&[tp(3, 1000, 5)], &mut out);
        // Another hit in group 0 at 1100 (block 91: 1092..1104) overlaps 1058? begin 1042: yes.
        b.push(&[tp(5, 1100, 30)], &mut out);
        // Group 1 is separate.
        b.push(&[tp(17, 1100, 1)], &mut out);
        assert!(out.is_empty());
        b.release(1200 * 32, &mut out);
        assert!(out.is_empty(), "a TP at 1200 could still merge");
        b.flush(&mut out);
        out.sort_by_key(|r| r.channel_group);
        assert_eq!(
            out,
            vec![
                RegionOfInterest {
                    channel_group: 0,
                    begin_ts: 946 * 32,
                    end_ts: (1140 + 50) * 32
                },
                RegionOfInterest {
                    channel_group: 1,
                    begin_ts: 1042 * 32,
                    end_ts: 1154 * 32
                },
            ]
        );
        // A hit ending in a later block activates every block up to it: 1129 is in 1128..1140.
    }

    #[test]
    fn distant_hits_make_separate_regions_released_in_time() {
        let mut b = RoiBuilder::new(RoiConfig::default(), 32).unwrap();
        let mut out = Vec::new();
        b.push(&[tp(0, 1000, 1)], &mut out);
        b.push(&[tp(0, 5000, 1)], &mut out);
        assert_eq!(out.len(), 1, "the first region is closed by the second");
        b.release(10_000 * 32, &mut out);
        assert_eq!(out.len(), 2);
        assert!(b.open.is_empty());
        assert!(
            RoiBuilder::new(
                RoiConfig {
                    block_samples: 0,
                    ..Default::default()
                },
                32
            )
            .is_err()
        );
    }
}
