//! Trigger configuration (TOML-friendly: unknown keys are errors, every field has a default).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TriggerConfig {
    /// Readout window around each decision's timestamp: `[t - before, t + after)`.
    pub window_before_ticks: u64,
    pub window_after_ticks: u64,
    /// How long (wall clock) the merged TP stream waits for a link that stopped advancing
    /// before going on without it; its TPs older than what was released are late (dropped, counted).
    pub late_link_wait_ms: u64,
    /// What happens to a decision while the record builder has no credit (is busy).
    pub inhibit: InhibitPolicy,
    /// With `hold`: decisions waiting for credit beyond this are dropped (and counted).
    pub max_held_decisions: usize,
    /// Each maker and calibration trigger runs when its `enabled` is true.
    pub multiplicity: ActivityConfig,
    pub adc_sum: ActivityConfig,
    pub track: TrackConfig,
    pub periodic: PeriodicConfig,
    pub random: RandomConfig,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        Self {
            // 0.5 ms before, 2.5 ms after: a full drift (2.25 ms in DUNE's far detector) fits.
            window_before_ticks: 31_250,
            window_after_ticks: 156_250,
            late_link_wait_ms: 100,
            inhibit: InhibitPolicy::Hold,
            max_held_decisions: 64,
            multiplicity: ActivityConfig::default(),
            adc_sum: ActivityConfig {
                enabled: false,
                threshold: 5_000,
                ..ActivityConfig::default()
            },
            track: TrackConfig::default(),
            periodic: PeriodicConfig::default(),
            random: RandomConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InhibitPolicy {
    /// Keep decisions (up to `max_held_decisions`) until credit comes back.
    Hold,
    /// Drop decisions made while busy.
    Drop,
}

/// Multiplicity (TP count) or ADC-sum activity in a sliding window per channel group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivityConfig {
    pub enabled: bool,
    /// Channels per group (consecutive offline channel numbers).
    pub group_channels: u32,
    pub window_ticks: u64,
    /// TPs in the window (multiplicity) or sum of ADC integrals (adc-sum) needed to fire.
    pub threshold: u64,
    /// Keep one candidate in `prescale`.
    pub prescale: u32,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            group_channels: 64,
            window_ticks: 6_250,
            threshold: 24,
            prescale: 1,
        }
    }
}

/// Track-like activity: hits on many adjacent channels within a short time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrackConfig {
    pub enabled: bool,
    pub window_ticks: u64,
    /// Adjacent channels hit (a run of channel numbers) needed to fire.
    pub min_adjacent_channels: u32,
    /// Missing channels tolerated inside a run (dead or masked wires).
    pub max_channel_gap: u32,
    pub prescale: u32,
}

impl Default for TrackConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            window_ticks: 31_250,
            min_adjacent_channels: 16,
            max_channel_gap: 2,
            prescale: 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeriodicConfig {
    pub enabled: bool,
    pub rate_hz: f64,
    pub prescale: u32,
}

impl Default for PeriodicConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            rate_hz: 1.0,
            prescale: 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomConfig {
    pub enabled: bool,
    /// Mean rate of a Poisson process in data time.
    pub rate_hz: f64,
    pub seed: u64,
    pub prescale: u32,
}

impl Default for RandomConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            rate_hz: 1.0,
            seed: 1,
            prescale: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trigger.{key}: {reason}")]
pub struct ConfigError {
    pub key: &'static str,
    pub reason: String,
}

fn check(ok: bool, key: &'static str, reason: impl Into<String>) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError {
            key,
            reason: reason.into(),
        })
    }
}

/// The configuration keys of the trigger sources, in the order the trigger runs them.
pub const SOURCE_KEYS: [&str; 5] = ["multiplicity", "adc_sum", "track", "periodic", "random"];

/// One trigger source's settings (`TriggerConfig::sources`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceSetting {
    pub name: &'static str,
    pub enabled: bool,
    pub prescale: u32,
    /// `periodic` and `random` only.
    pub rate_hz: Option<f64>,
}

/// A change to one trigger source while the system is up (run control): its prescale, and
/// for the calibration triggers their rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerChange {
    /// One of [`SOURCE_KEYS`].
    pub trigger: String,
    #[serde(default)]
    pub prescale: Option<u32>,
    /// `periodic` and `random` only.
    #[serde(default)]
    pub rate_hz: Option<f64>,
}

impl TriggerConfig {
    /// Applies `change` and checks the result as a loaded configuration is checked; on error
    /// nothing changes. Only an enabled source can be changed.
    pub fn apply(&mut self, change: &TriggerChange) -> Result<(), ConfigError> {
        let key = SOURCE_KEYS
            .into_iter()
            .find(|&k| k == change.trigger)
            .ok_or_else(|| ConfigError {
                key: "trigger",
                reason: format!(
                    "no trigger source {:?} (one of {})",
                    change.trigger,
                    SOURCE_KEYS.join(", ")
                ),
            })?;
        let mut next = self.clone();
        let (enabled, prescale, rate_hz) = next.source_mut(key);
        check(enabled, key, "is not enabled in the configuration")?;
        check(
            change.prescale.is_some() || change.rate_hz.is_some(),
            key,
            "nothing to change: give prescale and/or rate_hz",
        )?;
        if let Some(p) = change.prescale {
            *prescale = p;
        }
        match (change.rate_hz, rate_hz) {
            (Some(hz), Some(rate)) => *rate = hz,
            (Some(_), None) => {
                return Err(ConfigError {
                    key,
                    reason: "has no rate (only periodic and random do)".into(),
                });
            }
            (None, _) => {}
        }
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Source `key` (one of [`SOURCE_KEYS`]): whether it is on, its prescale and, for the
    /// calibration triggers, its rate.
    fn source_mut(&mut self, key: &str) -> (bool, &mut u32, Option<&mut f64>) {
        match key {
            "multiplicity" => (
                self.multiplicity.enabled,
                &mut self.multiplicity.prescale,
                None,
            ),
            "adc_sum" => (self.adc_sum.enabled, &mut self.adc_sum.prescale, None),
            "track" => (self.track.enabled, &mut self.track.prescale, None),
            "periodic" => (
                self.periodic.enabled,
                &mut self.periodic.prescale,
                Some(&mut self.periodic.rate_hz),
            ),
            _ => (
                self.random.enabled,
                &mut self.random.prescale,
                Some(&mut self.random.rate_hz),
            ),
        }
    }

    /// Every trigger source with its settings now, in [`SOURCE_KEYS`] order: what a
    /// [`TriggerChange`] may name (run control's console shows them).
    pub fn sources(&self) -> Vec<SourceSetting> {
        let mut this = self.clone();
        SOURCE_KEYS
            .into_iter()
            .map(|name| {
                let (enabled, prescale, rate_hz) = this.source_mut(name);
                SourceSetting {
                    name,
                    enabled,
                    prescale: *prescale,
                    rate_hz: rate_hz.map(|r| *r),
                }
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.window_before_ticks + self.window_after_ticks > 0,
            "window_after_ticks",
            "the readout window is empty (before + after must be > 0)",
        )?;
        check(
            self.inhibit == InhibitPolicy::Drop || self.max_held_decisions > 0,
            "max_held_decisions",
            "must be > 0 with inhibit = \"hold\"",
        )?;
        for (key, a) in [
            ("multiplicity", &self.multiplicity),
            ("adc_sum", &self.adc_sum),
        ] {
            if a.enabled {
                check(a.group_channels > 0, key, "group_channels must be > 0")?;
                check(a.window_ticks > 0, key, "window_ticks must be > 0")?;
                check(a.threshold > 0, key, "threshold must be > 0")?;
                check(a.prescale > 0, key, "prescale must be > 0")?;
            }
        }
        let t = &self.track;
        if t.enabled {
            check(t.window_ticks > 0, "track", "window_ticks must be > 0")?;
            check(
                t.min_adjacent_channels > 1,
                "track",
                "min_adjacent_channels must be > 1",
            )?;
            check(t.prescale > 0, "track", "prescale must be > 0")?;
        }
        for (key, enabled, rate_hz, prescale) in [
            (
                "periodic",
                self.periodic.enabled,
                self.periodic.rate_hz,
                self.periodic.prescale,
            ),
            (
                "random",
                self.random.enabled,
                self.random.rate_hz,
                self.random.prescale,
            ),
        ] {
            if enabled {
                check(
                    rate_hz > 0.0 && rate_hz.is_finite() && rate_hz <= 1e5,
                    key,
                    format!("rate_hz must be in (0, 100000], not {rate_hz}"),
                )?;
                check(prescale > 0, key, "prescale must be > 0")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with_periodic() -> TriggerConfig {
        let mut c = TriggerConfig::default();
        c.periodic.enabled = true;
        c
    }

    #[test]
    fn a_change_sets_the_prescale_and_rate_of_an_enabled_source() {
        let mut c = with_periodic();
        let change = TriggerChange {
            trigger: "periodic".into(),
            prescale: Some(3),
            rate_hz: Some(250.0),
        };
        c.apply(&change).unwrap();
        assert_eq!((c.periodic.prescale, c.periodic.rate_hz), (3, 250.0));
        // The settings listed for run control are the ones now in force.
        let periodic = SourceSetting {
            name: "periodic",
            enabled: true,
            prescale: 3,
            rate_hz: Some(250.0),
        };
        let sources = c.sources();
        let names: Vec<&str> = sources.iter().map(|s| s.name).collect();
        assert_eq!(names, SOURCE_KEYS);
        assert_eq!(sources[3], periodic);
        assert_eq!(sources[0].rate_hz, None);
    }

    #[test]
    fn a_change_refused_names_why_and_changes_nothing() {
        let mut c = with_periodic();
        let refused = |c: &mut TriggerConfig, trigger: &str, prescale, rate_hz| {
            let before = c.clone();
            let e = c
                .apply(&TriggerChange {
                    trigger: trigger.into(),
                    prescale,
                    rate_hz,
                })
                .unwrap_err();
            assert_eq!(*c, before);
            e.to_string()
        };
        assert!(refused(&mut c, "cosmic", Some(2), None).contains("no trigger source"));
        assert!(refused(&mut c, "random", Some(2), None).contains("not enabled"));
        assert!(refused(&mut c, "multiplicity", None, Some(5.0)).contains("has no rate"));
        assert!(refused(&mut c, "periodic", Some(0), None).contains("prescale must be > 0"));
        assert!(refused(&mut c, "periodic", None, Some(-1.0)).contains("rate_hz"));
        // A peer's wire message may carry any f64: not-a-number and infinity are refused too.
        assert!(refused(&mut c, "periodic", None, Some(f64::NAN)).contains("rate_hz"));
        assert!(refused(&mut c, "periodic", None, Some(f64::INFINITY)).contains("rate_hz"));
        assert!(refused(&mut c, "periodic", None, None).contains("nothing to change"));
    }

    proptest! {
        #[test]
        fn a_change_is_applied_whole_and_valid_or_not_at_all(
            source in 0..6usize,
            prescale in proptest::option::of(0..5u32),
            rate_hz in proptest::option::of(-10.0..2e5f64),
        ) {
            let mut c = with_periodic();
            let before = c.clone();
            let trigger = SOURCE_KEYS.get(source).copied().unwrap_or("unknown").to_string();
            match c.apply(&TriggerChange { trigger, prescale, rate_hz }) {
                Ok(()) => prop_assert!(c.validate().is_ok()),
                Err(_) => prop_assert_eq!(c, before),
            }
        }
    }
}
