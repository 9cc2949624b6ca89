//! Files, records and fragments, read by swdaq-store's reader. A record that cannot be read is
//! a Python exception naming it; a bad fragment is left out of its record and listed in
//! `Record.bad_fragments` with why, as `swdaq inspect` does.

use crate::tps;
use numpy::IntoPyArray;
use numpy::PyArray1;
use numpy::ndarray::Array2;
use pyo3::exceptions::{PyIndexError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::path::PathBuf;
use swdaq_format::adc_matrix::{AdcMatrix, adc_matrix};
use swdaq_format::fragment::FRAGMENT_HEADER_SIZE;
use swdaq_format::roi::RoiPayload;
use swdaq_format::trigger_record::record_status;
use swdaq_format::{Fragment as ParsedFragment, FragmentHeader, FragmentType};
use swdaq_store::reader::decode;
use swdaq_store::{RecordFileReader, RecordId, StoreError};

fn store_error(e: StoreError) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// An open swdaq (DUNE hdf5libs layout) trigger-record file. Iterating it yields its records
/// in trigger then sequence number order; `with swdaq.open(path) as f:` closes it at the end.
#[pyclass(module = "swdaq", unsendable)]
pub struct File {
    reader: Option<RecordFileReader>,
    ids: Vec<RecordId>,
    path: PathBuf,
}

impl File {
    fn reader(&self) -> PyResult<&RecordFileReader> {
        self.reader
            .as_ref()
            .ok_or_else(|| PyValueError::new_err(format!("{} is closed", self.path.display())))
    }

    fn read(&self, py: Python<'_>, id: &RecordId) -> PyResult<Record> {
        let (record, bad) = self
            .reader()?
            .read_record_skipping_bad(id)
            .map_err(store_error)?;
        let fragments = record
            .fragments
            .into_iter()
            .map(|bytes| Py::new(py, Fragment::from_bytes(bytes)?))
            .collect::<PyResult<_>>()?;
        let h = record.header;
        Ok(Record {
            trigger_number: h.trigger_number,
            sequence_number: h.sequence_number,
            trigger_timestamp: h.trigger_timestamp,
            trigger_type: h.trigger_type,
            run_number: h.run_number,
            status_bits: h.status_bits,
            requested_components: h.components.len(),
            fragments,
            bad_fragments: bad.into_iter().map(|b| (b.dataset, b.reason)).collect(),
        })
    }
}

#[pymethods]
impl File {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let reader = RecordFileReader::open(&path).map_err(store_error)?;
        let ids = reader.record_ids().map_err(store_error)?;
        Ok(Self {
            reader: Some(reader),
            ids,
            path,
        })
    }

    /// The file's attributes (run number, file index, application, layout version, ...); the
    /// closing time and recorded size are None for a file still being written, any other
    /// value None when it is missing or of the wrong type, named in `problems` (each a dict
    /// of `name`, `expected`, `found`).
    #[getter]
    fn attributes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let a = self.reader()?.attributes();
        let d = PyDict::new(py);
        d.set_item("run_number", a.run_number)?;
        d.set_item("file_index", a.file_index)?;
        d.set_item("creation_timestamp", a.creation_timestamp)?;
        d.set_item("closing_timestamp", a.closing_timestamp)?;
        d.set_item("recorded_size", a.recorded_size)?;
        d.set_item("application_name", a.application_name)?;
        d.set_item("record_type", a.record_type)?;
        d.set_item("filelayout_version", a.filelayout_version)?;
        let problems = PyList::empty(py);
        for p in &a.problems {
            let named = PyDict::new(py);
            named.set_item("name", p.name)?;
            named.set_item("expected", p.expected)?;
            named.set_item("found", &p.found)?;
            problems.append(named)?;
        }
        d.set_item("problems", problems)?;
        Ok(d)
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// `(trigger_number, sequence_number)` of every record, in order.
    fn record_ids(&self) -> Vec<(u64, u16)> {
        self.ids
            .iter()
            .map(|id| (id.trigger_number, id.sequence_number))
            .collect()
    }

    /// One record by trigger (and sequence) number.
    #[pyo3(signature = (trigger_number, sequence_number = 0))]
    fn record(
        &self,
        py: Python<'_>,
        trigger_number: u64,
        sequence_number: u16,
    ) -> PyResult<Record> {
        let id = self
            .ids
            .iter()
            .find(|id| id.trigger_number == trigger_number && id.sequence_number == sequence_number)
            .ok_or_else(|| {
                PyIndexError::new_err(format!(
                    "no record {trigger_number}.{sequence_number} in {}",
                    self.path.display()
                ))
            })?;
        self.read(py, id)
    }

    fn __len__(&self) -> usize {
        self.ids.len()
    }

    /// The `index`-th record in file order (negative counts from the end).
    fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<Record> {
        let at = if index < 0 {
            index + self.ids.len() as isize
        } else {
            index
        };
        let id = usize::try_from(at)
            .ok()
            .and_then(|at| self.ids.get(at))
            .ok_or_else(|| PyIndexError::new_err("record index out of range"))?;
        self.read(py, id)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> RecordIter {
        RecordIter {
            file: slf.into(),
            next: 0,
        }
    }

    fn close(&mut self) {
        self.reader = None;
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &mut self,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!("swdaq.File({:?}, {} records)", self.path, self.ids.len())
    }
}

/// Opens a trigger-record file (the same as `swdaq.File(path)`).
#[pyfunction]
pub fn open(path: PathBuf) -> PyResult<File> {
    File::new(path)
}

#[pyclass(module = "swdaq", unsendable)]
struct RecordIter {
    file: Py<File>,
    next: usize,
}

#[pymethods]
impl RecordIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Record>> {
        let file = self.file.borrow(py);
        let Some(id) = file.ids.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        file.read(py, id).map(Some)
    }
}

/// One trigger record: its header's fields and its fragments, ordered by source and type.
#[pyclass(module = "swdaq", get_all, unsendable)]
pub struct Record {
    trigger_number: u64,
    sequence_number: u16,
    trigger_timestamp: u64,
    trigger_type: u64,
    run_number: u32,
    status_bits: u32,
    /// How many components (source, window) the builder asked for.
    requested_components: usize,
    fragments: Vec<Py<Fragment>>,
    /// `(dataset, reason)` of each fragment that could not be read or parsed.
    bad_fragments: Vec<(String, String)>,
}

#[pymethods]
impl Record {
    /// False when the builder flagged the record incomplete (a requested fragment missing).
    #[getter]
    fn complete(&self) -> bool {
        self.status_bits & record_status::INCOMPLETE == 0
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.Record(trigger {}.{}, {} fragments{})",
            self.trigger_number,
            self.sequence_number,
            self.fragments.len(),
            if self.complete() { "" } else { ", incomplete" }
        )
    }
}

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

/// One fragment: its header's fields, its payload, and its content decoded on demand.
#[pyclass(module = "swdaq", unsendable)]
pub struct Fragment {
    header: FragmentHeader,
    bytes: Vec<u8>,
}

impl Fragment {
    fn from_bytes(bytes: Vec<u8>) -> PyResult<Self> {
        let header = ParsedFragment::parse(&bytes)
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .header;
        Ok(Self { header, bytes })
    }

    fn payload_bytes(&self) -> &[u8] {
        &self.bytes[FRAGMENT_HEADER_SIZE..]
    }

    fn matrix(&self) -> PyResult<AdcMatrix> {
        adc_matrix(self.header.fragment_type, self.payload_bytes())
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "a {} fragment carries no ADCs",
                    self.header.fragment_type.name()
                ))
            })?
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

#[pymethods]
impl Fragment {
    /// The source as `swdaq inspect` names it, e.g. `Detector_Readout_0x00000001`.
    #[getter]
    fn source(&self) -> String {
        self.header.element_id.to_string()
    }

    #[getter]
    fn source_id(&self) -> u32 {
        self.header.element_id.id
    }

    /// `WIBEth`, `ProtoWIB`, `Trigger_Primitive`, ...
    #[getter]
    fn fragment_type(&self) -> &'static str {
        self.header.fragment_type.name()
    }

    #[getter]
    fn trigger_number(&self) -> u64 {
        self.header.trigger_number
    }

    #[getter]
    fn trigger_timestamp(&self) -> u64 {
        self.header.trigger_timestamp
    }

    #[getter]
    fn window_begin(&self) -> u64 {
        self.header.window_begin
    }

    #[getter]
    fn window_end(&self) -> u64 {
        self.header.window_end
    }

    #[getter]
    fn run_number(&self) -> u32 {
        self.header.run_number
    }

    /// Fragment error bits (data not found, incomplete, ...), 0 for a good fragment.
    #[getter]
    fn error_bits(&self) -> u32 {
        self.header.error_bits
    }

    /// Header and payload, in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.header.size
    }

    /// The payload after the 72-byte fragment header.
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.payload_bytes())
    }

    /// ADCs of a WIBEth or ProtoDUNE WIB fragment, uint16 `[channel, sample]` (the frame's
    /// channel order); ValueError for other fragment types or a partial frame.
    fn adcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let m = self.matrix()?;
        let array = Array2::from_shape_vec((m.channels, m.samples), m.values)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py).into_any())
    }

    /// The timestamp of every sample of `adcs()`, uint64 clock ticks.
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(self.matrix()?.timestamps.into_pyarray(py))
    }

    /// The regions of interest of an ROI fragment (ROI readout), in the order stored;
    /// ValueError for other fragment types.
    fn regions(&self) -> PyResult<Vec<Region>> {
        if self.header.fragment_type != FragmentType::ROI {
            return Err(PyValueError::new_err(format!(
                "a {} fragment carries no regions of interest",
                self.header.fragment_type.name()
            )));
        }
        let roi = RoiPayload::parse(self.payload_bytes())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
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

    /// The size this ROI fragment would have had with every frame of its window.
    #[getter]
    fn full_window_bytes(&self) -> PyResult<u64> {
        RoiPayload::parse(self.payload_bytes())
            .map(|roi| roi.full_window_bytes)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Trigger primitives of a TP fragment as a structured array of `swdaq.TP_DTYPE`.
    fn tps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.header.fragment_type != FragmentType::TRIGGER_PRIMITIVE {
            return Err(PyValueError::new_err(format!(
                "a {} fragment carries no trigger primitives",
                self.header.fragment_type.name()
            )));
        }
        let tps = decode::trigger_primitives(self.payload_bytes())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        tps::to_array(py, &tps)
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.Fragment({} {}, {} bytes)",
            self.source(),
            self.fragment_type(),
            self.header.size
        )
    }
}
