//! The JSON bookkeeping the CMS file-based filter farm reads beside the raw files: one
//! `.jsn` per raw file (`NEvents`, `NBytes`) and one end-of-lumi-section `_EoLS.jsn` per lumi
//! section (`NEvents`, `NFiles`, `TotalEvents`, `NLostEvents`, `NBytes`). As in CMS, the
//! values are a `data` array of decimal strings in the order of the definition's legend.
//!
//! File names: `run{run:06}_ls{ls:04}_index{index:06}.raw` (+ `.jsn`),
//! `run{run:06}_ls{ls:04}_EoLS.jsn`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct JsnDocument {
    data: Vec<String>,
    definition: String,
    source: String,
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

const FILE_DEFINITION: &str = "rawData.jsd";
const EOLS_DEFINITION: &str = "EoLS.jsd";

fn render(values: &[u64], definition: &str, source: &str) -> String {
    let doc = JsnDocument {
        data: values.iter().map(u64::to_string).collect(),
        definition: definition.to_owned(),
        source: source.to_owned(),
    };
    serde_json::to_string(&doc).expect("strings always serialize")
}

fn parse<const N: usize>(text: &str, definition: &'static str) -> Result<[u64; N], JsnError> {
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
    pub fn render(&self, source: &str) -> String {
        render(&[self.events, self.bytes], FILE_DEFINITION, source)
    }

    pub fn parse(text: &str) -> Result<Self, JsnError> {
        let [events, bytes] = parse(text, FILE_DEFINITION)?;
        Ok(Self { events, bytes })
    }
}

impl EolsJsn {
    pub fn render(&self, source: &str) -> String {
        let v = [
            self.events,
            self.files,
            self.total_events,
            self.lost_events,
            self.bytes,
        ];
        render(&v, EOLS_DEFINITION, source)
    }

    pub fn parse(text: &str) -> Result<Self, JsnError> {
        let [events, files, total_events, lost_events, bytes] = parse(text, EOLS_DEFINITION)?;
        Ok(Self {
            events,
            files,
            total_events,
            lost_events,
            bytes,
        })
    }
}

/// How every file name of `run` begins.
fn run_file_prefix(run: u32) -> String {
    format!("run{run:06}_")
}

/// The names of `run`'s files in `dir` (data, `.jsn`, `.tmp`, kept bad), sorted; an earlier
/// run's files in the same directory are not among them.
pub fn files_of_run(dir: &std::path::Path, run: u32) -> std::io::Result<Vec<String>> {
    let prefix = run_file_prefix(run);
    let mut names: Vec<String> = std::fs::read_dir(dir)?
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn file_jsn_round_trip(events: u64, bytes: u64) {
            let j = FileJsn { events, bytes };
            prop_assert_eq!(FileJsn::parse(&j.render("bu0")).unwrap(), j);
        }

        #[test]
        fn eols_round_trip(v in proptest::array::uniform5(any::<u64>())) {
            let j = EolsJsn { events: v[0], files: v[1], total_events: v[2], lost_events: v[3], bytes: v[4] };
            prop_assert_eq!(EolsJsn::parse(&j.render("bu1")).unwrap(), j);
        }

        #[test]
        fn parse_never_panics(text in ".{0,80}") {
            let _ = FileJsn::parse(&text);
            let _ = EolsJsn::parse(&text);
        }
    }

    #[test]
    fn layout_is_the_cms_one() {
        let text = FileJsn {
            events: 100,
            bytes: 819_200,
        }
        .render("bu0");
        assert_eq!(
            text,
            r#"{"data":["100","819200"],"definition":"rawData.jsd","source":"bu0"}"#
        );
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
    }
}
