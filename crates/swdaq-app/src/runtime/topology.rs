//! The `[topology]` section of `swdaq run`'s configuration: which applications run the chain,
//! on which hosts, at which addresses. Empty (the default), the chain runs in one process.
//!
//! ```toml
//! [[topology.hosts]]
//! name = "daq3"
//! launcher = ["ssh", "daq3"]          # or ["ip", "netns", "exec", "h2"]; [] runs it here
//! [[topology.apps]]
//! name = "readout-0"
//! kind = "readout"                    # readout, trigger, dfo, builder
//! host = "daq3"                       # "" (default): this machine, no launcher
//! address = "tcp://192.0.2.3:7100"    # where the application binds its inbox
//! links = [0, 1, 2, 3]
//! ```
//!
//! The event builder (a configuration with `[evb]`) uses the kinds `evm` (readout unit 0,
//! which sees the trigger), `ru` (readout units 1.., in topology order) and `bu` (builder
//! units 0.., in topology order). The SW ROD (`[swrod]`) uses `swrod` (FELIX cards listed in
//! its `cards`, a SW ROD thread per ROB, the ROBs' request servers), `hltsv` (the HLT
//! supervisor: the L1 accepts, given to HLT applications by credit) and `hlt` (HLT
//! applications 0.., in topology order: each asks every ROB for its events, builds and
//! stores them).

use anyhow::bail;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologySection {
    /// Heartbeat period on every connection between applications.
    pub heartbeat_ms: u64,
    /// A peer not heard from for this long is declared gone (and what it owed is counted).
    pub peer_timeout_ms: u64,
    /// How long a send waits for a peer that does not take the message.
    pub send_timeout_ms: u64,
    /// How long `swdaq run` waits for every application to be ready.
    pub start_timeout_s: f64,
    /// How long `swdaq run` waits for each stage to finish at the stop before it kills it.
    pub stop_timeout_s: f64,
    /// The largest message (any one frame: a fragment's bytes) an application's inbox takes;
    /// a peer sending more is dropped by ZeroMQ before the message is buffered.
    pub max_message_mb: u64,
    pub hosts: Vec<Host>,
    pub apps: Vec<App>,
}

impl Default for TopologySection {
    fn default() -> Self {
        Self {
            heartbeat_ms: 200,
            peer_timeout_ms: 2000,
            send_timeout_ms: 1000,
            start_timeout_s: 60.0,
            stop_timeout_s: 60.0,
            max_message_mb: 256,
            hosts: Vec::new(),
            apps: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    /// Command prefix that runs a program on the host.
    #[serde(default)]
    pub launcher: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppKind {
    /// Links, hit finding, request serving, the TP stream.
    Readout,
    /// The self-trigger.
    Trigger,
    /// The dataflow orchestrator: hands decisions to builders by credit.
    Dfo,
    /// Requests, builds and writes records.
    Builder,
    /// Event builder: the event manager, readout unit 0 (it sees the trigger).
    Evm,
    /// Event builder: a readout unit other than the event manager.
    Ru,
    /// Event builder: a builder unit.
    Bu,
    /// SW ROD: FELIX cards, a SW ROD thread per ROB, the ROBs' request servers.
    Swrod,
    /// SW ROD: the HLT supervisor, giving each L1 accept to an HLT application by credit.
    Hltsv,
    /// SW ROD: an HLT application (an HLT node's data collection and its storage).
    Hlt,
}

impl AppKind {
    pub fn name(self) -> &'static str {
        match self {
            AppKind::Readout => "readout",
            AppKind::Trigger => "trigger",
            AppKind::Dfo => "dfo",
            AppKind::Builder => "builder",
            AppKind::Evm => "evm",
            AppKind::Ru => "ru",
            AppKind::Bu => "bu",
            AppKind::Swrod => "swrod",
            AppKind::Hltsv => "hltsv",
            AppKind::Hlt => "hlt",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct App {
    /// Names its log, its files and its series; letters, digits, `-` and `_`.
    pub name: String,
    pub kind: AppKind,
    #[serde(default)]
    pub host: String,
    /// ZeroMQ endpoint where the application binds its inbox, e.g. `tcp://127.0.0.1:7100`.
    pub address: String,
    /// A readout application's links.
    #[serde(default)]
    pub links: Vec<u32>,
    /// A SW ROD application's FELIX cards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<u16>,
    /// A builder's record stream for online monitoring (a ZeroMQ PUB endpoint), or "".
    #[serde(default)]
    pub record_stream: String,
    /// Publish every Nth record on the stream.
    #[serde(default = "every_record")]
    pub record_stream_every: u64,
    /// The application's own `/metrics` address, or "".
    #[serde(default)]
    pub metrics_addr: String,
}

fn every_record() -> u64 {
    1
}

fn ensure(ok: bool, key: &str, reason: impl std::fmt::Display) -> anyhow::Result<()> {
    if !ok {
        bail!("invalid configuration: topology.{key}: {reason}");
    }
    Ok(())
}

impl TopologySection {
    /// Applications in more than one process.
    pub fn is_distributed(&self) -> bool {
        !self.apps.is_empty()
    }

    pub fn of_kind(&self, kind: AppKind) -> impl Iterator<Item = (u32, &App)> {
        self.apps
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.kind == kind)
            .map(|(i, a)| (i as u32, a))
    }

    /// The one application of a kind there is one of (checked by `validate`).
    pub fn single(&self, kind: AppKind) -> (u32, &App) {
        self.of_kind(kind).next().expect("validated topology")
    }

    pub fn find(&self, name: &str) -> Option<(u32, &App)> {
        self.apps
            .iter()
            .enumerate()
            .find(|(_, a)| a.name == name)
            .map(|(i, a)| (i as u32, a))
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// Refuses applications whose inboxes would drop the largest message the model's
    /// configuration makes (`bytes`, `what` says which): refused at configure, not dropped
    /// mid-run.
    pub fn check_largest_message(&self, bytes: u64, what: &str) -> anyhow::Result<()> {
        let max = self.max_message_mb.saturating_mul(1 << 20);
        ensure(
            !self.is_distributed() || bytes <= max,
            "max_message_mb",
            format!(
                "{what} is {} MB: the applications' inboxes must take it",
                bytes.div_ceil(1 << 20)
            ),
        )
    }

    /// Checks the topology against the run's `links`; nothing to check when empty.
    pub fn validate(&self, links: u32) -> anyhow::Result<()> {
        if !self.is_distributed() {
            return Ok(());
        }
        self.validate_apps(links)?;
        self.validate_counts(&[
            (AppKind::Readout, 1, usize::MAX),
            (AppKind::Trigger, 1, 1),
            (AppKind::Dfo, 1, 1),
            (AppKind::Builder, 1, usize::MAX),
        ])
    }

    /// Checks an event builder's topology: one `evm`, `readout_units - 1` `ru` and
    /// `builder_units` `bu` applications, nothing else.
    pub fn validate_evb(&self, readout_units: usize, builder_units: usize) -> anyhow::Result<()> {
        if !self.is_distributed() {
            return Ok(());
        }
        self.validate_apps(0)?;
        let ru = readout_units.saturating_sub(1);
        self.validate_counts(&[
            (AppKind::Evm, 1, 1),
            (AppKind::Ru, ru, ru),
            (AppKind::Bu, builder_units, builder_units),
        ])
    }

    /// Checks a SW ROD's topology: `swrod` applications reading every one of `cards` FELIX
    /// cards once, one `hltsv`, at least one `hlt`, nothing else.
    pub fn validate_swrod(&self, cards: u16) -> anyhow::Result<()> {
        if !self.is_distributed() {
            return Ok(());
        }
        self.validate_apps(0)?;
        self.validate_counts(&[
            (AppKind::Swrod, 1, usize::MAX),
            (AppKind::Hltsv, 1, 1),
            (AppKind::Hlt, 1, usize::MAX),
        ])?;
        let mut covered = BTreeSet::new();
        for a in self.of_kind(AppKind::Swrod).map(|(_, a)| a) {
            for &card in &a.cards {
                ensure(
                    card < cards,
                    "apps.cards",
                    format!("{}: card {card} does not exist ({cards} cards)", a.name),
                )?;
                ensure(
                    covered.insert(card),
                    "apps.cards",
                    format!("card {card} is read out twice"),
                )?;
            }
        }
        let unread: Vec<u16> = (0..cards).filter(|c| !covered.contains(c)).collect();
        ensure(
            unread.is_empty(),
            "apps.cards",
            format!("cards {unread:?} are read out by no swrod application"),
        )
    }

    /// What every topology must satisfy: names, hosts, addresses, links.
    fn validate_apps(&self, links: u32) -> anyhow::Result<()> {
        ensure(self.heartbeat_ms >= 10, "heartbeat_ms", "must be >= 10")?;
        ensure(self.max_message_mb >= 1, "max_message_mb", "must be >= 1")?;
        ensure(
            self.peer_timeout_ms >= 3 * self.heartbeat_ms,
            "peer_timeout_ms",
            "must be at least 3 heartbeats",
        )?;
        ensure(self.send_timeout_ms >= 1, "send_timeout_ms", "must be >= 1")?;
        for (key, v) in [
            ("start_timeout_s", self.start_timeout_s),
            ("stop_timeout_s", self.stop_timeout_s),
        ] {
            ensure(v.is_finite() && v >= 1.0, key, "must be >= 1")?;
        }
        let mut names = BTreeSet::new();
        for h in &self.hosts {
            ensure(
                names.insert(h.name.as_str()),
                "hosts.name",
                format!("{:?} appears twice", h.name),
            )?;
        }
        let mut names = BTreeSet::new();
        let mut addresses = BTreeSet::new();
        let mut covered = BTreeSet::new();
        for a in &self.apps {
            ensure(
                !a.name.is_empty()
                    && a.name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "apps.name",
                format!("{:?}: use letters, digits, '-' and '_'", a.name),
            )?;
            ensure(
                names.insert(a.name.as_str()),
                "apps.name",
                format!("{:?} appears twice", a.name),
            )?;
            ensure(
                a.host.is_empty() || self.host(&a.host).is_some(),
                "apps.host",
                format!("{}: no host {:?} in topology.hosts", a.name, a.host),
            )?;
            ensure(
                a.address.starts_with("tcp://") && a.address.rsplit_once(':').is_some(),
                "apps.address",
                format!("{}: {:?} is not tcp://HOST:PORT", a.name, a.address),
            )?;
            ensure(
                addresses.insert(a.address.as_str()),
                "apps.address",
                format!("{} is used twice", a.address),
            )?;
            ensure(
                a.kind == AppKind::Readout || a.links.is_empty(),
                "apps.links",
                format!("{}: only readout applications have links", a.name),
            )?;
            ensure(
                a.kind == AppKind::Swrod || a.cards.is_empty(),
                "apps.cards",
                format!("{}: only swrod applications have FELIX cards", a.name),
            )?;
            ensure(
                a.kind == AppKind::Builder || a.record_stream.is_empty(),
                "apps.record_stream",
                format!("{}: only builders publish records", a.name),
            )?;
            ensure(
                a.record_stream_every >= 1,
                "apps.record_stream_every",
                "must be >= 1",
            )?;
            for &l in &a.links {
                ensure(
                    l < links,
                    "apps.links",
                    format!("{}: link {l} does not exist ({links} links)", a.name),
                )?;
                ensure(
                    covered.insert(l),
                    "apps.links",
                    format!("link {l} is read out twice"),
                )?;
            }
        }
        ensure(
            covered.len() == links as usize,
            "apps.links",
            format!(
                "links {:?} are read out by no application",
                (0..links)
                    .filter(|l| !covered.contains(l))
                    .collect::<Vec<_>>()
            ),
        )?;
        Ok(())
    }

    /// Each listed kind `(kind, at least, at most)` that many times; no other kind at all.
    fn validate_counts(&self, counts: &[(AppKind, usize, usize)]) -> anyhow::Result<()> {
        for a in &self.apps {
            ensure(
                counts.iter().any(|(k, _, _)| *k == a.kind),
                "apps.kind",
                format!(
                    "{}: {} applications do not belong in this run (kinds here: {})",
                    a.name,
                    a.kind.name(),
                    counts
                        .iter()
                        .map(|(k, _, _)| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )?;
        }
        for &(kind, at_least, at_most) in counts {
            let n = self.of_kind(kind).count();
            ensure(
                (at_least..=at_most).contains(&n),
                "apps",
                format!(
                    "{n} {} applications; there must be {}",
                    kind.name(),
                    match (at_least, at_most) {
                        (1, 1) => "exactly one".to_string(),
                        (1, usize::MAX) => "at least one".to_string(),
                        (a, b) if a == b => format!("exactly {a}"),
                        (a, b) => format!("{a} to {b}"),
                    }
                ),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
