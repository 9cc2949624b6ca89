//! `swdaq.find_hits`: any of swdaq-tpg's hit-finding algorithms on a numpy array of ADCs,
//! through the same `HitFinder` the readout threads run (AVX2 or the scalar reference).

use crate::tps;
use numpy::PyReadonlyArray2;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use swdaq_format::DETECTOR_ID_HD_TPC;
use swdaq_tpg::{Algorithm, HitFinder, Implementation, Plane, PlaneAlgorithms, ThresholdConfig};

/// A Python dict as a serde value, through its JSON form; `what` names it in errors.
fn deserialize<T: serde::de::DeserializeOwned>(
    py: Python<'_>,
    what: &str,
    dict: &Bound<'_, PyDict>,
) -> PyResult<T> {
    let json: String = py
        .import("json")?
        .call_method1("dumps", (dict,))?
        .extract()?;
    serde_json::from_str(&json).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// `algorithm` as a name (`threshold`, `protodune`, `abs-running-sum`, with their default
/// settings) or a dict of settings with the name under `algorithm`.
fn algorithm(py: Python<'_>, algorithm: &Bound<'_, PyAny>) -> PyResult<Algorithm> {
    let settings = match algorithm.cast::<PyDict>() {
        Ok(dict) => dict.clone(),
        Err(_) => {
            let dict = PyDict::new(py);
            dict.set_item("algorithm", algorithm.extract::<String>()?)?;
            dict
        }
    };
    let algorithm: Algorithm = deserialize(py, "algorithm", &settings)?;
    algorithm
        .validate()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(algorithm)
}

fn implementation(name: &str) -> PyResult<Implementation> {
    match name {
        "best" => Ok(Implementation::best()),
        "scalar" => Ok(Implementation::Scalar),
        "avx2" if swdaq_tpg::avx2::available() => Ok(Implementation::Avx2),
        "avx2" => Err(PyRuntimeError::new_err("this CPU has no AVX2")),
        other => Err(PyValueError::new_err(format!(
            "implementation {other:?}: expected best, scalar or avx2"
        ))),
    }
}

/// Runs hit finding over `adcs` (uint16, channels x samples, channels a multiple of 16) and
/// returns every trigger primitive, ordered by start time then channel, as a structured array
/// of `swdaq.TP_DTYPE`. Open hits are closed at the last sample.
///
/// `algorithm`: a name or a dict of its settings (`{"algorithm": "protodune",
/// "threshold_sigmas": 4.0}`); `settings`: what every algorithm shares, as in `swdaq run`'s
/// `[hit_finding.threshold]` (`threshold` for `threshold`, the pedestal's `accumulator_limit` and
/// `initial_pedestal`, `max_hit_samples`); `channel_ids`: the offline
/// channel of each row (default 0..channels); time is `first_timestamp + sample *
/// ticks_per_sample` (WIBEth: 32; ProtoDUNE WIB: 25 with `adc_bits=12`).
#[pyfunction]
#[pyo3(signature = (
    adcs, algorithm = None, *, settings = None, channel_ids = None, first_timestamp = 0,
    ticks_per_sample = 32, adc_bits = 14, implementation = "best"
))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
pub fn find_hits<'py>(
    py: Python<'py>,
    adcs: PyReadonlyArray2<'py, u16>,
    algorithm: Option<&Bound<'py, PyAny>>,
    settings: Option<&Bound<'py, PyDict>>,
    channel_ids: Option<Vec<u32>>,
    first_timestamp: u64,
    ticks_per_sample: u64,
    adc_bits: u32,
    implementation: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let algorithm = match algorithm {
        Some(a) => self::algorithm(py, a)?,
        None => Algorithm::Threshold,
    };
    let config: ThresholdConfig = match settings {
        Some(dict) => deserialize(py, "settings", dict)?,
        None => ThresholdConfig::default(),
    };
    let view = adcs.as_array();
    let (channels, samples) = view.dim();
    let channel_ids = channel_ids.unwrap_or_else(|| (0..channels as u32).collect());
    if channel_ids.len() != channels {
        return Err(PyValueError::new_err(format!(
            "{} channel ids for {channels} channels",
            channel_ids.len()
        )));
    }
    let config_error = |e: swdaq_tpg::ConfigError| PyValueError::new_err(e.to_string());
    let mut finder = HitFinder::with_algorithms(
        config,
        &PlaneAlgorithms::uniform(algorithm),
        &vec![Plane::Collection; channels],
        channel_ids,
        ticks_per_sample,
        DETECTOR_ID_HD_TPC as u8,
        self::implementation(implementation)?,
    )
    .map_err(config_error)?
    .with_adc_bits(adc_bits)
    .map_err(config_error)?;
    // The finder takes one row of every channel per sample.
    let rows: Vec<u16> = view.t().iter().copied().collect();
    debug_assert_eq!(rows.len(), channels * samples);
    let mut tps = py.detach(|| {
        let mut out = Vec::new();
        finder.process_rows(first_timestamp, &rows, &mut out);
        finder.flush(&mut out);
        out
    });
    tps.sort_by_key(|tp| (tp.time_start, tp.channel));
    tps::to_array(py, &tps)
}
