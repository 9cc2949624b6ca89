//! `[run]`: the keys every model's run has (number, duration, output directory, live-line
//! interval, `/metrics` address, run type, run registry), under one name in every model's file. Older event-builder
//! and SW ROD files kept some of them at the top level or inside the model's table; those
//! spellings are still read, moved under `[run]` before the file is parsed, each with one
//! deprecation line (`deprecations`). The values keep their place in the text, so an error
//! about one still names its line.

use crate::transfer_section::TransferSection;
use crate::transition_hooks::HooksSection;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use swdaq_format::provenance::Provenance;
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSection {
    /// 0: the next run number free in the output directories; a number that already has
    /// files there is refused before anything starts.
    pub number: u32,
    /// Seconds of data taking; 0 runs until stopped (or the model's own end: its input, a
    /// maximum count).
    pub duration_s: f64,
    pub output_dir: PathBuf,
    /// Seconds between the live lines `swdaq run` prints (the figures themselves are made
    /// every `live::LIVE_INTERVAL`, for run control and the console).
    pub status_interval_s: f64,
    /// Prometheus `/metrics` address while the run lasts; empty turns it off (with a
    /// topology, each application serves its own).
    pub metrics_addr: String,
    /// What the run is for, as the run registry records it: "physics", "test",
    /// "calibration", ... (letters, digits, `-` and `_`).
    pub run_type: String,
    /// The run registry: empty for an SQLite file in the output directory
    /// (`swdaq-runs.sqlite`), `postgresql://USER@HOST/DB` for a shared server, or the path
    /// of an SQLite file.
    pub registry: String,
    /// `[run.hooks]`: commands run before and after the run's configure, start and stop.
    pub hooks: HooksSection,
    /// `[run.transfer]`: each closed file copied to permanent storage (none: no transfer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferSection>,
}

/// The default model's: files in `swdaq-data`.
impl Default for RunSection {
    fn default() -> Self {
        Self::writing_to("swdaq-data")
    }
}

impl RunSection {
    /// Every model's defaults, its files going to `output_dir`.
    pub fn writing_to(output_dir: impl Into<PathBuf>) -> Self {
        Self {
            number: 0,
            duration_s: 10.0,
            output_dir: output_dir.into(),
            status_interval_s: 1.0,
            metrics_addr: "127.0.0.1:9464".into(),
            run_type: "test".into(),
            registry: String::new(),
            hooks: HooksSection::default(),
            transfer: None,
        }
    }

    /// Checks the keys before anything starts; an error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.duration_s >= 0.0 && self.duration_s.is_finite(),
            "invalid configuration: run.duration_s: must be >= 0 (0: until stopped)"
        );
        anyhow::ensure!(
            (0.05..=3600.0).contains(&self.status_interval_s),
            "invalid configuration: run.status_interval_s: must be in [0.05, 3600]"
        );
        anyhow::ensure!(
            !self.run_type.is_empty()
                && self
                    .run_type
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "invalid configuration: run.run_type: {:?}: give a word of letters, digits, - and _ (physics, test, calibration, ...)",
            self.run_type
        );
        self.registry_location()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        self.hooks.validate()?;
        if let Some(transfer) = &self.transfer {
            transfer.validate()?;
        }
        crate::runtime::model::check_metrics_addr(&self.metrics_addr, "run.metrics_addr")
    }

    /// Where the run registry is (`registry`, or the output directory's SQLite file).
    pub fn registry_location(&self) -> Result<swdaq_registry::Location, String> {
        swdaq_registry::Location::parse(&self.registry, &self.output_dir)
    }

    /// What every file of the run says of it and of the software writing it: the facts the
    /// run registry records (its software, its run number and type) and where the registry
    /// is, a PostgreSQL URL without its password, an SQLite file by its absolute path.
    pub fn provenance(&self) -> Provenance {
        let software = swdaq_registry::software::get();
        let run_registry = match self.registry_location() {
            Ok(swdaq_registry::Location::Sqlite(path)) => std::path::absolute(&path)
                .unwrap_or(path)
                .display()
                .to_string(),
            Ok(location) => location.describe(),
            // Refused by `validate` before any run; its text may hold a password.
            Err(_) => "invalid run.registry".into(),
        };
        Provenance {
            version: software.version,
            git_commit: software.commit,
            build_profile: software.profile,
            build_flags: software.flags,
            run_registry,
            run_number: self.number,
            run_type: self.run_type.clone(),
        }
    }

    /// `None`: until stopped.
    pub fn duration(&self) -> Option<Duration> {
        crate::runtime::model::seconds(self.duration_s)
    }

    /// Reads a `[run]` table over a model's own defaults: a key the file does not give keeps
    /// the model's value (its output directory differs from the others').
    pub fn deserialize_over<'de, D: Deserializer<'de>>(
        d: D,
        defaults: Self,
    ) -> Result<Self, D::Error> {
        let given = Given::deserialize(d)?;
        Ok(Self {
            number: given.number.unwrap_or(defaults.number),
            duration_s: given.duration_s.unwrap_or(defaults.duration_s),
            output_dir: given.output_dir.unwrap_or(defaults.output_dir),
            status_interval_s: given
                .status_interval_s
                .unwrap_or(defaults.status_interval_s),
            metrics_addr: given.metrics_addr.unwrap_or(defaults.metrics_addr),
            run_type: given.run_type.unwrap_or(defaults.run_type),
            registry: given.registry.unwrap_or(defaults.registry),
            hooks: given.hooks.unwrap_or(defaults.hooks),
            transfer: given.transfer.or(defaults.transfer),
        })
    }
}

/// The keys a `[run]` table gives.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Given {
    number: Option<u32>,
    duration_s: Option<f64>,
    output_dir: Option<PathBuf>,
    status_interval_s: Option<f64>,
    metrics_addr: Option<String>,
    run_type: Option<String>,
    registry: Option<String>,
    hooks: Option<HooksSection>,
    transfer: Option<TransferSection>,
}

/// Where older files of a model with its own table kept the `[run]` keys: `duration_s` and
/// `metrics_addr` at the top level (every such model), the others inside `table` as
/// `in_table` says (old name, `[run]` key).
pub struct OldSpellings {
    pub table: &'static str,
    pub in_table: &'static [(&'static str, &'static str)],
}

/// The keys every model with its own table kept at the top level.
const TOP_LEVEL: &[(&str, &str)] = &[
    ("duration_s", "duration_s"),
    ("metrics_addr", "metrics_addr"),
];

impl OldSpellings {
    /// Each old spelling: its table (`None`: the top level), its name there, its `[run]` key.
    fn each(&self) -> impl Iterator<Item = (Option<&'static str>, &'static str, &'static str)> {
        let top = TOP_LEVEL.iter().map(|&(key, run_key)| (None, key, run_key));
        let table = Some(self.table);
        top.chain(
            self.in_table
                .iter()
                .map(move |&(key, run_key)| (table, key, run_key)),
        )
    }
}

/// Parses a model's configuration text, its old spellings (if it had any) read as their
/// `[run]` keys.
pub fn parse<C: serde::de::DeserializeOwned>(
    text: &str,
    old: Option<&OldSpellings>,
) -> anyhow::Result<C> {
    let invalid = |mut e: toml::de::Error| {
        e.set_input(Some(text));
        anyhow::anyhow!("invalid configuration: {e}")
    };
    let mut root = DeTable::parse(text).map_err(invalid)?;
    move_old_spellings(root.get_mut(), old)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    C::deserialize(toml::de::Deserializer::from(root)).map_err(invalid)
}

/// One line per old spelling the text uses, saying what to write instead.
pub fn deprecations(text: &str, old: Option<&OldSpellings>) -> Vec<String> {
    let Ok(mut root) = DeTable::parse(text) else {
        return Vec::new();
    };
    move_old_spellings(root.get_mut(), old).unwrap_or_default()
}

/// Moves each old spelling's value into `[run]` (made if missing); an error when `[run]`
/// gives the same key too. Returns one deprecation line per key moved.
fn move_old_spellings(
    root: &mut DeTable<'_>,
    old: Option<&OldSpellings>,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for (table, old_key, run_key) in old.into_iter().flat_map(OldSpellings::each) {
        let old_name = match table {
            Some(t) => format!("{t}.{old_key}"),
            None => old_key.to_string(),
        };
        let holder = match table {
            None => Some(&mut *root),
            Some(t) => match root.get_mut(t).map(Spanned::get_mut) {
                Some(DeValue::Table(table)) => Some(table),
                _ => None,
            },
        };
        let Some((key, value)) = holder.and_then(|h| h.remove_entry(old_key)) else {
            continue;
        };
        let run_entry = root
            .entry(Spanned::new(key.span(), DeString::Borrowed("run")))
            .or_insert_with(|| Spanned::new(key.span(), DeValue::Table(DeTable::default())));
        let DeValue::Table(run) = run_entry.get_mut() else {
            return Err("run: must be a table ([run])".into());
        };
        if run.contains_key(run_key) {
            return Err(format!(
                "{old_name} and run.{run_key} both given: keep run.{run_key}"
            ));
        }
        run.insert(Spanned::new(key.span(), DeString::Borrowed(run_key)), value);
        lines.push(format!(
            "deprecated: {old_name} is read as run.{run_key}: write it under [run]"
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[serde(default = "default_run", deserialize_with = "sample_run")]
        run: RunSection,
        #[serde(default)]
        model: Model,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Model {
        rate: u32,
    }

    fn default_run() -> RunSection {
        RunSection::writing_to("sample-data")
    }

    fn sample_run<'de, D: Deserializer<'de>>(d: D) -> Result<RunSection, D::Error> {
        RunSection::deserialize_over(d, default_run())
    }

    const OLD: Option<&OldSpellings> = Some(&OldSpellings {
        table: "model",
        in_table: &[("output", "output_dir")],
    });

    #[test]
    fn old_spellings_are_read_as_run_keys_with_a_line_each() {
        let text = "duration_s = 3\n[model]\nrate = 5\noutput = \"x\"\n";
        let c: Sample = parse(text, OLD).unwrap();
        assert_eq!(c.run.duration_s, 3.0);
        assert_eq!(c.run.output_dir, PathBuf::from("x"));
        assert_eq!(c.run.metrics_addr, "127.0.0.1:9464");
        assert_eq!(c.model.rate, 5);
        let lines = deprecations(text, OLD);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("model.output is read as run.output_dir"),
            "{lines:?}"
        );
        assert!(deprecations("[run]\nduration_s = 1\n", OLD).is_empty());
    }

    #[test]
    fn a_run_s_provenance_never_holds_the_registry_s_password() {
        let run = RunSection {
            number: 12,
            run_type: "physics".into(),
            registry: "postgresql://daq:S3CRET@db.example/runs?password=S3CRET".into(),
            ..default_run()
        };
        let p = run.provenance();
        assert_eq!(p.run_registry, "postgresql://daq@db.example:5432/runs");
        assert_eq!((p.run_number, p.run_type.as_str()), (12, "physics"));
        assert!(!format!("{p:?}").contains("S3CRET"), "{p:?}");
        let sqlite = RunSection {
            registry: String::new(),
            ..default_run()
        };
        assert!(
            std::path::Path::new(&sqlite.provenance().run_registry).is_absolute(),
            "an SQLite registry is named by its absolute path"
        );
    }

    #[test]
    fn a_partial_run_table_keeps_the_model_s_defaults() {
        let c: Sample = parse("[run]\nnumber = 7\n", OLD).unwrap();
        assert_eq!(c.run.number, 7);
        assert_eq!(c.run.output_dir, PathBuf::from("sample-data"));
        let c: Sample = parse("", OLD).unwrap();
        assert_eq!(c.run, default_run());
    }

    #[test]
    fn an_old_and_a_new_spelling_of_one_key_are_refused() {
        let e = parse::<Sample>("duration_s = 3\n[run]\nduration_s = 4\n", OLD)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("duration_s and run.duration_s both given"),
            "{e}"
        );
    }

    #[test]
    fn an_error_in_a_moved_value_still_names_its_line() {
        let text = "[model]\nrate = 5\noutput = 12\n";
        let e = parse::<Sample>(text, OLD).unwrap_err().to_string();
        assert!(e.contains("line 3"), "{e}");
        let e = parse::<Sample>("[model]\nrate = \"five\"\n", OLD)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("rate"), "{e}");
        let e = parse::<Sample>("[run]\nnumbr = 1\n", OLD)
            .unwrap_err()
            .to_string();
        assert!(e.contains("numbr"), "{e}");
    }
}
