//! The `swdaq` Python module: open a trigger-record file, iterate its records and fragments,
//! get WIBEth / ProtoDUNE WIB ADCs as numpy arrays (channels x samples) and trigger primitives
//! as a numpy structured array, and run any hit-finding algorithm on a numpy array. Every
//! number comes from the same Rust code `swdaq` runs (swdaq-store's reader, swdaq-tpg).

mod file;
mod hits;
mod tps;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "swdaq")]
fn swdaq_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<file::File>()?;
    m.add_class::<file::Record>()?;
    m.add_class::<file::Fragment>()?;
    m.add_class::<file::Region>()?;
    m.add_function(wrap_pyfunction!(file::open, m)?)?;
    m.add_function(wrap_pyfunction!(hits::find_hits, m)?)?;
    m.add("TP_DTYPE", tps::dtype(m.py())?)?;
    Ok(())
}
