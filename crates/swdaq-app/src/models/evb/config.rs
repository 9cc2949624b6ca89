//! The event-builder run file (`configs/evb.toml` is the commented example): the run's keys
//! (`[run]`), the builder's settings (`[evb]`, `swdaq_evb::EvbConfig`) and an optional
//! `[topology]` of `evm`, `ru` and `bu` applications.

use crate::run_section::{OldSpellings, RunSection};
use crate::runtime::dqm::DqmSection;
use crate::runtime::memory::MemoryPlan;
use crate::runtime::topology::TopologySection;
use serde::{Deserialize, Serialize};
use swdaq_evb::EvbConfig;

/// An event-builder run file: the run's keys and the builder's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvbRunConfig {
    /// `duration_s` 0: until stopped or `evb.max_events`.
    #[serde(deserialize_with = "run_over_defaults")]
    pub run: RunSection,
    pub evb: EvbConfig,
    /// Empty: one process. Otherwise the `evm`, `ru` and `bu` applications.
    pub topology: TopologySection,
    /// Online data-quality monitoring of the built events (one process only).
    pub dqm: DqmSection,
}

fn run_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RunSection, D::Error> {
    RunSection::deserialize_over(d, EvbRunConfig::default().run)
}

/// Where older event-builder files kept the `[run]` keys (besides the top-level ones).
pub const OLD_SPELLINGS: OldSpellings = OldSpellings {
    table: "evb",
    in_table: &[("run", "number"), ("output", "output_dir")],
};

impl Default for EvbRunConfig {
    fn default() -> Self {
        Self {
            run: RunSection::writing_to(swdaq_evb::config::default_output()),
            evb: EvbConfig::default(),
            topology: TopologySection::default(),
            dqm: DqmSection::default(),
        }
    }
}

/// Parses and checks an event-builder run's configuration.
pub fn parse(text: &str) -> anyhow::Result<EvbRunConfig> {
    let config: EvbRunConfig = crate::run_section::parse(text, Some(&OLD_SPELLINGS))?;
    config.validate()?;
    Ok(config)
}

impl EvbRunConfig {
    /// The builder's settings with the run's number, output directory and provenance, for
    /// the event builder itself (`[evb]` does not hold them).
    pub fn builder(&self) -> EvbConfig {
        EvbConfig {
            run: self.run.number,
            output: self.run.output_dir.clone(),
            provenance: Some(self.run.provenance()),
            ..self.evb.clone()
        }
    }

    /// Checks every value that could stop the run half-way, before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        let config = self;
        config.evb.validate()?;
        config.run.validate()?;
        config.dqm.validate(config.run.number)?;
        crate::runtime::app::check_kinds(config, super::apps::KINDS)?;
        super::apps::EVENT_STREAMS.check(&config.topology, config.dqm.enabled)?;
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
        crate::runtime::model::to_toml(self)
    }
}
