//! ATLAS EventStorage files (the SW ROD run's storage, or ATLAS's own SFOs): full events ->
//! ROB fragments -> e-link chunks. The file is mapped once and checked as `swdaq inspect`
//! checks it (`swdaq_swrod::inspect`): every good event listed, every bad one or damaged
//! span named in `problems` with the same words.

use crate::buffer::{Buffer, view};
use crate::file::{File, Reader, to_python};
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::Serialize;
use std::any::Any;
use std::path::Path;
use swdaq_format::eformat::{ChunkRecords, RobFragment as ParsedRob, status};
use swdaq_format::eformat_event::FullEvent;
use swdaq_swrod::inspect::{EndSummary, EventStorageReport, EventSummary, HeadSummary};

/// An EventStorage data separator's bytes, before its event.
const SEPARATOR_BYTES: usize = 16;

/// An EventStorage file mapped, with `swdaq inspect`'s report of it.
pub struct EventStorageReader {
    bytes: Py<Buffer>,
    report: EventStorageReport,
}

/// `header`: the file's head and its end record, as inspect reads them.
#[derive(Serialize)]
struct Header<'a> {
    head: &'a Option<HeadSummary>,
    end: &'a Option<EndSummary>,
}

impl EventStorageReader {
    pub fn open(py: Python<'_>, path: &Path) -> PyResult<Self> {
        let bytes = Buffer::map(py, path)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let report = swdaq_swrod::inspect::inspect(bytes.get(), &name, None);
        Ok(Self { bytes, report })
    }

    fn event(&self, py: Python<'_>, summary: &EventSummary) -> PyResult<AtlasEvent> {
        let file = self.bytes.get().as_slice();
        let start = summary.offset + SEPARATOR_BYTES;
        let data = file.get(start..start + summary.bytes).unwrap_or_default();
        // The report was made from these very bytes: a listed event parses where it was found.
        let event = FullEvent::parse(data).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut fragments = Vec::new();
        for rob in event.robs() {
            let rob = rob.map_err(|e| PyValueError::new_err(e.to_string()))?;
            fragments.push(Py::new(
                py,
                RobFragment::of(&rob, file, event.header.l1_id, &self.bytes, py),
            )?);
        }
        let h = event.header;
        Ok(AtlasEvent {
            offset: start,
            size: summary.bytes,
            block: summary.block,
            global_id: h.global_id,
            run_number: h.run_number,
            lumi_block: h.lumi_block,
            l1_id: h.l1_id,
            bc_id: h.bc_id,
            l1_trigger_type: h.l1_trigger_type,
            status: event.status().collect(),
            streams: summary.streams.clone(),
            missing_robs: summary.missing_robs.clone(),
            problems: self
                .report
                .problems
                .iter()
                .filter(|p| p.offset == summary.offset)
                .map(|p| p.reason.clone())
                .collect(),
            fragments,
            bytes: self.bytes.clone_ref(py),
        })
    }
}

impl Reader for EventStorageReader {
    fn len(&self) -> usize {
        self.report.events.len()
    }

    fn item(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        let event = self.event(py, &self.report.events[index])?;
        Ok(Py::new(py, event)?.into_any())
    }

    /// `head` (file number, application, name core, metadata, run number, luminosity block,
    /// stream; None when it does not read) and `end` (the end record's counts; None for a
    /// file its writer never closed).
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let header = Header {
            head: &self.report.head,
            end: &self.report.end,
        };
        to_python(py, &header)
    }

    /// Damaged spans, bad events, counts that disagree with the events found, a name that
    /// disagrees with the head: `offset`, `bytes`, `block`, `l1_id` and `reason`.
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_python(py, &self.report.problems)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An ATLAS EventStorage file: its items are `AtlasEvent`s, every good event in file order
/// (a bad event or damaged span is named in `problems` and the rest still listed);
/// `header` is its head and end record.
#[pyclass(module = "swdaq", extends = File, unsendable)]
pub struct AtlasFile {}

#[pymethods]
impl AtlasFile {
    /// The first event with level-1 id `l1_id`.
    fn event(slf: PyRef<'_, Self>, py: Python<'_>, l1_id: u32) -> PyResult<AtlasEvent> {
        let file = slf.as_super();
        let reader = file.reader_as::<EventStorageReader>()?;
        let summary = file.find(
            &reader.report.events,
            |e| e.l1_id == l1_id,
            format_args!("event with L1 ID {l1_id}"),
        )?;
        reader.event(py, summary)
    }
}

/// One eformat v5 full event: its header's fields and its ROB fragments in file order.
#[pyclass(module = "swdaq", frozen)]
pub struct AtlasEvent {
    /// Where the full event starts in the file (after its data separator).
    #[pyo3(get)]
    offset: usize,
    /// The full event's bytes.
    #[pyo3(get)]
    size: usize,
    /// The data separator's block number.
    #[pyo3(get)]
    block: u32,
    #[pyo3(get)]
    global_id: u64,
    #[pyo3(get)]
    run_number: u32,
    #[pyo3(get)]
    lumi_block: u32,
    #[pyo3(get)]
    l1_id: u32,
    #[pyo3(get)]
    bc_id: u32,
    #[pyo3(get)]
    l1_trigger_type: u32,
    /// The full event's status words.
    #[pyo3(get)]
    status: Vec<u32>,
    /// Each stream tag's `type_name`.
    #[pyo3(get)]
    streams: Vec<String>,
    /// Source ids of the ROBs not collected (stand-ins carrying no data).
    #[pyo3(get)]
    missing_robs: Vec<u32>,
    /// What `swdaq inspect` finds wrong with it.
    #[pyo3(get)]
    problems: Vec<String>,
    #[pyo3(get)]
    fragments: Vec<Py<RobFragment>>,
    bytes: Py<Buffer>,
}

#[pymethods]
impl AtlasEvent {
    /// A ROB is missing, or one lacks e-links (the SW ROD's `MissingElinks` status bit).
    #[getter]
    fn incomplete(&self) -> bool {
        self.fragments.iter().any(|f| {
            let f = f.get();
            f.missing() || f.first_status() & status::MISSING_ELINKS != 0
        })
    }

    /// Nothing wrong found with it and every ROB fragment ok.
    #[getter]
    fn ok(&self) -> bool {
        self.problems.is_empty() && self.fragments.iter().all(|f| f.get().ok())
    }

    /// The whole full event (header and ROBs): a read-only uint8 view.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        view(self.bytes.bind(py), self.offset..self.offset + self.size)
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.AtlasEvent(global id {} L1 ID {} LB {}, {} ROBs, {} bytes{}{})",
            self.global_id,
            self.l1_id,
            self.lumi_block,
            self.fragments.len(),
            self.size,
            if self.missing_robs.is_empty() {
                String::new()
            } else {
                format!(", {} missing", self.missing_robs.len())
            },
            if self.ok() { "" } else { ", BAD" }
        )
    }
}

/// One ROB fragment and its ROD: header fields, status words, and its ROD data.
#[pyclass(module = "swdaq", frozen)]
pub struct RobFragment {
    #[pyo3(get)]
    source_id: u32,
    /// The ROB status words (the first: eformat's generic bits, the upper half the SW ROD's).
    #[pyo3(get)]
    status: Vec<u32>,
    #[pyo3(get)]
    rod_source_id: u32,
    #[pyo3(get)]
    run_number: u32,
    #[pyo3(get)]
    l1_id: u32,
    #[pyo3(get)]
    bc_id: u32,
    #[pyo3(get)]
    l1_trigger_type: u32,
    #[pyo3(get)]
    detector_event_type: u32,
    /// The level-1 id of the event it is in.
    event_l1_id: u32,
    /// Where its ROD data starts in the file, and its bytes.
    data_offset: usize,
    data_size: usize,
    bytes: Py<Buffer>,
}

impl RobFragment {
    fn of(
        rob: &ParsedRob<'_>,
        file: &[u8],
        event_l1_id: u32,
        bytes: &Py<Buffer>,
        py: Python<'_>,
    ) -> Self {
        // `rob.data` lies inside `file` (the event was parsed from it): its offset is the
        // distance between their starts.
        let data_offset = rob.data.as_ptr() as usize - file.as_ptr() as usize;
        Self {
            source_id: rob.source_id,
            status: rob.status().collect(),
            rod_source_id: rob.rod.source_id,
            run_number: rob.rod.run_number,
            l1_id: rob.rod.l1_id,
            bc_id: rob.rod.bc_id,
            l1_trigger_type: rob.rod.l1_trigger_type,
            detector_event_type: rob.rod.detector_event_type,
            event_l1_id,
            data_offset,
            data_size: rob.data.len(),
            bytes: bytes.clone_ref(py),
        }
    }

    fn first_status(&self) -> u32 {
        self.status.first().copied().unwrap_or(0)
    }
}

#[pymethods]
impl RobFragment {
    /// A stand-in for a ROB that was not collected (`DUMMY_FRAGMENT`): it has no data.
    #[getter]
    fn missing(&self) -> bool {
        self.first_status() & status::DUMMY_FRAGMENT != 0
    }

    /// The names of the status bits set in its first status word (empty: a clean fragment).
    #[getter]
    fn status_names(&self) -> Vec<&'static str> {
        status::names(self.first_status())
    }

    /// Its ROD data's bytes.
    #[getter]
    fn size(&self) -> usize {
        self.data_size
    }

    /// It carries its event's level-1 id (a stand-in carries the event's too).
    #[getter]
    fn ok(&self) -> bool {
        self.problems().is_empty()
    }

    #[getter]
    fn problems(&self) -> Vec<String> {
        if self.l1_id == self.event_l1_id {
            Vec::new()
        } else {
            vec![format!(
                "ROD L1 ID {}, its event's is {}",
                self.l1_id, self.event_l1_id
            )]
        }
    }

    /// The ROD data words: a read-only uint8 view, no copy.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        view(
            self.bytes.bind(py),
            self.data_offset..self.data_offset + self.data_size,
        )
    }

    /// A SW ROD fragment's e-link chunks in order: (e-link, read-only uint8 view of the
    /// chunk). A record that overruns the data raises `ValueError`, and so does data a
    /// detector's aggregation plugin laid out (`DetectorPayload`: read `payload()`).
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u16, Bound<'py, PyArray1<u8>>)>> {
        if self.first_status() & status::DETECTOR_PAYLOAD != 0 {
            return Err(PyValueError::new_err(
                "this ROB fragment's data is its detector's aggregation plugin's layout, not \
                 swdaq's chunk records: read it with payload()",
            ));
        }
        let buffer = self.bytes.bind(py);
        let file = buffer.get().as_slice();
        let data = &file[self.data_offset..self.data_offset + self.data_size];
        let mut chunks = Vec::new();
        for chunk in ChunkRecords::new(data) {
            let chunk = chunk.map_err(|e| PyValueError::new_err(e.to_string()))?;
            let at = chunk.data.as_ptr() as usize - file.as_ptr() as usize;
            chunks.push((chunk.elink, view(buffer, at..at + chunk.data.len())?));
        }
        Ok(chunks)
    }

    fn __repr__(&self) -> String {
        let names = self.status_names();
        format!(
            "swdaq.RobFragment(0x{:08x} L1 ID {}, {} bytes{})",
            self.source_id,
            self.l1_id,
            self.data_size,
            if names.is_empty() {
                String::new()
            } else {
                format!(", {}", names.join("|"))
            }
        )
    }
}
