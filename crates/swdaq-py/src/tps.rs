//! Trigger primitives as a numpy structured array: one packed little-endian record per TP.

use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use swdaq_format::TriggerPrimitive;

/// Bytes of one TP record: the sum of the field sizes below.
const RECORD_BYTES: usize = 24;

/// Field name and numpy type of each column, in record order.
const FIELDS: [(&str, &str); 8] = [
    ("time_start", "<u8"),
    ("channel", "<u4"),
    ("samples_over_threshold", "<u2"),
    ("samples_to_peak", "<u2"),
    ("adc_integral", "<u4"),
    ("adc_peak", "<u2"),
    ("flags", "u1"),
    ("detector_id", "u1"),
];

/// The numpy dtype of a TP record (`swdaq.TP_DTYPE`).
pub fn dtype(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("numpy")?
        .call_method1("dtype", (FIELDS.to_vec(),))
}

/// `tps` as a structured array of [`dtype`].
pub fn to_array<'py>(py: Python<'py>, tps: &[TriggerPrimitive]) -> PyResult<Bound<'py, PyAny>> {
    let mut bytes = Vec::with_capacity(tps.len() * RECORD_BYTES);
    for tp in tps {
        bytes.extend_from_slice(&tp.time_start.to_le_bytes());
        bytes.extend_from_slice(&tp.channel.to_le_bytes());
        bytes.extend_from_slice(&tp.samples_over_threshold.to_le_bytes());
        bytes.extend_from_slice(&tp.samples_to_peak.to_le_bytes());
        bytes.extend_from_slice(&tp.adc_integral.to_le_bytes());
        bytes.extend_from_slice(&tp.adc_peak.to_le_bytes());
        bytes.push(tp.flags);
        bytes.push(tp.detector_id);
    }
    // A bytearray keeps the array writable; numpy shares its buffer.
    let buffer = PyByteArray::new(py, &bytes);
    py.import("numpy")?
        .call_method1("frombuffer", (buffer, dtype(py)?))
}
