//! Emulator configuration: every field has a default, unknown keys are errors, and
//! [`SimConfig::validate`] rejects impossible values with a message naming the field.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub seed: u64,
    /// Offline channel number of link 0's first channel; link `l` starts at
    /// `first_channel + l * channels_per_link`. The default puts link 0 on induction (V)
    /// channels and the following links on collection channels of an APA-like map.
    pub first_channel: u32,
    /// Offline channels the tracks are spread over, from `first_channel`.
    pub detector_channels: u32,
    pub collection_pedestal: f64,
    pub induction_pedestal: f64,
    /// Channel-to-channel spread (sigma) of pedestals, ADC.
    pub pedestal_spread: f64,
    /// White noise sigma, ADC.
    pub white_noise_sigma: f64,
    /// Low-frequency (AR(1), 1/f-like) noise sigma per channel, ADC.
    pub low_frequency_sigma: f64,
    /// Correlation time of the low-frequency noise, in samples.
    pub low_frequency_samples: f64,
    /// Noise shared by groups of adjacent channels, ADC.
    pub coherent_sigma: f64,
    pub coherent_group_size: u32,
    /// Slow pedestal drift amplitude (ADC) and period (seconds), a sine per channel.
    pub drift_amplitude: f64,
    pub drift_period_s: f64,
    /// Front-end shaping: time from pulse start to peak, microseconds.
    pub peaking_time_us: f64,
    /// Point-like radiological deposits per channel per second.
    pub blip_rate_hz: f64,
    /// Blip peak amplitudes: `blip_min_adc` plus an exponential of mean `blip_mean_adc`.
    pub blip_min_adc: f64,
    pub blip_mean_adc: f64,
    /// Tracks (muon-like) per second over the `detector_channels`.
    pub track_rate_hz: f64,
    /// Mean peak amplitude a track leaves on a collection channel (induction: half).
    pub track_mean_adc: f64,
    pub noisy_channels: Vec<u32>,
    pub noisy_factor: f64,
    pub dead_channels: Vec<u32>,
    pub stuck_bits: Vec<StuckBit>,
    pub faults: FaultRates,
}

/// One ADC bit forced to a value on one (offline) channel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StuckBit {
    pub channel: u32,
    pub bit: u8,
    pub value: bool,
}

/// Per-frame probabilities of each injected fault; all 0 by default.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultRates {
    /// The frame never leaves the front end (its sequence id is still used up).
    pub missing: f64,
    /// The timestamp jumps by a fraction of a frame and continues from there.
    pub timestamp_jump: f64,
    /// The sequence id skips ahead.
    pub sequence_gap: f64,
    /// The header reports an error (CRC error, loss of lock).
    pub header_error: f64,
    /// Payload bytes are flipped (not detectable from the frame alone).
    pub corrupt: f64,
    /// The frame arrives cut short, in place of the whole frame.
    pub truncated: f64,
}

impl FaultRates {
    /// Only faults of `kind`, at `rate` per frame.
    pub fn only(kind: crate::FaultKind, rate: f64) -> Self {
        use crate::FaultKind::*;
        let mut f = Self::default();
        *match kind {
            Missing => &mut f.missing,
            TimestampJump => &mut f.timestamp_jump,
            SequenceGap => &mut f.sequence_gap,
            HeaderError => &mut f.header_error,
            Corrupt => &mut f.corrupt,
            Truncated => &mut f.truncated,
        } = rate;
        f
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            first_channel: 1568,
            detector_channels: 512,
            collection_pedestal: 900.0,
            induction_pedestal: 2350.0,
            pedestal_spread: 20.0,
            white_noise_sigma: 4.0,
            low_frequency_sigma: 1.0,
            low_frequency_samples: 200.0,
            coherent_sigma: 1.0,
            coherent_group_size: 32,
            drift_amplitude: 2.0,
            drift_period_s: 20.0,
            peaking_time_us: 2.0,
            blip_rate_hz: 5.0,
            blip_min_adc: 4.0,
            blip_mean_adc: 25.0,
            track_rate_hz: 20.0,
            track_mean_adc: 80.0,
            noisy_channels: Vec::new(),
            noisy_factor: 5.0,
            dead_channels: Vec::new(),
            stuck_bits: Vec::new(),
            faults: FaultRates::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid emulator setting `{field}`: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

impl SimConfig {
    /// Config with only white noise: no drift, no correlated noise, no signals.
    pub fn white_noise_only(sigma: f64) -> Self {
        Self {
            white_noise_sigma: sigma,
            low_frequency_sigma: 0.0,
            coherent_sigma: 0.0,
            drift_amplitude: 0.0,
            blip_rate_hz: 0.0,
            track_rate_hz: 0.0,
            ..Self::default()
        }
    }

    /// Expected total noise sigma of a healthy channel (independent contributions add in quadrature).
    pub fn expected_noise_sigma(&self) -> f64 {
        (self.white_noise_sigma.powi(2)
            + self.low_frequency_sigma.powi(2)
            + self.coherent_sigma.powi(2))
        .sqrt()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: &str| {
            Err(ConfigError {
                field,
                reason: reason.into(),
            })
        };
        let non_negative = [
            ("pedestal_spread", self.pedestal_spread),
            ("white_noise_sigma", self.white_noise_sigma),
            ("low_frequency_sigma", self.low_frequency_sigma),
            ("coherent_sigma", self.coherent_sigma),
            ("drift_amplitude", self.drift_amplitude),
            ("blip_rate_hz", self.blip_rate_hz),
            ("blip_min_adc", self.blip_min_adc),
            ("blip_mean_adc", self.blip_mean_adc),
            ("track_rate_hz", self.track_rate_hz),
            ("track_mean_adc", self.track_mean_adc),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return err(field, "must be a finite number >= 0");
            }
        }
        for (field, v) in [
            ("peaking_time_us", self.peaking_time_us),
            ("low_frequency_samples", self.low_frequency_samples),
            ("drift_period_s", self.drift_period_s),
            ("noisy_factor", self.noisy_factor),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return err(field, "must be a finite number > 0");
            }
        }
        // Far beyond any detector, and a cost per frame the emulator could never pay (a
        // deposit is generated per blip and track; a pulse is as long as its shaping).
        for (field, v, max) in [
            ("blip_rate_hz", self.blip_rate_hz, 1e5),
            ("track_rate_hz", self.track_rate_hz, 1e6),
            ("peaking_time_us", self.peaking_time_us, 100.0),
        ] {
            if v > max {
                return err(field, &format!("must be at most {max}"));
            }
        }
        for (field, v) in [
            ("collection_pedestal", self.collection_pedestal),
            ("induction_pedestal", self.induction_pedestal),
        ] {
            if !(0.0..16383.0).contains(&v) {
                return err(field, "must lie within the 14-bit ADC range");
            }
        }
        if self.coherent_group_size == 0 {
            return err("coherent_group_size", "must be at least 1");
        }
        if self.detector_channels == 0 {
            return err("detector_channels", "must be at least 1");
        }
        if let Some(s) = self.stuck_bits.iter().find(|s| s.bit >= 14) {
            return err(
                "stuck_bits",
                &format!("bit {} is outside a 14-bit ADC", s.bit),
            );
        }
        let f = &self.faults;
        for (field, v) in [
            ("faults.missing", f.missing),
            ("faults.timestamp_jump", f.timestamp_jump),
            ("faults.sequence_gap", f.sequence_gap),
            ("faults.header_error", f.header_error),
            ("faults.corrupt", f.corrupt),
            ("faults.truncated", f.truncated),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return err(field, "is a per-frame probability: 0 to 1");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let c = SimConfig::default();
        c.validate().unwrap();
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<SimConfig>(&text).unwrap(), c);
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        let e = SimConfig {
            peaking_time_us: 0.0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "peaking_time_us");
        let e = SimConfig {
            faults: FaultRates {
                missing: 2.0,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(e.validate().unwrap_err().field, "faults.missing");
        let e = SimConfig {
            white_noise_sigma: f64::NAN,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "white_noise_sigma");
        for (field, c) in [
            (
                "blip_rate_hz",
                SimConfig {
                    blip_rate_hz: 1e12,
                    ..Default::default()
                },
            ),
            (
                "track_rate_hz",
                SimConfig {
                    track_rate_hz: 1e12,
                    ..Default::default()
                },
            ),
            (
                "peaking_time_us",
                SimConfig {
                    peaking_time_us: 1e12,
                    ..Default::default()
                },
            ),
        ] {
            assert_eq!(c.validate().unwrap_err().field, field);
        }
        assert!(
            toml::from_str::<SimConfig>("sead = 3")
                .unwrap_err()
                .to_string()
                .contains("sead")
        );
    }
}
