//! The configuration tables that choose a plugin or a packet format, as every model reads
//! them (`[evb.input.decoder]`, `[source.board.decoder]`, `[source.board.processor]`): one
//! way to name a plugin, its own table and its limits, and one place that loads it.

use crate::{Decoder, FragmentProcessor, PacketFormat, Plugin, PluginDecoder};
use crate::{PluginFragmentProcessor, process::ProcessError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The most bytes of an unfinished message kept waiting for the rest, unless
/// `max_message_bytes` says: well above a test-beam board's packet, a bound on what a decoder
/// that never finishes a message can make a link hold.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// A decoder's table: the plugin (`plugin`, its own `config` table) or the packet format
/// (`format`, a [`crate::PacketFormatConfig`] table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecoderSection {
    /// The plugin's shared library; a relative path is taken from the working directory,
    /// never searched on the library path.
    pub plugin: Option<PathBuf>,
    /// The plugin's own table, handed to its `create` as TOML text.
    pub config: toml::Table,
    /// A no-code packet format instead of a plugin.
    pub format: Option<toml::Table>,
    /// The most bytes of one unfinished message kept waiting for the rest.
    pub max_message_bytes: usize,
}

impl Default for DecoderSection {
    fn default() -> Self {
        Self {
            plugin: None,
            config: toml::Table::new(),
            format: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// A plugin or format that cannot be made: why, in one line (the caller names the key).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SectionError(pub String);

fn failed(e: &dyn std::fmt::Display) -> SectionError {
    SectionError(e.to_string())
}

impl DecoderSection {
    /// One decoder instance, as each link gets: the plugin loaded (a missing file, a library
    /// that is not a plugin, an ABI mismatch or a refused configuration is an error naming the
    /// file) or the format checked.
    pub fn make(&self) -> Result<Box<dyn Decoder + Send>, SectionError> {
        if self.max_message_bytes == 0 {
            return Err(SectionError("max_message_bytes must be at least 1".into()));
        }
        match (&self.plugin, &self.format) {
            (Some(path), None) => {
                let plugin = Plugin::load(path).map_err(|e| failed(&e))?;
                let decoder = PluginDecoder::new(&plugin, &table_text(&self.config)?)
                    .map_err(|e| failed(&e))?;
                Ok(Box::new(decoder))
            }
            (None, Some(format)) => {
                let format =
                    PacketFormat::from_toml(&table_text(format)?).map_err(|e| failed(&e))?;
                Ok(Box::new(format))
            }
            (Some(_), Some(_)) => Err(SectionError("give `plugin` or `format`, not both".into())),
            (None, None) => Err(SectionError("needs `plugin` or `format`".into())),
        }
    }
}

/// A per-fragment processor's table: the plugin and its own `config` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessorSection {
    /// The plugin's shared library (taken as `DecoderSection::plugin` is).
    pub plugin: PathBuf,
    pub config: toml::Table,
}

impl ProcessorSection {
    /// One processor instance, as each link gets; refused as a decoder's plugin is.
    pub fn make(&self) -> Result<Box<dyn FragmentProcessor + Send>, SectionError> {
        if self.plugin.as_os_str().is_empty() {
            return Err(SectionError("needs `plugin`".into()));
        }
        let plugin = Plugin::load(&self.plugin).map_err(|e| failed(&e))?;
        let processor = PluginFragmentProcessor::new(&plugin, &table_text(&self.config)?)
            .map_err(|e| failed(&e))?;
        Ok(Box::new(processor))
    }
}

/// A processor chosen at run time is one too.
impl<P: FragmentProcessor + ?Sized> FragmentProcessor for Box<P> {
    fn process(
        &mut self,
        fragments: &[crate::FragmentRef<'_>],
        out: &mut Vec<crate::TriggerPrimitive>,
    ) -> Result<(), ProcessError> {
        (**self).process(fragments, out)
    }
}

fn table_text(table: &toml::Table) -> Result<String, SectionError> {
    toml::to_string(table).map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_without_a_decoder_or_with_two_is_refused() {
        let none = DecoderSection::default().make().err().unwrap().to_string();
        assert!(none.contains("needs `plugin` or `format`"), "{none}");
        let both = DecoderSection {
            plugin: Some("x.so".into()),
            format: Some(toml::Table::new()),
            ..Default::default()
        };
        let error = both.make().err().unwrap().to_string();
        assert!(error.contains("not both"), "{error}");
        let missing = DecoderSection {
            plugin: Some("/nonexistent/libboard.so".into()),
            ..Default::default()
        };
        let error = missing.make().err().unwrap().to_string();
        assert!(error.contains("/nonexistent/libboard.so"), "{error}");
    }

    #[test]
    fn a_processor_without_its_plugin_is_refused_naming_it() {
        let none = ProcessorSection::default()
            .make()
            .err()
            .unwrap()
            .to_string();
        assert!(none.contains("needs `plugin`"), "{none}");
        let missing = ProcessorSection {
            plugin: "/nonexistent/libhits.so".into(),
            ..Default::default()
        };
        let error = missing.make().err().unwrap().to_string();
        assert!(error.contains("/nonexistent/libhits.so"), "{error}");
    }
}
