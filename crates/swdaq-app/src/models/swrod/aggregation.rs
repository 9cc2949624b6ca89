//! `[swrod.aggregator]`: a detector's plugin building each ROB fragment's payload from its L1
//! ID's chunks (#35), or swdaq's chunk records when no plugin is named.
//!
//! The plugin is loaded and one instance made when the configuration is checked, so a file
//! that is missing, not a plugin, of another ABI version, without `aggregate` or refusing its
//! configuration stops the run before it starts, in one line. The run loads it again in the
//! process that runs the ROBs (one process, or each `swrod` application) and makes one
//! instance per SW ROD thread: instances are never shared between threads.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use swdaq_plugin::{Plugin, PluginAggregator};
use swdaq_swrod::PayloadPlugin;

/// The largest payload a plugin may ask room for unless `max_payload_bytes` says: 1 MiB, far
/// above the default ROB fragment (192 e-links' 128-byte chunks as records: 26 KiB) yet a
/// bound on what one broken plugin call can make the host allocate.
const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AggregatorSection {
    /// The plugin's shared library; "" (the default): swdaq's own chunk records. A relative
    /// path is taken from the working directory, never searched on the library path.
    pub plugin: PathBuf,
    /// The plugin's own table, handed to its `create` as TOML text.
    pub config: toml::Table,
    /// The largest payload the plugin may ask room for; a larger request is a plugin error.
    pub max_payload_bytes: usize,
}

impl Default for AggregatorSection {
    fn default() -> Self {
        Self {
            plugin: PathBuf::new(),
            config: toml::Table::new(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

impl AggregatorSection {
    /// Whether a plugin builds the payloads (otherwise the chunk records do).
    pub fn has_plugin(&self) -> bool {
        !self.plugin.as_os_str().is_empty()
    }

    /// Loads the plugin and makes one instance of it, as the run will: every refusal is the
    /// loader's one line naming the file.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.max_payload_bytes >= 4,
            "swrod.aggregator.max_payload_bytes = {}: must hold at least one word",
            self.max_payload_bytes
        );
        if let Some(plugin) = self.load()? {
            self.instance(&plugin)?;
        }
        Ok(())
    }

    /// The plugin's library, loaded once per process (`None` without a plugin).
    pub fn load(&self) -> anyhow::Result<Option<Plugin>> {
        if !self.has_plugin() {
            return Ok(None);
        }
        let plugin = Plugin::load(&self.plugin)
            .map_err(|e| anyhow::anyhow!("swrod.aggregator.plugin: {e}"))?;
        Ok(Some(plugin))
    }

    /// A new instance of `plugin` for one ROB's thread.
    pub fn instance(&self, plugin: &Plugin) -> anyhow::Result<PayloadPlugin> {
        let config = toml::to_string(&self.config)?;
        let instance = PluginAggregator::new(plugin, &config)
            .map_err(|e| anyhow::anyhow!("swrod.aggregator.plugin: {e}"))?
            .with_max_payload(self.max_payload_bytes);
        Ok(PayloadPlugin::new(Box::new(instance)))
    }

    /// The largest ROB fragment a plugin's payload makes, for the applications' inboxes
    /// (`None` without a plugin).
    pub fn largest_fragment_bytes(&self, status_words: usize) -> Option<u64> {
        self.has_plugin().then(|| {
            swdaq_format::eformat::rob_size(
                status_words,
                self.max_payload_bytes.next_multiple_of(4),
            ) as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::swrod::config::SwrodRunConfig;

    #[test]
    fn no_plugin_is_the_default_and_a_missing_file_is_one_line_naming_it() {
        assert!(AggregatorSection::default().validate().is_ok());
        assert!(AggregatorSection::default().load().unwrap().is_none());
        let missing = AggregatorSection {
            plugin: "/nonexistent/libagg.so".into(),
            ..Default::default()
        };
        let e = missing.validate().unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.contains("/nonexistent/libagg.so") && e.contains("no such file"),
            "{e}"
        );
    }

    #[test]
    fn the_section_round_trips_through_toml() {
        let text = "plugin = \"/opt/lib/libagg.so\"\nmax_payload_bytes = 4096\n[config]\nboard = 7\nname = \"x\"\n";
        let section: AggregatorSection = toml::from_str(text).unwrap();
        assert_eq!(section.config["board"].as_integer(), Some(7));
        let again: AggregatorSection = toml::from_str(&toml::to_string(&section).unwrap()).unwrap();
        assert_eq!(again, section);
        // Applications read the launcher's TOML of the whole run.
        let mut run = SwrodRunConfig::default();
        run.swrod.aggregator = section;
        let again: SwrodRunConfig = toml::from_str(&run.to_toml()).unwrap();
        assert_eq!(again, run);
    }
}
