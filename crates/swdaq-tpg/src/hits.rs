//! Trigger-primitive assembly, shared by the scalar and AVX2 pipelines so both emit the
//! same TPs: a hit opens on the first sample over threshold, closes on the first sample not
//! over it (or at the maximum length, flagged), and spans frame boundaries.

use swdaq_format::TriggerPrimitive;
use swdaq_format::tp::tp_flags;

/// Per-channel hit state, structure of arrays so the SIMD path can test `open` 16 lanes at a time.
#[derive(Debug, Clone)]
pub struct HitState {
    /// 0 or -1 (all ones) per channel.
    pub(crate) open: Vec<i16>,
    /// Channels with a hit open, so finding the earliest costs nothing when none is.
    open_count: usize,
    start: Vec<u64>,
    samples: Vec<u16>,
    integral: Vec<u32>,
    peak: Vec<u16>,
    peak_at: Vec<u16>,
    flags: Vec<u8>,
}

/// What a TP needs to know about the link.
#[derive(Debug, Clone, Copy)]
pub struct TpContext {
    pub detector_id: u8,
    pub max_hit_samples: u16,
}

pub const ADC_FULL_SCALE: u16 = (1 << 14) - 1;

impl HitState {
    pub fn new(channels: usize) -> Self {
        Self {
            open: vec![0; channels],
            open_count: 0,
            start: vec![0; channels],
            samples: vec![0; channels],
            integral: vec![0; channels],
            peak: vec![0; channels],
            peak_at: vec![0; channels],
            flags: vec![0; channels],
        }
    }

    /// Feeds one sample of channel `c` at `timestamp`: `signal` is what the hit integrates
    /// (pedestal-subtracted, filtered or running sum), `saturated` flags the hit.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        c: usize,
        signal: i16,
        over: bool,
        saturated: bool,
        timestamp: u64,
        channel_id: u32,
        ctx: TpContext,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        if over {
            if self.open[c] == 0 {
                self.open[c] = -1;
                self.open_count += 1;
                self.start[c] = timestamp;
                self.samples[c] = 0;
                self.integral[c] = 0;
                self.peak[c] = 0;
                self.peak_at[c] = 0;
                self.flags[c] = 0;
            }
            // Over threshold means signal > threshold >= 0, so it is positive.
            let value = signal as u16;
            if value > self.peak[c] {
                self.peak[c] = value;
                self.peak_at[c] = self.samples[c];
            }
            self.integral[c] = self.integral[c].saturating_add(value as u32);
            self.samples[c] += 1;
            if saturated {
                self.flags[c] |= tp_flags::SATURATED;
            }
            if self.samples[c] >= ctx.max_hit_samples {
                self.flags[c] |= tp_flags::TRUNCATED;
                self.close(c, channel_id, ctx, out);
            }
        } else if self.open[c] != 0 {
            self.close(c, channel_id, ctx, out);
        }
    }

    /// Emits channel `c`'s open hit.
    pub fn close(
        &mut self,
        c: usize,
        channel_id: u32,
        ctx: TpContext,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        debug_assert!(self.open[c] != 0, "closing a hit that is not open");
        self.open[c] = 0;
        self.open_count -= 1;
        out.push(TriggerPrimitive {
            flags: self.flags[c],
            detector_id: ctx.detector_id,
            channel: channel_id,
            samples_over_threshold: self.samples[c],
            time_start: self.start[c],
            samples_to_peak: self.peak_at[c],
            adc_integral: self.integral[c],
            adc_peak: self.peak[c],
        });
    }

    /// Start time of the earliest open hit, if any.
    pub fn earliest_open(&self) -> Option<u64> {
        if self.open_count == 0 {
            return None;
        }
        self.open
            .iter()
            .zip(&self.start)
            .filter(|(o, _)| **o != 0)
            .map(|(_, s)| *s)
            .min()
    }
}
