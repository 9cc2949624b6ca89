//! The `[topology]` section of a run's configuration: which applications run the model, on
//! which hosts, at which addresses. Empty (the default), the model runs in one process.
//!
//! ```toml
//! [[topology.hosts]]
//! name = "daq3"
//! launcher = ["ssh", "daq3"]          # or ["ip", "netns", "exec", "h2"]; [] runs it here
//! [[topology.apps]]
//! name = "readout-0"
//! kind = "readout"                    # one of the model's application kinds
//! host = "daq3"                       # "" (default): this machine, no launcher
//! address = "tcp://192.0.2.3:7100"    # where the application binds its inbox
//! links = [0, 1, 2, 3]                # a key of the kind's own
//! ```
//!
//! The runtime knows no kind: each model declares its kinds, their own keys and how many of
//! each a run needs (`KindRule`, from the model's `KindSpec` table in its `apps/mod.rs`, which
//! documents them), and checks what only it knows (every link or card read out once).

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

/// A key of an application kind's own, beyond those every `[[topology.apps]]` entry has.
pub struct Field {
    pub key: &'static str,
    /// What the refusal says when an application of another kind has it ("only readout
    /// applications have links").
    pub elsewhere: &'static str,
}

/// An application kind as its model declares it to the topology's checks: its name (the
/// TOML `kind`), its own keys, and how many of it the run needs.
pub struct KindRule<'a> {
    pub name: &'a str,
    pub fields: &'a [Field],
    pub at_least: usize,
    pub at_most: usize,
}

/// The keys every application has, whatever its kind.
const COMMON_KEYS: [&str; 5] = ["name", "kind", "host", "address", "metrics_addr"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct App {
    /// Names its log, its files and its series; letters, digits, `-` and `_`.
    pub name: String,
    /// One of the model's application kinds (`KindRule::name`).
    pub kind: String,
    #[serde(default)]
    pub host: String,
    /// ZeroMQ endpoint where the application binds its inbox, e.g. `tcp://127.0.0.1:7100`.
    pub address: String,
    /// The application's own `/metrics` address, or "".
    #[serde(default)]
    pub metrics_addr: String,
    /// Its kind's own keys (`links`, `cards`, ...): checked against the kind's `Field`s by
    /// `TopologySection::validate`, since serde refuses unknown keys only without `flatten`.
    #[serde(flatten)]
    pub fields: toml::Table,
}

impl App {
    /// An application with no keys of its kind's own.
    pub fn new(name: impl Into<String>, kind: &str, address: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            host: String::new(),
            address: address.into(),
            metrics_addr: String::new(),
            fields: toml::Table::new(),
        }
    }

    /// Sets its kind's key `key` (tests build topologies with it).
    #[cfg(test)]
    pub fn with(mut self, key: &str, value: impl Serialize) -> Self {
        let value = toml::Value::try_from(value).expect("a key's value is TOML");
        self.fields.insert(key.into(), value);
        self
    }

    /// Its kind's key `key` as a `T`, `default` when it is not set; a value of another type
    /// is an error naming the key.
    pub fn field_or<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        default: T,
    ) -> anyhow::Result<T> {
        match self.fields.get(key) {
            None => Ok(default),
            Some(value) => value.clone().try_into().map_err(|e| {
                anyhow::anyhow!(
                    "invalid configuration: topology.apps.{key}: {}: {e}",
                    self.name
                )
            }),
        }
    }

    /// Its kind's key `key`, or `T::default()` when it is not set.
    pub fn field<T: serde::de::DeserializeOwned + Default>(&self, key: &str) -> anyhow::Result<T> {
        self.field_or(key, T::default())
    }
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

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (u32, &'a App)> {
        self.apps
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.kind == kind)
            .map(|(i, a)| (i as u32, a))
    }

    /// The one application of a kind there is one of (checked by `validate`).
    pub fn single(&self, kind: &str) -> (u32, &App) {
        let index = self.apps.iter().position(|a| a.kind == kind);
        let index = index.expect("validated topology");
        (index as u32, &self.apps[index])
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

    /// Checks the applications against the model's kinds: names, hosts and addresses, each
    /// application's kind and keys, and how many of each kind there are (no other kind at
    /// all). Nothing to check in one process.
    pub fn validate(&self, kinds: &[KindRule]) -> anyhow::Result<()> {
        if !self.is_distributed() {
            return Ok(());
        }
        self.validate_settings()?;
        self.validate_apps()?;
        self.validate_kinds(kinds)
    }

    fn validate_settings(&self) -> anyhow::Result<()> {
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
        Ok(())
    }

    /// What every topology must satisfy: names, hosts, addresses.
    fn validate_apps(&self) -> anyhow::Result<()> {
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
        }
        Ok(())
    }

    /// Each application of one of `kinds` with only its kind's keys; each kind
    /// `at_least..=at_most` times.
    fn validate_kinds(&self, kinds: &[KindRule]) -> anyhow::Result<()> {
        let names = || kinds.iter().map(|k| k.name).collect::<Vec<_>>().join(", ");
        for a in &self.apps {
            let Some(kind) = kinds.iter().find(|k| k.name == a.kind) else {
                bail!(
                    "invalid configuration: topology.apps.kind: {}: {} applications do not belong in this run (kinds here: {})",
                    a.name,
                    a.kind,
                    names()
                );
            };
            for key in a.fields.keys() {
                if kind.fields.iter().any(|f| f.key == key) {
                    continue;
                }
                let elsewhere = kinds.iter().flat_map(|k| k.fields).find(|f| f.key == key);
                match elsewhere {
                    Some(f) => bail!(
                        "invalid configuration: topology.apps.{key}: {}: {}",
                        a.name,
                        f.elsewhere
                    ),
                    None => bail!(
                        "invalid configuration: topology.apps.{key}: {}: no such key for {} applications (theirs: {})",
                        a.name,
                        a.kind,
                        COMMON_KEYS
                            .iter()
                            .copied()
                            .chain(kind.fields.iter().map(|f| f.key))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            }
        }
        for kind in kinds {
            let n = self.of_kind(kind.name).count();
            ensure(
                (kind.at_least..=kind.at_most).contains(&n),
                "apps",
                format!(
                    "{n} {} applications; there must be {}",
                    kind.name,
                    match (kind.at_least, kind.at_most) {
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
