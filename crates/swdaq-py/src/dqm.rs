//! `swdaq.dqm`: users' own data-quality histograms (#37). The module itself is Python
//! (`dqm.py`, made a submodule when `swdaq` is imported): an analyzer's loop, its sources and
//! its publishing to `swdaq serve` are plain Python a physicist reads and changes. What must
//! be swdaq's own is here: a set is checked, saved and loaded by the code `swdaq dqm` and the
//! online monitoring use (`swdaq_dqm`), so a user's set and a run's are one format.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ffi::CString;
use std::path::PathBuf;
use swdaq_dqm::{Axis, Hist1, HistSet};

const SOURCE: &str = include_str!("dqm.py");

fn checked(text: &str) -> PyResult<HistSet> {
    HistSet::from_json(text).map_err(|e| PyValueError::new_err(format!("not a histogram set: {e}")))
}

/// The counts (underflow, the bins, overflow) of `values` in `bins` bins from `lo` to `hi`,
/// found by swdaq's own `Hist1::fill`: a user's histogram bins a value as a run's does.
#[pyfunction]
fn _bin<'py>(
    py: Python<'py>,
    bins: usize,
    lo: f64,
    hi: f64,
    values: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let mut h = Hist1::new("", "", Axis::new("", "", bins, lo, hi))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    for &x in values.as_array() {
        h.fill(x);
    }
    Ok(h.counts.into_pyarray(py))
}

/// The JSON text of a set, checked as a saved set is; raises `ValueError` naming the fault.
#[pyfunction]
fn _check_set(text: &str) -> PyResult<String> {
    let set = checked(text)?;
    serde_json::to_string(&set).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Saves a set's JSON text as a new HDF5 file in the layout of a run's `dqm_runNNNNNN.h5`;
/// never replaces a file.
#[pyfunction]
fn _save_set(text: &str, path: PathBuf) -> PyResult<()> {
    let set = checked(text)?;
    swdaq_dqm::hdf5_file::save(&set, &path, None).map_err(PyValueError::new_err)
}

/// A saved set (a run's `dqm_runNNNNNN.h5` or one saved by `HistSet.save`) as JSON text.
#[pyfunction]
fn _load_set(path: PathBuf) -> PyResult<String> {
    let set = swdaq_dqm::hdf5_file::load(&path).map_err(PyValueError::new_err)?;
    serde_json::to_string(&set).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Makes `swdaq.dqm` (importable as `swdaq.dqm` and `from swdaq import dqm`).
pub fn add(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    // The version of the sets this swdaq writes and reads, for `HistSet.to_json`.
    parent.add("_DQM_SET_VERSION", HistSet::new().version)?;
    parent.add_function(wrap_pyfunction!(_bin, parent)?)?;
    parent.add_function(wrap_pyfunction!(_check_set, parent)?)?;
    parent.add_function(wrap_pyfunction!(_save_set, parent)?)?;
    parent.add_function(wrap_pyfunction!(_load_set, parent)?)?;
    let code = CString::new(SOURCE).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let module = PyModule::from_code(py, &code, c"swdaq/dqm.py", c"swdaq.dqm")?;
    parent.add_submodule(&module)?;
    py.import("sys")?
        .getattr("modules")?
        .set_item("swdaq.dqm", &module)?;
    Ok(())
}
