//! The tally: the smallest model, and the one to copy for a model of your own. Counters
//! count at a set rate, in one process (threads) or as `counter` applications that tell each
//! other their counts over the wire; the summary checks that every count travelled whole.
//! It writes no data files. Its keys: `config`; its counting: `counter`; its runs and live
//! figures: `system`; its applications: `apps`; its message: `wire`; its summary: `summary`.

pub mod apps;
pub mod config;
pub mod counter;
pub mod summary;
pub mod system;
pub mod wire;

use crate::run_section::RunSection;
use crate::runtime::model::{Capabilities, Configured, Model, ModelOf, Outcome, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::TopologySection;
use config::TallyConfig;
use summary::TallySummary;

pub static TALLY: ModelOf<TallyConfig> = ModelOf::new(
    "tally",
    "counters telling each other their counts (the model to copy)",
    Some("tally"),
    config::parse,
    None,
);

impl Configured for TallyConfig {
    fn model(&self) -> &'static dyn Model {
        &TALLY
    }

    fn run_section(&self) -> &RunSection {
        &self.run
    }

    fn run_section_mut(&mut self) -> &mut RunSection {
        &mut self.run
    }

    fn set_links(&mut self, n: u32) -> anyhow::Result<()> {
        anyhow::bail!("--links {n}: the tally has counters, not links (tally.counters)")
    }

    fn validate(&self) -> anyhow::Result<()> {
        TallyConfig::validate(self)
    }

    fn to_toml(&self) -> String {
        crate::runtime::model::to_toml(self)
    }

    fn topology(&self) -> &TopologySection {
        &self.topology
    }

    fn describe(&self) -> String {
        let counters = if self.is_distributed() {
            format!("{} counter applications", self.topology.apps.len())
        } else {
            format!("{} counters", self.tally.counters)
        };
        format!(
            "{counters} at {} Hz, {}",
            self.tally.rate_hz,
            crate::runtime::model::duration_words(self.run.duration_s)
        )
    }

    fn steering(&self) -> Capabilities {
        let none = |what: &str| format!("the tally has no {what}");
        Capabilities {
            pause_resume: Err(none("trigger to pause")),
            trigger_change: Err(none("trigger sources to change")),
            record: Err(none("raw bursts")),
        }
    }

    fn stored_event(&self, _run: u32) -> Result<crate::stored::StoredEvent, String> {
        Err("the tally writes no events".into())
    }

    fn run(&self, stop: &StopRequest, hooks: &dyn RunHooks) -> anyhow::Result<Box<dyn Outcome>> {
        let summary = if self.is_distributed() {
            let exe = crate::runtime::launch::current_exe()?;
            system::run_apps(self, &exe, stop, hooks)?
        } else {
            system::run_one_process(self, stop, hooks)?
        };
        Ok(Box::new(TallyOutcome {
            run_number: self.run.number,
            summary,
        }))
    }
}

pub struct TallyOutcome {
    run_number: u32,
    summary: TallySummary,
}

impl Outcome for TallyOutcome {
    fn model(&self) -> &'static str {
        TALLY.name()
    }

    fn run_number(&self) -> u32 {
        self.run_number
    }

    fn stop_reason(&self) -> &StopReason {
        &self.summary.stop_reason
    }

    fn text(&self) -> String {
        self.summary.text()
    }

    fn figures(&self) -> serde_json::Value {
        serde_json::to_value(&self.summary).expect("the tally's summary is plain data")
    }

    fn failure(&self) -> Option<String> {
        let failures = self.summary.failures();
        (!failures.is_empty()).then(|| failures.join("; "))
    }
}
