//! The `swdaq` Python module: every file swdaq writes read with one object model, by the
//! same Rust code `swdaq inspect` runs, and hit finding on numpy arrays (swdaq-tpg).
//!
//! `swdaq.open(path)` tells the format from the file's first bytes (`file_kind`, as
//! `swdaq inspect` does) and returns a `swdaq.File` of that format's subclass:
//!
//! | file | class | items | fragments | numpy |
//! |------|-------|-------|-----------|-------|
//! | HDF5 trigger records | `RecordFile` | `Record` | `Fragment` | payload, ADCs, TPs, ROI regions |
//! | CMS FRD `.raw` | `FrdFile` | `FrdEvent` | `FedFragment` | payload |
//! | link `.swraw` | `LinkFile` | `Frame` | the frame itself | payload, ADCs (per frame or any range) |
//! | ATLAS EventStorage `.data` | `AtlasFile` | `AtlasEvent` | `RobFragment` | payload, e-link chunks |
//!
//! Every file: `len`, index, iteration, `format`, `left_open`, `header`, `problems` (as
//! `swdaq inspect --json` lists them), `close`, `with`. Every item: `fragments`, `ok`,
//! `problems`. Every fragment: its header's fields, `size`, `ok`, `problems`, and
//! `payload()`, a read-only numpy view of its bytes: a file is mapped once
//! (HDF5 fragments are read once each) and a view's base keeps those bytes alive.
//!
//! `swdaq.dqm` (`dqm.rs`, `dqm.py`): a user's own data-quality histograms, filled by an
//! analyzer from these items and published to `swdaq serve`'s console.

mod adcs;
mod atlas;
mod buffer;
mod dqm;
mod file;
mod frd;
mod hits;
mod link;
mod records;
mod roi;
mod tps;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "swdaq")]
fn swdaq_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(file::open, m)?)?;
    m.add_class::<file::File>()?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<records::RecordFile>()?;
    m.add_class::<records::Record>()?;
    m.add_class::<records::Fragment>()?;
    m.add_class::<roi::Region>()?;
    m.add_class::<frd::FrdFile>()?;
    m.add_class::<frd::FrdEvent>()?;
    m.add_class::<frd::FedFragment>()?;
    m.add_class::<link::LinkFile>()?;
    m.add_class::<link::Frame>()?;
    m.add_class::<atlas::AtlasFile>()?;
    m.add_class::<atlas::AtlasEvent>()?;
    m.add_class::<atlas::RobFragment>()?;
    m.add_function(wrap_pyfunction!(hits::find_hits, m)?)?;
    m.add("TP_DTYPE", tps::dtype(m.py())?)?;
    dqm::add(m)?;
    Ok(())
}
