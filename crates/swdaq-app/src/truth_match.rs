//! Matching found hits to the emulator's true pulses (used by `swdaq tpg-quality` and by the
//! closing summary of `swdaq run`).

use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth::TICKS_PER_SAMPLE;
use swdaq_sim::TruePulse;

/// A TP matches a true pulse on the same channel when the pulse peaks within the TP's span,
/// widened by two samples each side (`channel` is the TP's channel in the pulse's numbering).
pub fn matches(tp: &TriggerPrimitive, channel: u32, p: &TruePulse) -> bool {
    let margin = 2 * TICKS_PER_SAMPLE;
    let end = tp.time_start + tp.samples_over_threshold as u64 * TICKS_PER_SAMPLE;
    channel == p.channel && p.peak_tick + margin >= tp.time_start && p.peak_tick <= end + margin
}

/// Hit-finding quality on collection channels against the truth of one stretch of data.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    /// True collection pulses with peak >= 5 noise sigma, and how many have a matching TP.
    pub pulses_5_sigma: u64,
    pub found_5_sigma: u64,
    /// Collection-channel TPs that match no true pulse.
    pub fake_tps: u64,
    pub channel_seconds: f64,
}

impl Score {
    /// `tps` carry link-local channel indices; `sigma` and `collection` are per index.
    pub fn of(
        pulses: &[TruePulse],
        tps: &[TriggerPrimitive],
        sigma: &[f64],
        collection: &[bool],
        seconds: f64,
    ) -> Self {
        let is_collection = |c: u32| collection.get(c as usize).copied().unwrap_or(false);
        let mut by_channel: Vec<Vec<&TriggerPrimitive>> = vec![Vec::new(); sigma.len()];
        for tp in tps.iter().filter(|tp| is_collection(tp.channel)) {
            by_channel[tp.channel as usize].push(tp);
        }
        let mut score = Score {
            channel_seconds: collection.iter().filter(|&&c| c).count() as f64 * seconds,
            ..Default::default()
        };
        for p in pulses.iter().filter(|p| is_collection(p.channel)) {
            if p.peak_adc / sigma[p.channel as usize] >= 5.0 {
                score.pulses_5_sigma += 1;
                let found = by_channel[p.channel as usize]
                    .iter()
                    .any(|tp| matches(tp, tp.channel, p));
                score.found_5_sigma += found as u64;
            }
        }
        score.fake_tps = by_channel
            .iter()
            .flatten()
            .filter(|tp| !pulses.iter().any(|p| matches(tp, tp.channel, p)))
            .count() as u64;
        score
    }

    pub fn add(&mut self, other: &Score) {
        self.pulses_5_sigma += other.pulses_5_sigma;
        self.found_5_sigma += other.found_5_sigma;
        self.fake_tps += other.fake_tps;
        self.channel_seconds += other.channel_seconds;
    }

    pub fn efficiency_5_sigma(&self) -> f64 {
        self.found_5_sigma as f64 / self.pulses_5_sigma as f64
    }

    pub fn fake_rate_hz_per_channel(&self) -> f64 {
        self.fake_tps as f64 / self.channel_seconds
    }
}
