//! ADCs as numpy: one row per channel, samples along the row (`swdaq_format::adc_matrix`),
//! for HDF5 fragments and link files' frames alike.

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use swdaq_format::adc_matrix::AdcMatrix;
use swdaq_format::{FormatError, FragmentType};

/// The matrix `decoded` holds, or why there is none: `fragment_type` carries no ADCs, or a
/// frame did not parse.
pub fn matrix(
    fragment_type: FragmentType,
    decoded: Option<Result<AdcMatrix, FormatError>>,
) -> PyResult<AdcMatrix> {
    decoded
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "a {} fragment (type {}) carries no ADCs",
                fragment_type.name(),
                fragment_type.0
            ))
        })?
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The ADCs, uint16 `[channel, sample]`.
pub fn values(py: Python<'_>, m: AdcMatrix) -> PyResult<Bound<'_, PyAny>> {
    let array = Array2::from_shape_vec((m.channels, m.samples), m.values)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py).into_any())
}

/// The timestamp of every sample (column of [`values`]), uint64 clock ticks.
pub fn timestamps(py: Python<'_>, m: AdcMatrix) -> Bound<'_, PyArray1<u64>> {
    m.timestamps.into_pyarray(py)
}
