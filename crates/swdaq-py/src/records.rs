//! HDF5 trigger-record files (DUNE hdf5libs layout), read by swdaq-store's reader: records
//! -> fragments. A record that cannot be read is a Python exception naming it; a bad
//! fragment is left out of its record and named in its `problems`, as `swdaq inspect` does.

use crate::buffer::{Buffer, view};
use crate::file::{File, Reader, to_python};
use crate::{adcs, roi, tps};
use numpy::PyArray1;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::any::Any;
use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use swdaq_format::adc_matrix::{AdcMatrix, adc_matrix};
use swdaq_format::board_frame;
use swdaq_format::fragment::{FRAGMENT_HEADER_SIZE, fragment_error};
use swdaq_format::trigger_record::record_status;
use swdaq_format::{Fragment as ParsedFragment, FragmentHeader, FragmentType};
use swdaq_store::inspect::Problem;
use swdaq_store::reader::decode;
use swdaq_store::{RecordFileReader, RecordId, StoreError};

fn store_error(e: StoreError) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// The records of an HDF5 file, in trigger then sequence number order.
pub struct RecordReader {
    reader: RecordFileReader,
    ids: Vec<RecordId>,
    path: PathBuf,
    /// `swdaq inspect`'s problems, found on first asking (they take every record's headers).
    problems: OnceCell<Vec<Problem>>,
}

impl RecordReader {
    pub fn open(path: &Path) -> PyResult<Self> {
        let reader = RecordFileReader::open(path).map_err(store_error)?;
        let ids = reader.record_ids().map_err(store_error)?;
        Ok(Self {
            reader,
            ids,
            path: path.to_path_buf(),
            problems: OnceCell::new(),
        })
    }

    fn read(&self, py: Python<'_>, id: &RecordId) -> PyResult<Record> {
        let (record, bad) = self
            .reader
            .read_record_skipping_bad(id)
            .map_err(store_error)?;
        let fragments = record
            .fragments
            .into_iter()
            .map(|bytes| Py::new(py, Fragment::from_bytes(py, bytes)?))
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
            problems: bad
                .into_iter()
                .map(|b| format!("fragment {}: {}", b.dataset, b.reason))
                .collect(),
        })
    }
}

impl Reader for RecordReader {
    fn len(&self) -> usize {
        self.ids.len()
    }

    fn item(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self.read(py, &self.ids[index])?)?.into_any())
    }

    /// The file's attributes (run number, file index, application, layout version, swdaq's
    /// `provenance`, ...);
    /// the closing time and recorded size are None for a file still being written, any
    /// other value None when it is missing or of the wrong type, named in `problems` (each
    /// a dict of `name`, `expected`, `found`). `swdaq inspect --json` calls it `attributes`.
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let a = self.reader.attributes();
        let d = PyDict::new(py);
        d.set_item("run_number", a.run_number)?;
        d.set_item("file_index", a.file_index)?;
        d.set_item("creation_timestamp", a.creation_timestamp)?;
        d.set_item("closing_timestamp", a.closing_timestamp)?;
        d.set_item("recorded_size", a.recorded_size)?;
        d.set_item("application_name", a.application_name)?;
        d.set_item("record_type", a.record_type)?;
        d.set_item("filelayout_version", a.filelayout_version)?;
        // swdaq's provenance attributes by name without their prefix (none in older files).
        d.set_item("provenance", &a.provenance)?;
        let problems = PyList::empty(py);
        for p in &a.problems {
            let named = PyDict::new(py);
            named.set_item("name", p.name.as_ref())?;
            named.set_item("expected", p.expected)?;
            named.set_item("found", &p.found)?;
            problems.append(named)?;
        }
        d.set_item("problems", problems)?;
        Ok(d.into_any().unbind())
    }

    /// Records and fragments that could not be read: `record`, `fragment` (None when the
    /// record itself failed) and `reason`.
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(problems) = self.problems.get() {
            return to_python(py, problems);
        }
        let report = swdaq_store::inspect::inspect(&self.path, None).map_err(store_error)?;
        to_python(py, self.problems.get_or_init(|| report.problems))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An HDF5 trigger-record file: its items are `Record`s; `header` is its attributes.
#[pyclass(module = "swdaq", extends = File, unsendable)]
pub struct RecordFile {}

#[pymethods]
impl RecordFile {
    /// `(trigger_number, sequence_number)` of every record, in order.
    fn record_ids(slf: PyRef<'_, Self>) -> PyResult<Vec<(u64, u16)>> {
        let reader = slf.as_super().reader_as::<RecordReader>()?;
        Ok(reader
            .ids
            .iter()
            .map(|id| (id.trigger_number, id.sequence_number))
            .collect())
    }

    /// One record by trigger (and sequence) number.
    #[pyo3(signature = (trigger_number, sequence_number = 0))]
    fn record(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        trigger_number: u64,
        sequence_number: u16,
    ) -> PyResult<Record> {
        let file = slf.as_super();
        let reader = file.reader_as::<RecordReader>()?;
        let id = file.find(
            &reader.ids,
            |id| id.trigger_number == trigger_number && id.sequence_number == sequence_number,
            format_args!("record {trigger_number}.{sequence_number}"),
        )?;
        reader.read(py, id)
    }
}

/// One trigger record: its header's fields and its fragments, ordered by source and type.
#[pyclass(module = "swdaq", get_all, frozen)]
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
    /// Each fragment that could not be read or parsed (left out of `fragments`), with why:
    /// `fragment DATASET: reason`.
    problems: Vec<String>,
}

#[pymethods]
impl Record {
    /// False when the builder flagged the record incomplete (a requested fragment missing).
    #[getter]
    fn complete(&self) -> bool {
        self.status_bits & record_status::INCOMPLETE == 0
    }

    /// Every fragment read, none with an error bit set.
    #[getter]
    fn ok(&self) -> bool {
        self.problems.is_empty() && self.fragments.iter().all(|f| f.get().ok())
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.Record(trigger {}.{}, {} fragments{}{})",
            self.trigger_number,
            self.sequence_number,
            self.fragments.len(),
            if self.complete() { "" } else { ", incomplete" },
            if self.ok() { "" } else { ", BAD" }
        )
    }
}

/// One fragment: its header's fields, its payload, and its content decoded on demand.
#[pyclass(module = "swdaq", frozen)]
pub struct Fragment {
    header: FragmentHeader,
    /// Header and payload.
    bytes: Py<Buffer>,
}

impl Fragment {
    fn from_bytes(py: Python<'_>, bytes: Vec<u8>) -> PyResult<Self> {
        let header = ParsedFragment::parse(&bytes)
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .header;
        Ok(Self {
            header,
            bytes: Buffer::owned(py, bytes)?,
        })
    }

    fn payload_bytes(&self) -> &[u8] {
        &self.bytes.get().as_slice()[FRAGMENT_HEADER_SIZE..]
    }

    fn matrix(&self) -> PyResult<AdcMatrix> {
        let kind = self.header.fragment_type;
        adcs::matrix(kind, adc_matrix(kind, self.payload_bytes()))
    }

    fn refuse_unless(&self, kind: FragmentType, what: &str) -> PyResult<()> {
        if self.header.fragment_type == kind {
            return Ok(());
        }
        Err(PyValueError::new_err(format!(
            "a {} fragment carries no {what}",
            self.header.fragment_type.name()
        )))
    }
}

/// A board frame as Python sees it: timestamp, source id, flags, payload view.
type BoardSlice<'py> = (u64, u32, u32, Bound<'py, PyArray1<u8>>);

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

    /// No error bit set.
    #[getter]
    fn ok(&self) -> bool {
        self.header.error_bits == 0
    }

    /// The names of the error bits set (`swdaq inspect`'s `errors`), e.g. `DataNotFound`.
    #[getter]
    fn problems(&self) -> Vec<&'static str> {
        fragment_error::names(self.header.error_bits)
    }

    /// The payload after the 72-byte fragment header: a read-only uint8 view, no copy.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let bytes = self.bytes.bind(py);
        view(bytes, FRAGMENT_HEADER_SIZE..bytes.get().as_slice().len())
    }

    /// ADCs of a WIBEth or ProtoDUNE WIB fragment, uint16 `[channel, sample]` (the frame's
    /// channel order); ValueError for other fragment types or a partial frame.
    fn adcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        adcs::values(py, self.matrix()?)
    }

    /// The timestamp of every sample of `adcs()`, uint64 clock ticks.
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(adcs::timestamps(py, self.matrix()?))
    }

    /// The regions of interest of an ROI fragment (ROI readout), in the order stored;
    /// ValueError for other fragment types.
    fn regions(&self) -> PyResult<Vec<roi::Region>> {
        self.refuse_unless(FragmentType::ROI, "regions of interest")?;
        roi::regions(self.payload_bytes())
    }

    /// The size this ROI fragment would have had with every frame of its window.
    #[getter]
    fn full_window_bytes(&self) -> PyResult<u64> {
        self.refuse_unless(FragmentType::ROI, "regions of interest")?;
        roi::full_window_bytes(self.payload_bytes())
    }

    /// The time slices of a streaming board's fragment (`Detector_Frames`), in order: each
    /// `(timestamp, source_id, flags, payload)`, the payload a read-only uint8 view of the
    /// slice's bytes as the board's decoder delimited them. ValueError for other fragment
    /// types, or naming a damaged frame and how many good ones came before it.
    fn board_frames<'py>(&self, py: Python<'py>) -> PyResult<Vec<BoardSlice<'py>>> {
        self.refuse_unless(FragmentType::DETECTOR_FRAMES, "board frames")?;
        let bytes = self.bytes.bind(py);
        let mut out = Vec::new();
        for frame in board_frame::frames(self.payload_bytes()) {
            let (offset, frame) = frame.map_err(|e| {
                PyValueError::new_err(format!("{e} (after {} good frames)", out.len()))
            })?;
            let start = FRAGMENT_HEADER_SIZE + offset + board_frame::BOARD_FRAME_HEADER_SIZE;
            let payload = view(bytes, start..start + frame.payload.len())?;
            out.push((frame.timestamp, frame.source_id, frame.flags, payload));
        }
        Ok(out)
    }

    /// Trigger primitives of a TP fragment as a structured array of `swdaq.TP_DTYPE`.
    fn tps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.refuse_unless(FragmentType::TRIGGER_PRIMITIVE, "trigger primitives")?;
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
