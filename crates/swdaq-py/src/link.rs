//! swdaq raw files of one link's frames (`.swraw`: `swdaq gen`, recorded bursts): frames ->
//! ADCs. The file is mapped once and walked as `swdaq inspect` walks it
//! (`swdaq_readout::raw_inspect::walk_raw`): the same frames, each with what the readout's
//! continuity checks found, and reading stops where inspect's does.

use crate::adcs;
use crate::buffer::{Buffer, view};
use crate::file::{File, Reader, to_python};
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::any::Any;
use std::path::Path;
use swdaq_format::FragmentType;
use swdaq_format::adc_matrix::{AdcMatrix, adc_matrix_of_frames};
use swdaq_format::rawfile::RECORD_HEADER_SIZE;
use swdaq_readout::checks::Verdict;
use swdaq_readout::raw_inspect::{RawInspection, walk_raw};

/// Where one frame lies, and what the checks found.
struct FrameEntry {
    /// Its record header's offset in the file.
    offset: usize,
    len: usize,
    verdict: Option<Verdict>,
    /// What the walk of a FELIX block found (`swdaq inspect`'s findings for it).
    felix_findings: Vec<&'static str>,
}

/// A raw file mapped, with `swdaq inspect`'s report of it and where every frame lies.
pub struct LinkReader {
    bytes: Py<Buffer>,
    inspection: RawInspection,
    frames: Vec<FrameEntry>,
}

impl LinkReader {
    pub fn open(py: Python<'_>, path: &Path) -> PyResult<Self> {
        let bytes = Buffer::map(py, path)?;
        let mut frames = Vec::new();
        let inspection = walk_raw(bytes.get().as_slice(), |record| {
            frames.push(FrameEntry {
                offset: record.offset as usize,
                len: record.frame.len(),
                verdict: record.verdict,
                felix_findings: record.felix_findings.to_vec(),
            })
        })
        .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
        Ok(Self {
            bytes,
            inspection,
            frames,
        })
    }

    fn fragment_type(&self) -> FragmentType {
        FragmentType(self.inspection.fragment_type)
    }

    fn frame_bytes(&self, entry: &FrameEntry) -> &[u8] {
        let start = entry.offset + RECORD_HEADER_SIZE;
        // The walk read this frame from these very bytes.
        let frame = self.bytes.get().as_slice().get(start..start + entry.len);
        frame.unwrap_or_default()
    }

    /// The ADCs of frames `start..stop` as one matrix.
    fn matrix(&self, start: Option<isize>, stop: Option<isize>) -> PyResult<AdcMatrix> {
        let len = self.frames.len();
        let start = slice_end(len, start, 0);
        let stop = slice_end(len, stop, len).max(start);
        let frames: Vec<&[u8]> = self.frames[start..stop]
            .iter()
            .map(|e| self.frame_bytes(e))
            .collect();
        let kind = self.fragment_type();
        adcs::matrix(kind, adc_matrix_of_frames(kind, &frames))
    }
}

/// Where a Python slice bound `at` falls in `len` items (`default` when not given).
fn slice_end(len: usize, at: Option<isize>, default: usize) -> usize {
    match at {
        None => default,
        Some(at) if at < 0 => len.saturating_sub(at.unsigned_abs()),
        Some(at) => at.unsigned_abs().min(len),
    }
}

impl Reader for LinkReader {
    fn len(&self) -> usize {
        self.frames.len()
    }

    fn item(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        let entry = &self.frames[index];
        let header = match entry.verdict {
            Some(Verdict::Keep { header, .. }) => Some(header),
            _ => None,
        };
        let frame = Frame {
            index,
            offset: entry.offset,
            size: entry.len,
            timestamp: header.map(|h| h.timestamp),
            seq_id: header.and_then(|h| h.seq_id),
            header_error: header.map(|h| h.header_error),
            missing_before: match entry.verdict {
                Some(Verdict::Keep { missing_before, .. }) => missing_before,
                _ => 0,
            },
            problems: entry
                .verdict
                .map(|v| v.findings())
                .unwrap_or_else(|| entry.felix_findings.clone()),
            fragment_type: self.fragment_type(),
            bytes: self.bytes.clone_ref(py),
        };
        Ok(Py::new(py, frame)?.into_any())
    }

    /// The raw file header: `frame_format` (`wibeth`, `protowib`, None for other records),
    /// `fragment_type`, `frame_size`, `source_id`, `run_number`, `first_timestamp`,
    /// `created_unix_ns`.
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let r = &self.inspection;
        let d = PyDict::new(py);
        d.set_item("frame_format", r.frame_format)?;
        d.set_item("fragment_type", r.fragment_type)?;
        d.set_item("frame_size", r.frame_size)?;
        d.set_item("source_id", &r.source_id)?;
        d.set_item("run_number", r.run_number)?;
        d.set_item("first_timestamp", r.header_first_timestamp)?;
        d.set_item("created_unix_ns", r.created_unix_ns)?;
        Ok(d.into_any().unbind())
    }

    /// Why reading stopped before the end of the file (`swdaq inspect`'s `error`):
    /// `offset` (where the bad record starts), `frame` (its index) and `reason`.
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = PyList::empty(py);
        if let Some(reason) = &self.inspection.error {
            let d = PyDict::new(py);
            d.set_item("offset", self.inspection.bytes)?;
            d.set_item("frame", self.inspection.frames)?;
            d.set_item("reason", reason)?;
            list.append(d)?;
        }
        Ok(list.into_any().unbind())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A swdaq raw file of one link's frames: its items are `Frame`s, in file order; `header`
/// is its raw file header.
#[pyclass(module = "swdaq", extends = File, unsendable)]
pub struct LinkFile {}

#[pymethods]
impl LinkFile {
    /// What the readout's continuity checks counted over every frame (`swdaq inspect`'s
    /// `checks`: frames_ok, missing_frames, timestamp_jumps, sequence_errors,
    /// header_errors, bad_size); None for records other than TPC frames.
    #[getter]
    fn checks(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let reader = slf.as_super().reader_as::<LinkReader>()?;
        to_python(py, &reader.inspection.checks)
    }

    /// ADCs of frames `start..stop` (a slice's bounds, default all) as one uint16
    /// `[channel, sample]` array, as an HDF5 fragment's; ValueError for records other than
    /// TPC frames or a frame of the wrong size in the range.
    #[pyo3(signature = (start = None, stop = None))]
    fn adcs<'py>(
        slf: PyRef<'_, Self>,
        py: Python<'py>,
        start: Option<isize>,
        stop: Option<isize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reader = slf.as_super().reader_as::<LinkReader>()?;
        adcs::values(py, reader.matrix(start, stop)?)
    }

    /// The timestamp of every sample of `adcs(start, stop)`, uint64 clock ticks.
    #[pyo3(signature = (start = None, stop = None))]
    fn timestamps<'py>(
        slf: PyRef<'_, Self>,
        py: Python<'py>,
        start: Option<isize>,
        stop: Option<isize>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let reader = slf.as_super().reader_as::<LinkReader>()?;
        Ok(adcs::timestamps(py, reader.matrix(start, stop)?))
    }
}

/// One frame of a link file. A frame is both the file's item and its own one fragment
/// (`frame.fragments == [frame]`), so a link file has the shape of every other file.
#[pyclass(module = "swdaq", frozen)]
pub struct Frame {
    /// Its index among the file's frames.
    #[pyo3(get)]
    index: usize,
    /// Where its record starts in the file.
    #[pyo3(get)]
    offset: usize,
    /// The frame's bytes (its record's length).
    #[pyo3(get)]
    size: usize,
    /// From the frame's header; None for a frame of the wrong size or other records.
    #[pyo3(get)]
    timestamp: Option<u64>,
    /// The 12-bit sequence id, where the format has one (WIBEth).
    #[pyo3(get)]
    seq_id: Option<u16>,
    /// The front end reported a problem in the header's status bits.
    #[pyo3(get)]
    header_error: Option<bool>,
    /// Frames missing just before it, from the timestamps' step.
    #[pyo3(get)]
    missing_before: u64,
    /// What the continuity checks found (`gap_before`, `timestamp_jump`,
    /// `sequence_error`, `header_error`, `bad_size`), as `swdaq inspect` lists them.
    #[pyo3(get)]
    problems: Vec<&'static str>,
    fragment_type: FragmentType,
    bytes: Py<Buffer>,
}

impl Frame {
    fn range(&self) -> std::ops::Range<usize> {
        let start = self.offset + RECORD_HEADER_SIZE;
        start..start + self.size
    }

    fn matrix(&self) -> PyResult<AdcMatrix> {
        let frame = self
            .bytes
            .get()
            .as_slice()
            .get(self.range())
            .unwrap_or_default();
        adcs::matrix(
            self.fragment_type,
            adc_matrix_of_frames(self.fragment_type, &[frame]),
        )
    }
}

#[pymethods]
impl Frame {
    /// Nothing found by the checks.
    #[getter]
    fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    #[getter]
    fn fragments(slf: Bound<'_, Self>) -> Vec<Bound<'_, Self>> {
        vec![slf]
    }

    /// The frame's bytes, its headers included: a read-only uint8 view, no copy.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        view(self.bytes.bind(py), self.range())
    }

    /// The frame's ADCs, uint16 `[channel, sample]` (64 x 64 WIBEth, 256 x 1 ProtoDUNE WIB).
    fn adcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        adcs::values(py, self.matrix()?)
    }

    /// The timestamp of every sample of `adcs()`, uint64 clock ticks.
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        Ok(adcs::timestamps(py, self.matrix()?))
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.Frame({} at byte {}, timestamp {}{})",
            self.index,
            self.offset,
            self.timestamp.map_or("?".into(), |t| t.to_string()),
            if self.ok() {
                String::new()
            } else {
                format!(": {}", self.problems.join(", "))
            }
        )
    }
}
