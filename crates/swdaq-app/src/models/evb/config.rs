//! The event-builder run file (`configs/evb.toml` is the commented example): the builder's
//! settings (`[evb]`, `swdaq_evb::EvbConfig`), how long to run, `/metrics`, and an optional
//! `[topology]` of `evm`, `ru` and `bu` applications.

use crate::runtime::memory::MemoryPlan;
use crate::runtime::topology::TopologySection;
use serde::{Deserialize, Serialize};
use swdaq_evb::EvbConfig;

/// An event-builder run file: the builder's settings and how long to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvbRunConfig {
    /// Seconds of data taking (0: until Ctrl-C or `evb.max_events`).
    pub duration_s: f64,
    /// `/metrics` address, or "" for none.
    pub metrics_addr: String,
    pub evb: EvbConfig,
    /// Empty: one process. Otherwise the `evm`, `ru` and `bu` applications.
    pub topology: TopologySection,
}

impl Default for EvbRunConfig {
    fn default() -> Self {
        Self {
            duration_s: 10.0,
            metrics_addr: "127.0.0.1:9464".into(),
            evb: EvbConfig::default(),
            topology: TopologySection::default(),
        }
    }
}

/// Parses and checks an event-builder run's configuration.
pub fn parse(text: &str) -> anyhow::Result<EvbRunConfig> {
    let config: EvbRunConfig = crate::model::parse_toml(text)?;
    config.validate()?;
    Ok(config)
}

impl EvbRunConfig {
    /// Checks every value that could stop the run half-way, before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        let config = self;
        config.evb.validate()?;
        anyhow::ensure!(config.duration_s >= 0.0, "duration_s must not be negative");
        config
            .topology
            .validate_evb(config.evb.rus.len(), config.evb.builder_units as usize)?;
        anyhow::ensure!(
            !(config.topology.is_distributed() && config.evb.farm.consumers > 0),
            "evb.farm runs in one process only: not with a [topology]"
        );
        crate::model::check_metrics_addr(&config.metrics_addr, "metrics_addr")?;
        let widest_ru = config.evb.rus.iter().map(Vec::len).max().unwrap_or(0) as u64;
        let super_fragment = widest_ru.saturating_mul(config.evb.input.max_fragment_bytes as u64);
        config.topology.check_largest_message(
            super_fragment.saturating_mul(swdaq_evb::message::MAX_BATCH as u64),
            "a batch of super-fragments (the widest readout unit's FEDs at evb.input.max_fragment_bytes each)",
        )?;
        config.memory_plan().check()
    }

    /// What the sizes set here hold at most, each fragment at most `max_fragment_bytes`:
    /// every FED's latency buffer, the readout units' super-fragments, the builder units'
    /// events.
    fn memory_plan(&self) -> MemoryPlan {
        let evb = &self.evb;
        let fragment = evb.input.max_fragment_bytes as u64;
        let feds: u64 = evb.rus.iter().map(|ru| ru.len() as u64).sum();
        let widest_ru = evb.rus.iter().map(|ru| ru.len() as u64).max().unwrap_or(0);
        let rus = evb.rus.len() as u64;
        let mut plan = MemoryPlan::default();
        plan.add(
            "evb.input.buffer_fragments (all FEDs)",
            feds.saturating_mul(evb.input.buffer_fragments as u64),
            fragment,
        )
        .add(
            "evb.ru_capacity (all readout units)",
            rus.saturating_mul(evb.ru_capacity as u64),
            widest_ru.saturating_mul(fragment),
        )
        .add(
            "evb.bu_capacity (all builder units)",
            u64::from(evb.builder_units) * u64::from(evb.bu_capacity),
            feds.saturating_mul(fragment),
        );
        plan
    }

    pub fn to_toml(&self) -> String {
        crate::model::to_toml(self)
    }
}
