//! One emulated link: per-channel pedestal and noise, pulses from blips and tracks,
//! pathologies, then frame encoding with fault injection. Deterministic for a seed.

use crate::channel_map::Plane;
use crate::config::SimConfig;
use crate::response::{BIPOLAR_PEAK, LENGTH_IN_PEAKING_TIMES, bipolar, unipolar};
use crate::truth::{FaultKind, InjectedFault, PulseKind, TruePulse};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Poisson, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::sync::Arc;
use swdaq_format::daq_eth::{DaqEthHeader, SEQ_ID_MODULUS};
use swdaq_format::wibeth::{self, WibEthHeader};
use swdaq_format::{DETECTOR_ID_HD_TPC, protowib};

/// Tracks are generated per slice of this many ticks, from an RNG seeded by (seed, slice),
/// so every link sees the same tracks without sharing state.
const TRACK_SLICE_TICKS: u64 = 1 << 17;
const ADC_MAX: f64 = 16383.0;

/// Rounds to the nearest ADC count within the 14-bit range (NaN reads 0). Adding 0.5 to the
/// clamped, non-negative value and truncating rounds it without a libm call.
fn to_adc(value: f64) -> u16 {
    (value.clamp(0.0, ADC_MAX) + 0.5) as u16
}

pub use swdaq_format::FrameFormat;

/// The emulated detector: a validated configuration that hands out link simulators.
#[derive(Debug, Clone)]
pub struct Detector {
    config: Arc<SimConfig>,
}

impl Detector {
    pub fn new(config: SimConfig) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The simulator of link `link`, whose first frame has timestamp `start_timestamp`.
    pub fn link(&self, link: u32, format: FrameFormat, start_timestamp: u64) -> LinkSimulator {
        LinkSimulator::new(self.config.clone(), link, format, start_timestamp)
    }
}

struct Channel {
    offline: u32,
    plane: Plane,
    pedestal: f64,
    white_sigma: f64,
    low_frequency: f64,
    drift_phase: f64,
    dead: bool,
    /// Bits forced to 0 (cleared in `keep`) and to 1 (set in `force`).
    keep: u16,
    force: u16,
}

struct ActivePulse {
    channel: usize,
    start_tick: f64,
    amplitude: f64,
    bipolar: bool,
}

/// What [`LinkSimulator::next_frame`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// Bytes written to the buffer; 0 when the frame went missing.
    pub len: usize,
    pub timestamp: u64,
    pub seq_id: u16,
    pub fault: Option<FaultKind>,
}

pub struct LinkSimulator {
    config: Arc<SimConfig>,
    link: u32,
    format: FrameFormat,
    channels: Vec<Channel>,
    coherent: Vec<f64>,
    physics_rng: Xoshiro256PlusPlus,
    fault_rng: Xoshiro256PlusPlus,
    start_timestamp: u64,
    /// Samples generated so far.
    sample: u64,
    frame_index: u64,
    next_track_slice: u64,
    active: Vec<ActivePulse>,
    timestamp_shift: u64,
    sequence_shift: u16,
    signal: Vec<f64>,
    /// Pedestal plus drift, per channel, for the current block.
    drift: Vec<f64>,
    /// Standard normal deviates of the current block.
    normals: Vec<f64>,
    adcs: Vec<u16>,
    truth: Vec<TruePulse>,
    faults: Vec<InjectedFault>,
}

fn rng_for(seed: u64, stream: u64, index: u64) -> Xoshiro256PlusPlus {
    // Distinct, well-mixed seeds per (stream, index); seed_from_u64 runs SplitMix64 on it.
    let mixed = seed
        ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
    Xoshiro256PlusPlus::seed_from_u64(mixed)
}

impl LinkSimulator {
    fn new(config: Arc<SimConfig>, link: u32, format: FrameFormat, start_timestamp: u64) -> Self {
        let mut setup = rng_for(config.seed, 1, link as u64);
        let n = format.channels();
        let first = config.first_channel + link * n as u32;
        let channels = (0..n as u32)
            .map(|c| {
                let offline = first + c;
                let plane = Plane::of(offline);
                let base = if plane.is_collection() {
                    config.collection_pedestal
                } else {
                    config.induction_pedestal
                };
                let noisy = config.noisy_channels.contains(&offline);
                let (mut keep, mut force) = (u16::MAX, 0u16);
                for s in config.stuck_bits.iter().filter(|s| s.channel == offline) {
                    if s.value {
                        force |= 1 << s.bit
                    } else {
                        keep &= !(1 << s.bit)
                    }
                }
                Channel {
                    offline,
                    plane,
                    pedestal: base
                        + config.pedestal_spread * setup.sample::<f64, _>(StandardNormal),
                    white_sigma: config.white_noise_sigma
                        * if noisy { config.noisy_factor } else { 1.0 },
                    low_frequency: 0.0,
                    drift_phase: setup.random::<f64>() * std::f64::consts::TAU,
                    dead: config.dead_channels.contains(&offline),
                    keep,
                    force,
                }
            })
            .collect();
        let groups = n.div_ceil(config.coherent_group_size as usize);
        Self {
            link,
            format,
            channels,
            coherent: vec![0.0; groups],
            physics_rng: rng_for(config.seed, 2, link as u64),
            fault_rng: rng_for(config.seed, 3, link as u64),
            start_timestamp,
            sample: 0,
            frame_index: 0,
            next_track_slice: start_timestamp.div_ceil(TRACK_SLICE_TICKS),
            active: Vec::new(),
            timestamp_shift: 0,
            sequence_shift: 0,
            signal: vec![0.0; n * format.samples_per_frame()],
            drift: vec![0.0; n],
            normals: Vec::new(),
            adcs: vec![0; n * format.samples_per_frame()],
            truth: Vec::new(),
            faults: Vec::new(),
            config,
        }
    }

    pub fn format(&self) -> FrameFormat {
        self.format
    }

    pub fn frame_size(&self) -> usize {
        self.format.frame_size()
    }

    /// Offline channel and plane of channel `c` of this link.
    pub fn channel_info(&self, c: usize) -> (u32, Plane) {
        (self.channels[c].offline, self.channels[c].plane)
    }

    /// Expected noise sigma of channel `c` (0 for a dead channel).
    pub fn expected_noise_sigma(&self, c: usize) -> f64 {
        let ch = &self.channels[c];
        if ch.dead {
            return 0.0;
        }
        let cfg = &self.config;
        (ch.white_sigma.powi(2) + cfg.low_frequency_sigma.powi(2) + cfg.coherent_sigma.powi(2))
            .sqrt()
    }

    /// Pedestal of channel `c` before drift.
    pub fn pedestal(&self, c: usize) -> f64 {
        self.channels[c].pedestal
    }

    /// Pulses injected so far on this link's channels, taken out.
    pub fn drain_truth(&mut self) -> Vec<TruePulse> {
        std::mem::take(&mut self.truth)
    }

    /// Faults injected so far, taken out.
    pub fn drain_faults(&mut self) -> Vec<InjectedFault> {
        std::mem::take(&mut self.faults)
    }

    fn ticks_per_peaking_time(&self) -> f64 {
        self.config.peaking_time_us * 1e-6 * self.format.clock_hz()
    }

    fn tick_of_sample(&self, sample: u64) -> u64 {
        self.start_timestamp + sample * self.format.ticks_per_sample()
    }

    /// Generates the next frame's samples (`samples_per_frame` x `channels`, sample-major)
    /// without encoding: what hit-finding tests feed their algorithms.
    pub fn next_adcs(&mut self) -> &[u16] {
        let samples = self.format.samples_per_frame();
        let block_start = self.tick_of_sample(self.sample);
        let block_end = self.tick_of_sample(self.sample + samples as u64);
        self.add_tracks(block_end);
        self.add_blips(block_start, block_end);
        self.render_signal(block_start);
        self.add_noise_and_digitise();
        self.sample += samples as u64;
        &self.adcs
    }

    fn new_pulse(&mut self, channel: usize, start_tick: f64, amplitude: f64, kind: PulseKind) {
        let ch = &self.channels[channel];
        let bipolar_pulse = !ch.plane.is_collection();
        let tp = self.ticks_per_peaking_time();
        let tps = self.format.ticks_per_sample() as f64;
        // Charge on the sample grid, as a hit finder would integrate it.
        let first = ((start_tick - self.start_timestamp as f64) / tps)
            .ceil()
            .max(0.0) as u64;
        let last = ((start_tick + tp * LENGTH_IN_PEAKING_TIMES - self.start_timestamp as f64) / tps)
            as u64;
        let charge: f64 = (first..=last)
            .map(|s| {
                let x = (self.tick_of_sample(s) as f64 - start_tick) / tp;
                amplitude
                    * if bipolar_pulse {
                        bipolar(x).abs()
                    } else {
                        unipolar(x)
                    }
            })
            .sum();
        let peak_offset = if bipolar_pulse { tp * BIPOLAR_PEAK } else { tp };
        self.truth.push(TruePulse {
            link: self.link,
            channel: channel as u32,
            offline_channel: ch.offline,
            plane: ch.plane,
            start_tick: start_tick as u64,
            peak_tick: (start_tick + peak_offset).round() as u64,
            charge,
            peak_adc: amplitude,
            kind,
        });
        self.active.push(ActivePulse {
            channel,
            start_tick,
            amplitude,
            bipolar: bipolar_pulse,
        });
    }

    /// Tracks of every slice that starts before `block_end`, restricted to this link.
    fn add_tracks(&mut self, block_end: u64) {
        let cfg = self.config.clone();
        while self.next_track_slice * TRACK_SLICE_TICKS < block_end {
            let slice = self.next_track_slice;
            self.next_track_slice += 1;
            if cfg.track_rate_hz == 0.0 {
                continue;
            }
            let mut rng = rng_for(cfg.seed, 4, slice);
            let expected = cfg.track_rate_hz * TRACK_SLICE_TICKS as f64 / self.format.clock_hz();
            let count = Poisson::new(expected).map_or(0.0, |p| p.sample(&mut rng)) as u32;
            for _ in 0..count {
                let first = cfg.first_channel + rng.random_range(0..cfg.detector_channels);
                let length = rng.random_range(20..200u32);
                let backwards = rng.random::<bool>();
                let start = (slice * TRACK_SLICE_TICKS) as f64
                    + rng.random::<f64>() * TRACK_SLICE_TICKS as f64;
                let ticks_per_channel = rng.random::<f64>() * 80.0;
                let link_first = self.channels[0].offline;
                for step in 0..length {
                    let amplitude_scale = 0.7 + 0.6 * rng.random::<f64>();
                    let offline = if backwards {
                        first.wrapping_sub(step)
                    } else {
                        first + step
                    };
                    let Some(c) = offline
                        .checked_sub(link_first)
                        .map(|c| c as usize)
                        .filter(|&c| c < self.channels.len())
                    else {
                        continue;
                    };
                    let plane_scale = if self.channels[c].plane.is_collection() {
                        1.0
                    } else {
                        0.5
                    };
                    let amplitude = cfg.track_mean_adc * plane_scale * amplitude_scale;
                    self.new_pulse(
                        c,
                        start + ticks_per_channel * step as f64,
                        amplitude,
                        PulseKind::Track,
                    );
                }
            }
        }
    }

    fn add_blips(&mut self, block_start: u64, block_end: u64) {
        let cfg = self.config.clone();
        if cfg.blip_rate_hz == 0.0 {
            return;
        }
        let span = (block_end - block_start) as f64;
        let expected =
            cfg.blip_rate_hz * self.channels.len() as f64 * span / self.format.clock_hz();
        let count = Poisson::new(expected).map_or(0.0, |p| p.sample(&mut self.physics_rng)) as u32;
        let spectrum =
            Exp::new(1.0 / cfg.blip_mean_adc.max(f64::MIN_POSITIVE)).expect("positive rate");
        for _ in 0..count {
            let c = self.physics_rng.random_range(0..self.channels.len());
            let start = block_start as f64 + self.physics_rng.random::<f64>() * span;
            let amplitude = cfg.blip_min_adc + spectrum.sample(&mut self.physics_rng);
            self.new_pulse(c, start, amplitude, PulseKind::Blip);
        }
    }

    /// Adds every active pulse's contribution to this block and forgets finished pulses.
    fn render_signal(&mut self, block_start: u64) {
        self.signal.fill(0.0);
        let n = self.channels.len();
        let samples = self.format.samples_per_frame();
        let tps = self.format.ticks_per_sample() as f64;
        let tp = self.ticks_per_peaking_time();
        let length = tp * LENGTH_IN_PEAKING_TIMES;
        for p in &self.active {
            for s in 0..samples {
                let x = (block_start as f64 + s as f64 * tps - p.start_tick) / tp;
                if x > 0.0 && x * tp < length {
                    self.signal[s * n + p.channel] +=
                        p.amplitude * if p.bipolar { bipolar(x) } else { unipolar(x) };
                }
            }
        }
        let block_end = block_start as f64 + samples as f64 * tps;
        self.active.retain(|p| p.start_tick + length > block_end);
    }

    fn add_noise_and_digitise(&mut self) {
        let cfg = &self.config;
        let n = self.channels.len();
        let group = cfg.coherent_group_size as usize;
        let groups = self.coherent.len();
        let samples = self.format.samples_per_frame();
        let a = (-1.0 / cfg.low_frequency_samples).exp();
        let b = (1.0 - a * a).sqrt();
        let (coherent_step, low_frequency_step) =
            (b * cfg.coherent_sigma, b * cfg.low_frequency_sigma);
        let seconds = self.tick_of_sample(self.sample) as f64 / self.format.clock_hz();
        let drift_arg = std::f64::consts::TAU * seconds / cfg.drift_period_s;
        // The drift is slow (seconds): one value per channel per block is exact enough.
        for (d, ch) in self.drift.iter_mut().zip(&self.channels) {
            *d = ch.pedestal + cfg.drift_amplitude * (drift_arg + ch.drift_phase).sin();
        }
        // Every standard normal deviate of the block in one tight loop (the hot spot):
        // per sample, one per coherent group, then one low-frequency and one white per
        // channel (dead channels' are drawn and unused, so the stream never depends on them).
        let per_sample = groups + 2 * n;
        self.normals.resize(samples * per_sample, 0.0);
        crate::normal::fill_standard_normal(&mut self.physics_rng, &mut self.normals);
        let rows = self
            .normals
            .chunks_exact(per_sample)
            .zip(self.signal.chunks_exact(n))
            .zip(self.adcs.chunks_exact_mut(n));
        for ((normals, signal), adcs) in rows {
            let (coherent_normals, channel_normals) = normals.split_at(groups);
            for (g, z) in self.coherent.iter_mut().zip(coherent_normals) {
                *g = a * *g + coherent_step * z;
            }
            // Group by group: no division per sample to find a channel's group.
            let blocks = self
                .channels
                .chunks_mut(group)
                .zip(self.drift.chunks(group))
                .zip(channel_normals.chunks(2 * group))
                .zip(signal.chunks(group).zip(adcs.chunks_mut(group)))
                .zip(&self.coherent);
            for ((((channels, baselines), normals), (signals, adcs)), coherent) in blocks {
                let samples = channels
                    .iter_mut()
                    .zip(baselines)
                    .zip(normals.chunks_exact(2))
                    .zip(signals.iter().zip(adcs.iter_mut()));
                for (((ch, baseline), z), (s, adc)) in samples {
                    ch.low_frequency = a * ch.low_frequency + low_frequency_step * z[0];
                    let value = baseline + ch.low_frequency + coherent + ch.white_sigma * z[1] + s;
                    *adc = (to_adc(value) & ch.keep) | ch.force;
                }
            }
            for (ch, adc) in self.channels.iter().zip(adcs.iter_mut()) {
                if ch.dead {
                    *adc = to_adc(ch.pedestal);
                }
            }
        }
    }

    /// Emulates the next frame the front end sends into `out` (at least [`Self::frame_size`]
    /// bytes), injecting faults at the configured rates.
    pub fn next_frame(&mut self, out: &mut [u8]) -> FrameInfo {
        self.next_adcs();
        let index = self.frame_index;
        self.frame_index += 1;
        let fault = self.draw_fault();
        let mut detail = 0;
        match fault {
            Some(FaultKind::TimestampJump) => {
                detail = self
                    .fault_rng
                    .random_range(1..self.format.ticks_per_frame());
                self.timestamp_shift += detail;
            }
            Some(FaultKind::SequenceGap) => {
                detail = self.fault_rng.random_range(1..100);
                self.sequence_shift = (self.sequence_shift + detail as u16) % SEQ_ID_MODULUS;
            }
            _ => {}
        }
        let timestamp =
            self.start_timestamp + index * self.format.ticks_per_frame() + self.timestamp_shift;
        let seq_id =
            ((index % SEQ_ID_MODULUS as u64) as u16 + self.sequence_shift) % SEQ_ID_MODULUS;
        let size = self.frame_size();
        let frame = &mut out[..size];
        self.encode(
            frame,
            timestamp,
            seq_id,
            fault == Some(FaultKind::HeaderError),
        );
        let len = match fault {
            Some(FaultKind::Missing) => 0,
            Some(FaultKind::Truncated) => {
                detail = self.fault_rng.random_range(1..size as u64);
                detail as usize
            }
            Some(FaultKind::Corrupt) => {
                detail = self.fault_rng.random_range(1..=8);
                for _ in 0..detail {
                    let at = self.fault_rng.random_range(32..size);
                    frame[at] ^= 1 << self.fault_rng.random_range(0..8);
                }
                size
            }
            _ => size,
        };
        if let Some(kind) = fault {
            self.faults.push(InjectedFault {
                link: self.link,
                frame_index: index,
                timestamp,
                kind,
                detail,
            });
        }
        FrameInfo {
            len,
            timestamp,
            seq_id,
            fault,
        }
    }

    /// At most one fault per frame, drawn in a fixed order.
    fn draw_fault(&mut self) -> Option<FaultKind> {
        let f = self.config.faults;
        let u: f64 = self.fault_rng.random();
        let mut edge = 0.0;
        for (rate, kind) in [
            (f.missing, FaultKind::Missing),
            (f.timestamp_jump, FaultKind::TimestampJump),
            (f.sequence_gap, FaultKind::SequenceGap),
            (f.header_error, FaultKind::HeaderError),
            (f.corrupt, FaultKind::Corrupt),
            (f.truncated, FaultKind::Truncated),
        ] {
            edge += rate;
            if u < edge {
                return Some(kind);
            }
        }
        None
    }

    fn encode(&self, out: &mut [u8], timestamp: u64, seq_id: u16, header_error: bool) {
        match self.format {
            FrameFormat::WibEth => {
                let daq = DaqEthHeader {
                    version: 0,
                    det_id: DETECTOR_ID_HD_TPC as u8,
                    crate_id: (self.link / 40) as u16 & 0x3ff,
                    slot_id: ((self.link / 4) % 10) as u8,
                    stream_id: (self.link % 4) as u8,
                    seq_id,
                    block_length: 0,
                    timestamp,
                };
                let mut wib = WibEthHeader::healthy();
                wib.channel = self.link as u8;
                if header_error {
                    wib.crc_err = 1;
                    wib.lol = 1;
                }
                let mut adcs = [[0u16; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
                for (s, row) in adcs.iter_mut().enumerate() {
                    row.copy_from_slice(
                        &self.adcs[s * wibeth::NUM_CHANNELS..(s + 1) * wibeth::NUM_CHANNELS],
                    );
                }
                wibeth::encode(&daq, &wib, &adcs, out);
            }
            FrameFormat::ProtoWib => {
                let header = protowib::WibHeader {
                    sof: 0x3c,
                    version: 1,
                    fiber_no: (self.link % 8) as u8,
                    crate_no: (self.link / 8 % 32) as u8,
                    slot_no: 0,
                    wib_errors: header_error as u16,
                    timestamp,
                    ..Default::default()
                };
                // ProtoDUNE WIB ADCs are 12-bit: keep the emulator's 14-bit scale within range.
                let adcs: [u16; protowib::NUM_CHANNELS] =
                    std::array::from_fn(|c| self.adcs[c].min(protowib::ADC_MAX));
                protowib::encode(&header, &adcs, out);
            }
            // A detector's own board has no channels the emulator knows: its slices are
            // empty, timed as the format says (configurations refuse emulating one).
            FrameFormat::Board(_) => {
                swdaq_format::board_frame::BoardFrame {
                    timestamp,
                    source_id: self.link,
                    flags: if header_error {
                        swdaq_format::board_frame::DAMAGED_FLAGS
                    } else {
                        0
                    },
                    payload: &[],
                }
                .write(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_round_then_clamp() {
        for v in [
            -3.0_f64, -0.5, -0.4, 0.0, 0.49, 0.5, 2.5, 2.49, 16382.6, 16383.4, 1e9,
        ] {
            let reference = v.round().clamp(0.0, ADC_MAX) as u16;
            assert_eq!(to_adc(v), reference, "{v}");
        }
        assert_eq!(to_adc(f64::NAN), 0);
    }
}
