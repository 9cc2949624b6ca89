//! A histogram set saved as HDF5, so any physicist reads it with h5py and no swdaq:
//!
//! ```text
//! /                      attributes: swdaq_dqm_version (u32, 1), events (u64); saved by a
//!                        run, its provenance: swdaq_version, swdaq_git_commit,
//!                        swdaq_build_profile, swdaq_build_flags, swdaq_run_registry,
//!                        swdaq_run_type (strings), swdaq_run_number (u32)
//! /histograms/<name>/    attributes: title, kind ("distribution" or "counts"),
//!                                    axis_label, axis_unit (strings), bins (u64), lo, hi (f64)
//!     counts             u64 dataset of bins + 2: the underflow, the bins in order, the overflow
//! ```
//!
//! A file is created only where none exists (`create_excl`): a saved set is never replaced.
//! Reading checks every histogram as a JSON set is checked.

use crate::hist::{Axis, Hist1, HistKind};
use crate::set::HistSet;
use hdf5::types::VarLenUnicode;
use std::path::Path;
use swdaq_format::provenance::{KEY_PREFIX, Provenance};

const VERSION: u32 = 1;

/// Writes `set` to a new HDF5 file at `path`, naming the run and the software that made it
/// when it has them (`swdaq dqm --save` has no run).
pub fn save(set: &HistSet, path: &Path, provenance: Option<&Provenance>) -> Result<(), String> {
    let fail = |e: hdf5::Error| format!("{}: {e}", path.display());
    let file = hdf5::File::create_excl(path).map_err(fail)?;
    attr(&file, "swdaq_dqm_version", &VERSION).map_err(fail)?;
    attr(&file, "events", &set.events).map_err(fail)?;
    if let Some(p) = provenance {
        for (key, value) in p.prefixed_texts() {
            text_attr(&file, &key, value).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let run_number = format!("{KEY_PREFIX}run_number");
        attr(&file, &run_number, &p.run_number).map_err(fail)?;
    }
    let histograms = file.create_group("histograms").map_err(fail)?;
    for (name, h) in &set.histograms {
        let group = histograms.create_group(name).map_err(fail)?;
        let kind = match h.kind {
            HistKind::Distribution => "distribution",
            HistKind::Counts => "counts",
        };
        for (key, value) in [
            ("title", h.title.as_str()),
            ("kind", kind),
            ("axis_label", h.axis.label.as_str()),
            ("axis_unit", h.axis.unit.as_str()),
        ] {
            text_attr(&group, key, value).map_err(|e| format!("{}: {name}.{e}", path.display()))?;
        }
        attr(&group, "bins", &(h.axis.bins as u64)).map_err(fail)?;
        attr(&group, "lo", &h.axis.lo).map_err(fail)?;
        attr(&group, "hi", &h.axis.hi).map_err(fail)?;
        group
            .new_dataset_builder()
            .with_data(&h.counts)
            .create("counts")
            .map_err(fail)?;
    }
    file.close().map_err(fail)
}

/// Reads a set saved by [`save`], every histogram checked.
pub fn load(path: &Path) -> Result<HistSet, String> {
    let fail = |e: hdf5::Error| format!("{}: {e}", path.display());
    let file = hdf5::File::open(path).map_err(fail)?;
    let version: u32 = file
        .attr("swdaq_dqm_version")
        .and_then(|a| a.read_scalar())
        .map_err(fail)?;
    if version != VERSION {
        return Err(format!(
            "{}: version {version}, this swdaq reads {VERSION}",
            path.display()
        ));
    }
    let mut set = HistSet::new();
    set.events = file
        .attr("events")
        .and_then(|a| a.read_scalar())
        .map_err(fail)?;
    let histograms = file.group("histograms").map_err(fail)?;
    for name in histograms.member_names().map_err(fail)? {
        let group = histograms.group(&name).map_err(fail)?;
        let text = |key: &str| -> Result<String, String> {
            let value: VarLenUnicode = group
                .attr(key)
                .and_then(|a| a.read_scalar())
                .map_err(fail)?;
            Ok(value.as_str().to_owned())
        };
        let number = |key: &str| -> Result<f64, String> {
            group.attr(key).and_then(|a| a.read_scalar()).map_err(fail)
        };
        let bins: u64 = group
            .attr("bins")
            .and_then(|a| a.read_scalar())
            .map_err(fail)?;
        let axis = Axis::new(
            &text("axis_label")?,
            &text("axis_unit")?,
            usize::try_from(bins).map_err(|e| e.to_string())?,
            number("lo")?,
            number("hi")?,
        );
        let mut h = Hist1::new(&name, &text("title")?, axis).map_err(|e| e.to_string())?;
        h.kind = match text("kind")?.as_str() {
            "distribution" => HistKind::Distribution,
            "counts" => HistKind::Counts,
            other => return Err(format!("{}: {name}: kind {other:?}", path.display())),
        };
        let counts: Vec<u64> = group
            .dataset("counts")
            .and_then(|d| d.read_raw())
            .map_err(fail)?;
        if counts.len() != h.counts.len() {
            return Err(format!(
                "{}: {name}: {} counts for {bins} bins",
                path.display(),
                counts.len()
            ));
        }
        h.counts = counts;
        set.histograms.insert(name, h);
    }
    Ok(set)
}

fn attr<T: hdf5::H5Type>(loc: &hdf5::Location, name: &str, value: &T) -> hdf5::Result<()> {
    loc.new_attr::<T>().create(name)?.write_scalar(value)
}

/// A variable-length string attribute; an error names the attribute.
fn text_attr(loc: &hdf5::Location, name: &str, value: &str) -> Result<(), String> {
    let value: VarLenUnicode = value.parse().map_err(|e| format!("{name}: {e}"))?;
    attr(loc, name, &value).map_err(|e| format!("{name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_round_trips_through_hdf5_and_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dqm.h5");
        let mut set = HistSet::new();
        set.events = 12;
        let h = set.entry("size", || {
            Hist1::new("size", "Size", Axis::new("size", "bytes", 4, 0.0, 8.0)).unwrap()
        });
        h.fill(1.0);
        h.fill(100.0);
        set.entry("map", || {
            Hist1::new("map", "Map", Axis::new("e-link", "", 3, 0.0, 3.0))
                .unwrap()
                .of_counts()
        })
        .fill(2.0);
        save(&set, &path, None).unwrap();
        assert_eq!(load(&path).unwrap(), set);
        assert!(save(&set, &path, None).is_err());
        assert_eq!(load(&path).unwrap(), set, "the first one is intact");
    }
}
