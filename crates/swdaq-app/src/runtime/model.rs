//! The shape of a dataflow model. Everything around a model — `swdaq run`'s flags, its
//! start line, signals, live view and summary, `swdaq app`, run control — is written once
//! against these traits and never asks which model it holds. The models are listed in
//! `models::MODELS`; a configuration picks one by its top-level table (`models::select`).

use crate::live::Live;
use crate::run_section::{OldSpellings, RunSection};
use crate::runtime::app::KindSpec;
use crate::runtime::dqm::DqmView;
use crate::runtime::outcome::StopReason;
use crate::runtime::stdio::Commands;
use crate::runtime::steering::Steering;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::TopologySection;
use std::path::PathBuf;
use std::time::Duration;
use swdaq_net::WireMessage;
use swdaq_trigger::TriggerChange;

/// A dataflow model: what it is called and how its configuration is read.
pub trait Model: Sync {
    /// "chain", "evb", "swrod".
    fn name(&self) -> &'static str;
    /// "DUNE-style streaming chain", ...
    fn title(&self) -> &'static str;
    /// The top-level TOML table that selects it (`None`: the default model).
    fn table(&self) -> Option<&'static str>;
    /// Parses and checks a configuration's text; an error names the key.
    fn parse(&self, text: &str) -> anyhow::Result<Box<dyn Configured>>;
    /// One line per old spelling of a `[run]` key the text uses (it is still read).
    fn deprecations(&self, text: &str) -> Vec<String>;
    fn default_config(&self) -> Box<dyn Configured>;
    /// Its Grafana dashboard as data (JSON: file, uid, title, description, rows of panels
    /// with their PromQL targets), which `deploy/grafana/dashboards.py` renders; none
    /// without one.
    fn dashboard(&self) -> Option<&'static str>;
    /// Its terms of the shared alerting rules as data (JSON: rule placeholder -> PromQL
    /// terms), which `deploy/prometheus/alerts.py` puts into `alerts.yml`; none without.
    fn alerts(&self) -> Option<&'static str>;
}

/// One model's loaded configuration: everything around the model asks it, never its type.
pub trait Configured: CloneConfigured + ApplicationsOf + Send + Sync {
    fn model(&self) -> &'static dyn Model;
    /// `[run]`: the keys every model has.
    fn run_section(&self) -> &RunSection;
    fn run_section_mut(&mut self) -> &mut RunSection;
    /// `--links`: what the model's inputs are, or one line saying why it has none to set.
    fn set_links(&mut self, n: u32) -> anyhow::Result<()>;
    /// Applies the shared command-line flags; a flag with no meaning for this model is an
    /// error of one line saying why.
    fn apply(&mut self, o: &Overrides) -> anyhow::Result<()> {
        o.refuse_metrics_with_topology(self.is_distributed())?;
        if let Some(n) = o.links {
            self.set_links(n)?;
        }
        let run = self.run_section_mut();
        if let Some(d) = o.duration {
            run.duration_s = d;
        }
        if let Some(out) = &o.out {
            run.output_dir = out.clone();
        }
        if let Some(n) = o.run {
            run.number = n;
        }
        if let Some(m) = &o.metrics {
            run.metrics_addr = m.clone();
        }
        Ok(())
    }
    fn validate(&self) -> anyhow::Result<()>;
    /// The whole effective configuration, as a file that `parse` reads back.
    fn to_toml(&self) -> String;
    /// Where the run's files go: a run number with files in any of them is taken.
    fn output_dirs(&self) -> Vec<PathBuf> {
        vec![self.run_section().output_dir.clone()]
    }
    /// 0: the next number free in `output_dirs`.
    fn run_number(&self) -> u32 {
        self.run_section().number
    }
    fn set_run_number(&mut self, n: u32) {
        self.run_section_mut().number = n;
    }
    /// `[topology]`: its applications, or none for one process.
    fn topology(&self) -> &TopologySection;
    /// Runs as the applications of a `[topology]`.
    fn is_distributed(&self) -> bool {
        self.topology().is_distributed()
    }
    /// How often `swdaq run` prints the live figures (they are made more often, for run
    /// control: `live::LIVE_INTERVAL`).
    fn status_interval(&self) -> Duration {
        Duration::from_secs_f64(self.run_section().status_interval_s)
    }
    /// The start line after "swdaq run N (model): ".
    fn describe(&self) -> String;
    /// What run control may ask of a running system of this model.
    fn steering(&self) -> Capabilities;
    /// The newest event run `run` stored, read back from its files (the operator's
    /// console's data panel); `Err` says why there is none.
    fn stored_event(&self, run: u32) -> Result<crate::stored::StoredEvent, String>;
    /// Checks a trigger change and keeps it for the runs after this one (only asked when
    /// `steering().trigger_change` allows it).
    fn change_trigger(&mut self, _change: &TriggerChange) -> Result<(), String> {
        Err(self.steering().trigger_change.unwrap_err())
    }
    /// One run, in one process or as the topology's applications.
    fn run(&self, stop: &StopRequest, hooks: &dyn RunHooks) -> anyhow::Result<Box<dyn Outcome>>;
}

/// A model's applications as it declares them: its kinds and its messages.
pub trait Applications: Sized + 'static {
    /// What each of its applications reports to the launcher.
    type Report: serde::Serialize;
    /// Its messages on the wire (their wire id no other model has).
    type Message: WireMessage;
    /// Its application kinds (the `kind` of its `[[topology.apps]]`), in its table's order.
    const KINDS: &'static [KindSpec<Self, Self::Report>];
}

/// What everything around a model asks of its applications, made from its [`Applications`].
pub trait ApplicationsOf {
    /// `swdaq app --name NAME` for this model's applications: its report's bytes.
    fn app(&self, name: &str, commands: Commands) -> anyhow::Result<Vec<u8>>;
    fn app_kinds(&self) -> Vec<&'static str>;
    fn wire_model(&self) -> u16;
}

impl<C: Configured + Applications + Clone> ApplicationsOf for C {
    fn app(&self, name: &str, commands: Commands) -> anyhow::Result<Vec<u8>> {
        crate::runtime::app::run_app(self.clone(), name, commands, C::KINDS)
    }

    fn app_kinds(&self) -> Vec<&'static str> {
        C::KINDS.iter().map(|k| k.name).collect()
    }

    fn wire_model(&self) -> u16 {
        C::Message::MODEL
    }
}

/// A model told by its names and how its configuration is read (an error names the key;
/// `old` are the spellings of `[run]` keys its older files used).
pub struct ModelOf<C> {
    name: &'static str,
    title: &'static str,
    table: Option<&'static str>,
    parse: fn(&str) -> anyhow::Result<C>,
    old: Option<&'static OldSpellings>,
    dashboard: Option<&'static str>,
    alerts: Option<&'static str>,
}

impl<C> ModelOf<C> {
    pub const fn new(
        name: &'static str,
        title: &'static str,
        table: Option<&'static str>,
        parse: fn(&str) -> anyhow::Result<C>,
        old: Option<&'static OldSpellings>,
    ) -> Self {
        Self {
            name,
            title,
            table,
            parse,
            old,
            dashboard: None,
            alerts: None,
        }
    }

    /// With its dashboard's data (`include_str!("dashboard.json")` in its folder).
    pub const fn with_dashboard(mut self, json: &'static str) -> Self {
        self.dashboard = Some(json);
        self
    }

    /// With its terms of the alerting rules (`include_str!("alerts.json")` in its folder).
    pub const fn with_alerts(mut self, json: &'static str) -> Self {
        self.alerts = Some(json);
        self
    }
}

/// Every configuration type is cloned into a box the same way.
pub trait CloneConfigured {
    fn clone_box(&self) -> Box<dyn Configured>;
}

impl<C: Configured + Clone + 'static> CloneConfigured for C {
    fn clone_box(&self) -> Box<dyn Configured> {
        Box::new(self.clone())
    }
}

impl<C: Configured + Default + 'static> Model for ModelOf<C> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn title(&self) -> &'static str {
        self.title
    }

    fn table(&self) -> Option<&'static str> {
        self.table
    }

    fn parse(&self, text: &str) -> anyhow::Result<Box<dyn Configured>> {
        Ok(Box::new((self.parse)(text)?))
    }

    fn deprecations(&self, text: &str) -> Vec<String> {
        crate::run_section::deprecations(text, self.old)
    }

    fn default_config(&self) -> Box<dyn Configured> {
        Box::new(C::default())
    }

    fn dashboard(&self) -> Option<&'static str> {
        self.dashboard
    }

    fn alerts(&self) -> Option<&'static str> {
        self.alerts
    }
}

impl Clone for Box<dyn Configured> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// How one run ended: its summary as text and JSON, and whether it failed.
pub trait Outcome: Send {
    /// The model's name ("chain", "evb", "swrod").
    fn model(&self) -> &'static str;
    fn run_number(&self) -> u32;
    fn stop_reason(&self) -> &StopReason;
    fn text(&self) -> String;
    /// The model's own figures (a JSON object); `json` puts the envelope around them.
    fn figures(&self) -> serde_json::Value;
    /// The summary every tool reads: the model's figures with "model", "run_number",
    /// "stop_reason" and "stop_reason_text", set here for every model.
    fn json(&self) -> serde_json::Value {
        let mut j = self.figures();
        j["model"] = self.model().into();
        j["run_number"] = self.run_number().into();
        j["stop_reason"] = serde_json::to_value(self.stop_reason())
            .expect("a stop reason is representable in JSON");
        j["stop_reason_text"] = self.stop_reason().to_string().into();
        j
    }
    /// `Some`: `swdaq run` exits non-zero with it.
    fn failure(&self) -> Option<String>;
}

/// What the machinery around a run hears while it goes on.
pub trait RunHooks: Sync {
    /// Data taking has begun; `steer` reaches what can be steered until `stopping`.
    fn started(&self, _steer: Steering) {}
    /// Once per status interval.
    fn live(&self, _live: &Live) {}
    /// Online data-quality monitoring (`[dqm]`) has begun: `view` shows its histograms
    /// while the run lasts and, once it has ended, as they were at its end.
    fn dqm(&self, _view: DqmView) {}
    /// The stop has begun, for `reason`: from now on nothing is steered.
    fn stopping(&self, _reason: &StopReason) {}
}

/// Nobody listens (tests, benchmarks).
impl RunHooks for () {}

/// What run control may ask of a running system of a model: `Err` says why not, in words
/// naming the model.
#[derive(Debug, Clone)]
pub struct Capabilities {
    pub pause_resume: Result<(), String>,
    /// `Ok`: the trigger sources a change may name, with their settings now.
    pub trigger_change: Result<Vec<swdaq_trigger::SourceSetting>, String>,
    /// `Ok`: the seconds a burst records after the request unless told.
    pub record: Result<f64, String>,
}

/// The flags `swdaq run` and `swdaq serve` share; each model gives them its meaning or
/// refuses them in one line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Overrides {
    /// Seconds of data taking (0: until stopped).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Inputs: the chain's links (whatever their source), the SW ROD's e-links per FELIX
    /// card; refused by the event builder, whose FEDs are listed in its configuration.
    #[arg(long)]
    pub links: Option<u32>,
    /// Output directory of the run's files.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run number (0: the next one free in the output directory).
    #[arg(long)]
    pub run: Option<u32>,
    /// `/metrics` address, or "" to turn it off (refused with a [topology]: each
    /// application serves its own).
    #[arg(long)]
    pub metrics: Option<String>,
}

impl Overrides {
    /// `--metrics` with a topology: each application serves its own.
    pub fn refuse_metrics_with_topology(&self, distributed: bool) -> anyhow::Result<()> {
        if distributed && self.metrics.is_some() {
            anyhow::bail!(
                "--metrics: with [topology] applications each serves its own /metrics (metrics_addr of its [[topology.apps]] entry)"
            );
        }
        Ok(())
    }
}

/// A configuration as the TOML file that reads back to it.
pub fn to_toml(config: &impl serde::Serialize) -> String {
    toml::to_string_pretty(config).expect("the configuration is always representable in TOML")
}

/// A `/metrics` address ("" for none) that parses, or an error naming `key`.
pub fn check_metrics_addr(addr: &str, key: &str) -> anyhow::Result<()> {
    if !addr.is_empty() {
        addr.parse::<std::net::SocketAddr>()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {key}: {e}"))?;
    }
    Ok(())
}

/// The start line's duration: "N s (Ctrl-C or SIGTERM ends it early)", or until stopped.
pub fn duration_words(seconds: f64) -> String {
    if seconds > 0.0 {
        format!("{seconds} s (Ctrl-C or SIGTERM ends it early)")
    } else {
        "until stopped (Ctrl-C or SIGTERM)".into()
    }
}

/// `seconds` (0: none) as a duration.
pub fn seconds(seconds: f64) -> Option<Duration> {
    (seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}
