//! ROI fragments' regions of interest as numpy arrays.

use numpy::IntoPyArray;
use numpy::PyArray1;
use numpy::ndarray::Array2;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use swdaq_format::roi::RoiPayload;

/// One region of interest of an ROI fragment: a channel group over consecutive samples.
#[pyclass(module = "swdaq", unsendable)]
pub struct Region {
    #[pyo3(get)]
    channel_group: u32,
    /// Timestamp of the first sample, in clock ticks.
    #[pyo3(get)]
    first_timestamp: u64,
    #[pyo3(get)]
    ticks_per_sample: u64,
    #[pyo3(get)]
    samples: usize,
    channel_ids: Vec<u32>,
    adcs: Vec<u16>,
}

#[pymethods]
impl Region {
    /// Offline channel id of each row of `adcs()`, uint32.
    fn channel_ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        self.channel_ids.clone().into_pyarray(py)
    }

    /// The ADCs, uint16 `[channel, sample]` (rows in `channel_ids()` order).
    fn adcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let array =
            Array2::from_shape_vec((self.channel_ids.len(), self.samples), self.adcs.clone())
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py).into_any())
    }

    /// The timestamp of every sample (column of `adcs()`), uint64 clock ticks.
    fn timestamps<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        (0..self.samples as u64)
            .map(|s| self.first_timestamp + s * self.ticks_per_sample)
            .collect::<Vec<_>>()
            .into_pyarray(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.Region(group {}, {} channels x {} samples from {})",
            self.channel_group,
            self.channel_ids.len(),
            self.samples,
            self.first_timestamp
        )
    }
}

/// The regions of an ROI fragment's payload, in the order stored.
pub fn regions(payload: &[u8]) -> PyResult<Vec<Region>> {
    let roi = RoiPayload::parse(payload).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(roi
        .regions()
        .map(|r| Region {
            channel_group: r.channel_group,
            first_timestamp: r.first_timestamp,
            ticks_per_sample: roi.ticks_per_sample as u64,
            channel_ids: r.channel_ids().collect(),
            samples: r.samples,
            adcs: r.adcs(),
        })
        .collect())
}

/// The size an ROI fragment would have had with every frame of its window.
pub fn full_window_bytes(payload: &[u8]) -> PyResult<u64> {
    RoiPayload::parse(payload)
        .map(|roi| roi.full_window_bytes)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
