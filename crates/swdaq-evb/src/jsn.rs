//! The JSON bookkeeping the CMS file-based filter farm reads beside the raw files, laid out
//! as CMSSW's emulation of the builder-unit disk writer does it (`cms-sw/cmssw`,
//! `EventFilter/Utilities/plugins/RawEventFileWriterForBU.cc`, the version whose raw files
//! may carry an FRD file header v2; names from `EventFilter/Utilities/interface/FFFNamingSchema.h`
//! @ 2d1b9ef75cc41b0663514fe0da6f3fa9a5c95f2f; what the filter unit reads from
//! `EventFilter/Utilities/src/EvFDaqDirector.cc`; the `.jsn` shape from
//! `EventFilter/Utilities/src/DataPoint.cc` and `FastMonitor.cc`):
//!
//! ```text
//! <builder unit's directory>/run{run:06}/
//!     jsd/rawData.jsd  jsd/EoLS.jsd  jsd/EoR.jsd     the definitions (legends) the .jsn name
//!     run{run:06}_ls{ls:04}_index{index:06}.raw      FRD events under a RAW_0002 file header
//!     run{run:06}_ls{ls:04}_index{index:06}.jsn      NEvents, NBytes
//!     run{run:06}_ls{ls:04}_EoLS.jsn                 NEvents, NFiles, TotalEvents, NLostEvents, NBytes
//!     run{run:06}_ls0000_EoR.jsn                     NEvents, NFiles, NLumis, LastLumi, TotalEvents, NLostEvents
//! ```
//!
//! A `.jsn` is `{"data": [...], "definition": ..., "source": ...}`: the values as decimal
//! strings in the order of the legend of the `.jsd` its `definition` names (an absolute
//! path, as CMSSW writes it). One deviation: CMSSW's `rawData.jsd` lists `NEvents` only;
//! ours adds `NBytes`, which the farm stand-in checks against the file, and says so in the
//! legend the `.jsn` names (a filter unit reading raw files with a file header needs no
//! per-file `.jsn`). Files still being written are `NAME.raw.tmp` in the run directory,
//! not CMS's `open/`.
//!
//! Every `.jsn` also names the run and the software that wrote it, in a key of its own
//! beside CMS's: `"swdaq_provenance": {"version", "git_commit", "build_profile",
//! "build_flags", "run_registry", "run_number", "run_type"}`, never in `data`, whose values
//! CMSSW takes by their place in the legend. CMSSW reads a `.jsn` with jsoncpp and
//! `DataPoint::deserialize` (`EventFilter/Utilities/src/DataPoint.cc` @
//! 3a455b52d9b07a5c0ccd847eff98dd702655e83a), which asks the document for `source`,
//! `definition` and `data` by name and nothing else (`EvFDaqDirector::getNFilesFromEoLS`
//! and the input source's `grabNextJsonFile` read the EoLS and per-file `.jsn` through it),
//! so another key is left alone. The `.raw` files themselves (`RAW_0002` header) have no
//! place for text.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use swdaq_format::provenance::Provenance;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct JsnDocument {
    data: Vec<String>,
    definition: String,
    source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    swdaq_provenance: Option<Provenance>,
}

/// Who writes a `.jsn`: its `source` (the builder unit, e.g. `bu0`) and, from a run, the
/// run and the software.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub source: &'a str,
    pub provenance: Option<&'a Provenance>,
}

impl<'a> Writer<'a> {
    /// A writer that names no run or software (tests, tools).
    pub fn named(source: &'a str) -> Self {
        Self {
            source,
            provenance: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JsnError {
    #[error("not a .jsn document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{definition}: expected {expected} values, found {found}")]
    WrongLength {
        definition: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("value {0:?} is not a decimal count")]
    NotACount(String),
}

/// What one raw file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileJsn {
    pub events: u64,
    pub bytes: u64,
}

/// What one builder unit wrote for one lumi section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EolsJsn {
    pub events: u64,
    pub files: u64,
    /// Events of the lumi section this builder unit was given: written plus lost.
    pub total_events: u64,
    pub lost_events: u64,
    pub bytes: u64,
}

/// What a run wrote in all: its end-of-run file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EorJsn {
    pub events: u64,
    pub files: u64,
    /// End-of-lumi-section files written.
    pub lumis: u64,
    pub last_lumi: u64,
    /// Events of the whole run over all builder units (the event manager's count).
    pub total_events: u64,
    pub lost_events: u64,
}

/// A `.jsd`: its file name under `jsd/` and its legend, in the order of a `.jsn`'s data.
pub struct Definition {
    pub file: &'static str,
    pub legend: &'static [&'static str],
}

pub const FILE_DEFINITION: Definition = Definition {
    file: "rawData.jsd",
    legend: &["NEvents", "NBytes"],
};
pub const EOLS_DEFINITION: Definition = Definition {
    file: "EoLS.jsd",
    legend: &["NEvents", "NFiles", "TotalEvents", "NLostEvents", "NBytes"],
};
pub const EOR_DEFINITION: Definition = Definition {
    file: "EoR.jsd",
    legend: &[
        "NEvents",
        "NFiles",
        "NLumis",
        "LastLumi",
        "TotalEvents",
        "NLostEvents",
    ],
};
pub const DEFINITIONS: [Definition; 3] = [FILE_DEFINITION, EOLS_DEFINITION, EOR_DEFINITION];

#[derive(Serialize)]
struct LegendItem<'a> {
    name: &'a str,
    operation: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
}

impl Definition {
    /// The `.jsd` text: every item an integer summed over builder units.
    pub fn render(&self) -> String {
        let legend: Vec<LegendItem> = self
            .legend
            .iter()
            .map(|name| LegendItem {
                name,
                operation: "sum",
                kind: "integer",
            })
            .collect();
        serde_json::to_string(&serde_json::json!({ "legend": legend }))
            .expect("strings always serialize")
    }

    /// Where a run's `.jsn` find this definition: `<run directory>/jsd/<file>`.
    pub fn path(&self, run_dir: &Path) -> PathBuf {
        run_dir.join("jsd").join(self.file)
    }
}

fn render(values: &[u64], definition: &Path, writer: &Writer) -> String {
    let doc = JsnDocument {
        data: values.iter().map(u64::to_string).collect(),
        definition: definition.to_string_lossy().into_owned(),
        source: writer.source.to_owned(),
        swdaq_provenance: writer.provenance.cloned(),
    };
    serde_json::to_string(&doc).expect("strings always serialize")
}

/// The run and the software a `.jsn` names (`None` in older files and CMS's own).
pub fn provenance(text: &str) -> Result<Option<Provenance>, JsnError> {
    Ok(serde_json::from_str::<JsnDocument>(text)?.swdaq_provenance)
}

fn parse<const N: usize>(text: &str, definition: &Definition) -> Result<[u64; N], JsnError> {
    let definition = definition.file;
    let doc: JsnDocument = serde_json::from_str(text)?;
    if doc.data.len() != N {
        return Err(JsnError::WrongLength {
            definition,
            expected: N,
            found: doc.data.len(),
        });
    }
    let mut out = [0u64; N];
    for (slot, value) in out.iter_mut().zip(&doc.data) {
        *slot = value
            .parse()
            .map_err(|_| JsnError::NotACount(value.clone()))?;
    }
    Ok(out)
}

impl FileJsn {
    pub fn render(&self, run_dir: &Path, writer: &Writer) -> String {
        let definition = FILE_DEFINITION.path(run_dir);
        render(&[self.events, self.bytes], &definition, writer)
    }

    pub fn parse(text: &str) -> Result<Self, JsnError> {
        let [events, bytes] = parse(text, &FILE_DEFINITION)?;
        Ok(Self { events, bytes })
    }
}

impl EolsJsn {
    pub fn render(&self, run_dir: &Path, writer: &Writer) -> String {
        let v = [
            self.events,
            self.files,
            self.total_events,
            self.lost_events,
            self.bytes,
        ];
        render(&v, &EOLS_DEFINITION.path(run_dir), writer)
    }

    pub fn parse(text: &str) -> Result<Self, JsnError> {
        let [events, files, total_events, lost_events, bytes] = parse(text, &EOLS_DEFINITION)?;
        Ok(Self {
            events,
            files,
            total_events,
            lost_events,
            bytes,
        })
    }
}

impl EorJsn {
    pub fn render(&self, run_dir: &Path, writer: &Writer) -> String {
        let v = [
            self.events,
            self.files,
            self.lumis,
            self.last_lumi,
            self.total_events,
            self.lost_events,
        ];
        render(&v, &EOR_DEFINITION.path(run_dir), writer)
    }

    pub fn parse(text: &str) -> Result<Self, JsnError> {
        let [events, files, lumis, last_lumi, total_events, lost_events] =
            parse(text, &EOR_DEFINITION)?;
        Ok(Self {
            events,
            files,
            lumis,
            last_lumi,
            total_events,
            lost_events,
        })
    }
}

/// How every file name of `run` begins.
fn run_file_prefix(run: u32) -> String {
    format!("run{run:06}_")
}

/// Where a builder unit whose directory is `dir` writes run `run`'s files: `dir/run{run:06}`.
pub fn run_directory(dir: &Path, run: u32) -> PathBuf {
    dir.join(format!("run{run:06}"))
}

/// The names of `run`'s files in its run directory under `dir` (data, `.jsn`, `.tmp`, kept
/// bad), sorted.
pub fn files_of_run(dir: &Path, run: u32) -> std::io::Result<Vec<String>> {
    let prefix = run_file_prefix(run);
    let mut names: Vec<String> = std::fs::read_dir(run_directory(dir, run))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.retain(|n| n.starts_with(&prefix));
    names.sort();
    Ok(names)
}

pub fn raw_file_name(run: u32, lumi: u32, index: u32) -> String {
    format!("{}ls{lumi:04}_index{index:06}.raw", run_file_prefix(run))
}

pub fn eols_file_name(run: u32, lumi: u32) -> String {
    format!("{}ls{lumi:04}_EoLS.jsn", run_file_prefix(run))
}

pub fn eor_file_name(run: u32) -> String {
    format!("{}ls0000_EoR.jsn", run_file_prefix(run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn file_jsn_round_trip(events: u64, bytes: u64) {
            let j = FileJsn { events, bytes };
            prop_assert_eq!(FileJsn::parse(&j.render(Path::new("/r"), &Writer::named("bu0"))).unwrap(), j);
        }

        #[test]
        fn eols_round_trip(v in proptest::array::uniform5(any::<u64>())) {
            let j = EolsJsn { events: v[0], files: v[1], total_events: v[2], lost_events: v[3], bytes: v[4] };
            prop_assert_eq!(EolsJsn::parse(&j.render(Path::new("/r"), &Writer::named("bu1"))).unwrap(), j);
        }

        #[test]
        fn eor_round_trip(v in proptest::array::uniform6(any::<u64>())) {
            let j = EorJsn { events: v[0], files: v[1], lumis: v[2], last_lumi: v[3], total_events: v[4], lost_events: v[5] };
            prop_assert_eq!(EorJsn::parse(&j.render(Path::new("/r"), &Writer::named("bu1"))).unwrap(), j);
        }

        #[test]
        fn parse_never_panics(text in ".{0,80}") {
            let _ = FileJsn::parse(&text);
            let _ = EolsJsn::parse(&text);
            let _ = EorJsn::parse(&text);
        }
    }

    #[test]
    fn layout_is_the_cms_one() {
        let text = FileJsn {
            events: 100,
            bytes: 819_200,
        }
        .render(Path::new("/bu0/run000007"), &Writer::named("bu0"));
        assert_eq!(
            text,
            r#"{"data":["100","819200"],"definition":"/bu0/run000007/jsd/rawData.jsd","source":"bu0"}"#
        );
        assert_eq!(provenance(&text).unwrap(), None);
        assert!(matches!(
            EolsJsn::parse(&text),
            Err(JsnError::WrongLength {
                expected: 5,
                found: 2,
                ..
            })
        ));
        assert!(matches!(
            FileJsn::parse(r#"{"data":["1","x"],"definition":"","source":""}"#),
            Err(JsnError::NotACount(_))
        ));
        assert_eq!(raw_file_name(7, 12, 3), "run000007_ls0012_index000003.raw");
        assert_eq!(eols_file_name(7, 12), "run000007_ls0012_EoLS.jsn");
        assert_eq!(eor_file_name(7), "run000007_ls0000_EoR.jsn");
        assert_eq!(
            run_directory(Path::new("bu0"), 7),
            Path::new("bu0/run000007")
        );
        assert_eq!(
            EOLS_DEFINITION.render(),
            r#"{"legend":[{"name":"NEvents","operation":"sum","type":"integer"},{"name":"NFiles","operation":"sum","type":"integer"},{"name":"TotalEvents","operation":"sum","type":"integer"},{"name":"NLostEvents","operation":"sum","type":"integer"},{"name":"NBytes","operation":"sum","type":"integer"}]}"#
        );
    }

    #[test]
    fn provenance_is_a_key_of_its_own_and_data_keeps_its_legend() {
        let p = Provenance {
            version: "0.4.0".into(),
            build_flags: "opt-level=3".into(),
            run_number: 7,
            run_type: "physics".into(),
            ..Provenance::default()
        };
        let writer = Writer {
            source: "bu0",
            provenance: Some(&p),
        };
        let j = EolsJsn {
            events: 5,
            files: 1,
            total_events: 6,
            lost_events: 1,
            bytes: 900,
        };
        let text = j.render(Path::new("/bu0/run000007"), &writer);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            doc["data"].as_array().unwrap().len(),
            EOLS_DEFINITION.legend.len()
        );
        assert_eq!(doc["swdaq_provenance"]["run_number"], 7);
        assert_eq!(doc["swdaq_provenance"]["build_flags"], "opt-level=3");
        assert_eq!(EolsJsn::parse(&text).unwrap(), j);
        assert_eq!(provenance(&text).unwrap(), Some(p));
    }
}
