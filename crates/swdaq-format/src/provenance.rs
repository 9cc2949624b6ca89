//! Which run and which software wrote a file (#38): the facts every model's writer puts in
//! its files, each in its format's own metadata (HDF5 attributes, EventStorage metadata
//! strings, a `.jsn`'s extra key). Made once per run from what the run registry records of
//! it (swdaq-app's `RunSection::provenance`) and handed to each writer in its settings.

use serde::{Deserialize, Serialize};

/// What a file says of the run and the software that wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// swdaq's version, as `swdaq runs show` records it (`software.version`).
    pub version: String,
    /// The git commit swdaq was built from (`-dirty` for a modified tree).
    pub git_commit: String,
    /// Cargo's profile (`release`, `debug`).
    pub build_profile: String,
    /// The optimisation level and rustc's flags.
    pub build_flags: String,
    /// Where the run is on record: an SQLite file's path, or a PostgreSQL URL with no
    /// password in it.
    pub run_registry: String,
    pub run_number: u32,
    /// `[run] run_type`: `physics`, `test`, ...
    pub run_type: String,
}

/// How a format with one flat namespace (HDF5 attributes, EventStorage metadata strings)
/// names a fact: this prefix, then the fact's name ([`Provenance::texts`]).
pub const KEY_PREFIX: &str = "swdaq_";

impl Provenance {
    /// Every fact but the run number (which each format already carries in its own place),
    /// by name.
    pub fn texts(&self) -> [(&'static str, &str); 6] {
        [
            ("version", self.version.as_str()),
            ("git_commit", self.git_commit.as_str()),
            ("build_profile", self.build_profile.as_str()),
            ("build_flags", self.build_flags.as_str()),
            ("run_registry", self.run_registry.as_str()),
            ("run_type", self.run_type.as_str()),
        ]
    }

    /// The names of [`Self::texts`], for a reader looking for them.
    pub fn text_names() -> [&'static str; 6] {
        Self::default().texts().map(|(name, _)| name)
    }

    /// [`Self::texts`] under their prefixed keys (`swdaq_version`, ...).
    pub fn prefixed_texts(&self) -> impl Iterator<Item = (String, &str)> {
        self.texts()
            .into_iter()
            .map(|(name, value)| (format!("{KEY_PREFIX}{name}"), value))
    }
}

/// How `swdaq inspect` shows the provenance a file holds, whatever its format: a line per
/// fact (`provenance version: 0.4.0`), nothing for a file without.
pub fn render<'a>(facts: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    facts
        .into_iter()
        .map(|(name, value)| format!("provenance {name}: {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_fact_has_one_prefixed_key() {
        let p = Provenance {
            version: "1.2.3".into(),
            run_type: "physics".into(),
            ..Provenance::default()
        };
        let keys: Vec<String> = p.prefixed_texts().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "swdaq_version",
                "swdaq_git_commit",
                "swdaq_build_profile",
                "swdaq_build_flags",
                "swdaq_run_registry",
                "swdaq_run_type"
            ]
        );
        let values: Vec<&str> = p.prefixed_texts().map(|(_, v)| v).collect();
        assert_eq!(values[0], "1.2.3");
        assert_eq!(values[5], "physics");
    }
}
