//! The DUNE-style streaming chain: emulated links, readout with hit finding, self-trigger,
//! record building, HDF5 storage; in one process (`system`) or as the applications of a
//! `[topology]` (`apps`, started by `runtime::launch`). Its keys: `config`; its live
//! figures: `live`; its closing summary: `summary`.

pub mod apps;
pub mod config;
pub mod display;
pub mod inputs;
pub mod live;
pub mod metrics;
pub mod pass_score;
pub mod readout;
pub mod recording;
pub mod roi_score;
pub mod sections;
pub mod sink;
pub mod summary;
pub mod system;
pub mod wire;

use crate::run_section::RunSection;
use crate::runtime::model::{Capabilities, Configured, Model, ModelOf, Outcome, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::TopologySection;
use config::RunConfig;
use std::path::PathBuf;
use swdaq_trigger::TriggerChange;
use system::RunReport;

pub static CHAIN: ModelOf<RunConfig> = ModelOf::new(
    "chain",
    "DUNE-style streaming chain",
    None,
    RunConfig::parse,
    None,
)
.with_dashboard(include_str!("dashboard.json"))
.with_alerts(include_str!("alerts.json"));

impl Configured for RunConfig {
    fn model(&self) -> &'static dyn Model {
        &CHAIN
    }

    fn run_section(&self) -> &RunSection {
        &self.run
    }

    fn run_section_mut(&mut self) -> &mut RunSection {
        &mut self.run
    }

    fn set_links(&mut self, n: u32) -> anyhow::Result<()> {
        self.emulator.links = n;
        Ok(())
    }

    fn validate(&self) -> anyhow::Result<()> {
        RunConfig::validate(self)
    }

    fn to_toml(&self) -> String {
        RunConfig::to_toml(self)
    }

    fn output_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.run.output_dir.clone()];
        if self.recording.enabled {
            dirs.push(self.recording.directory(&self.run.output_dir));
        }
        dirs
    }

    fn topology(&self) -> &TopologySection {
        &self.topology
    }

    fn describe(&self) -> String {
        format!(
            "{} {} links from {}{}, {}, writing to {}{}",
            self.emulator.links,
            self.source.frame_format().name(),
            self.source.describe(),
            if self.is_distributed() {
                format!(" in {} applications", self.topology.apps.len())
            } else {
                String::new()
            },
            crate::runtime::model::duration_words(self.run.duration_s),
            self.run.output_dir.display(),
            if self.run.metrics_addr.is_empty() || self.is_distributed() {
                String::new()
            } else {
                format!(", metrics on http://{}/metrics", self.run.metrics_addr)
            },
        )
    }

    fn steering(&self) -> Capabilities {
        Capabilities {
            pause_resume: Ok(()),
            trigger_change: Ok(self.trigger.sources()),
            record: if self.recording.enabled {
                Ok(self.recording.seconds_after)
            } else {
                Err("recording is off ([recording] enabled = false)".into())
            },
        }
    }

    fn stored_event(&self, run: u32) -> Result<crate::stored::StoredEvent, String> {
        display::stored_record(std::slice::from_ref(&self.run.output_dir), run)
    }

    fn change_trigger(&mut self, change: &TriggerChange) -> Result<(), String> {
        self.trigger.apply(change).map_err(|e| e.to_string())
    }

    fn run(&self, stop: &StopRequest, hooks: &dyn RunHooks) -> anyhow::Result<Box<dyn Outcome>> {
        let report = if self.is_distributed() {
            let exe = crate::runtime::launch::current_exe()?;
            apps::run_distributed(self, &exe, stop, hooks)?
        } else {
            system::run_chain(self, stop, hooks)?
        };
        Ok(Box::new(ChainOutcome {
            run_number: self.run.number,
            report,
        }))
    }
}

/// How a run of the chain ended.
pub struct ChainOutcome {
    pub run_number: u32,
    pub report: RunReport,
}

impl Outcome for ChainOutcome {
    fn run_number(&self) -> u32 {
        self.run_number
    }

    fn stop_reason(&self) -> &StopReason {
        &self.report.stop_reason
    }

    fn text(&self) -> String {
        summary::summary(&self.report)
    }

    fn model(&self) -> &'static str {
        CHAIN.name()
    }

    fn figures(&self) -> serde_json::Value {
        summary::summary_json(&self.report)
    }

    fn failure(&self) -> Option<String> {
        match &self.report.stop_reason {
            StopReason::StorageFailed(e) => Some(e.clone()),
            _ => None,
        }
    }
}
