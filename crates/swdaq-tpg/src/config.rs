//! Hit-finding configuration: DUNE's production `threshold` algorithm (frugal-streaming
//! pedestal, fixed threshold in ADC counts).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdConfig {
    /// A sample is over threshold when `adc - pedestal > threshold` (strictly).
    pub threshold: i16,
    /// The frugal accumulator moves the pedestal by 1 once it passes +/- this value.
    pub accumulator_limit: i16,
    /// Pedestal to start from; `None`: each channel's first sample (no warm-up, no junk hits).
    pub initial_pedestal: Option<i16>,
    /// Hits longer than this many samples are closed and flagged `TRUNCATED`.
    pub max_hit_samples: u16,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self {
            threshold: 20,
            accumulator_limit: 10,
            initial_pedestal: None,
            max_hit_samples: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid hit-finding setting `{field}`: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl ThresholdConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Limits keep every intermediate value inside i16 (ADCs are 14-bit).
        if !(0..=16383).contains(&self.threshold) {
            return Err(ConfigError {
                field: "threshold",
                reason: "must be 0..=16383 ADC",
            });
        }
        if !(1..=1000).contains(&self.accumulator_limit) {
            return Err(ConfigError {
                field: "accumulator_limit",
                reason: "must be 1..=1000",
            });
        }
        if self
            .initial_pedestal
            .is_some_and(|p| !(0..=16383).contains(&p))
        {
            return Err(ConfigError {
                field: "initial_pedestal",
                reason: "must be 0..=16383 ADC",
            });
        }
        if self.max_hit_samples == 0 {
            return Err(ConfigError {
                field: "max_hit_samples",
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}
