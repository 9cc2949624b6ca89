//! The tally's run file: the run's keys (`[run]`), its own (`[tally]`) and an optional
//! `[topology]` of `counter` applications.

use crate::run_section::RunSection;
use crate::runtime::topology::TopologySection;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TallyConfig {
    #[serde(deserialize_with = "run_over_defaults")]
    pub run: RunSection,
    pub tally: TallySection,
    /// Empty: one process. Otherwise its `counter` applications, each telling the next its
    /// count.
    pub topology: TopologySection,
}

/// `[tally]`: how many counters count, and how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TallySection {
    /// Counter threads in one process (with a topology, each `counter` application is one).
    pub counters: u32,
    /// Counts per second of each counter.
    pub rate_hz: f64,
}

impl Default for TallySection {
    fn default() -> Self {
        Self {
            counters: 2,
            rate_hz: 1000.0,
        }
    }
}

/// Counts per second a counter can be asked for: it counts on a millisecond clock.
const MAX_RATE_HZ: f64 = 1e6;

impl Default for TallyConfig {
    fn default() -> Self {
        Self {
            run: RunSection::writing_to("swdaq-tally"),
            tally: TallySection::default(),
            topology: TopologySection::default(),
        }
    }
}

fn run_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RunSection, D::Error> {
    RunSection::deserialize_over(d, TallyConfig::default().run)
}

/// Parses and checks a tally's configuration.
pub fn parse(text: &str) -> anyhow::Result<TallyConfig> {
    let config: TallyConfig = crate::run_section::parse(text, None)?;
    config.validate()?;
    Ok(config)
}

impl TallyConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.run.validate()?;
        let t = &self.tally;
        if !(1..=64).contains(&t.counters) {
            anyhow::bail!(
                "invalid configuration: tally.counters = {}: 1 to 64",
                t.counters
            );
        }
        if !(t.rate_hz > 0.0 && t.rate_hz <= MAX_RATE_HZ) {
            anyhow::bail!(
                "invalid configuration: tally.rate_hz = {}: above 0, at most {MAX_RATE_HZ}",
                t.rate_hz
            );
        }
        crate::runtime::app::check_kinds(self, super::apps::KINDS)
    }
}
