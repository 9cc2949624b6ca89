//! CMS FRD files (`RAW_0002` + FRD v6 events, the event builder's output): events -> FED
//! fragments. The file is mapped once and checked as `swdaq inspect` checks it
//! (`swdaq_evb::inspect`): a damaged file is read as far as inspect reads it, every intact
//! event listed and every problem named the same way.

use crate::buffer::{Buffer, view};
use crate::file::{File, Reader, to_python};
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::any::Any;
use std::path::Path;
use swdaq_evb::inspect::{EventSummary, FrdReport};
use swdaq_format::fed::{
    FED_HEADER_SIZE, FED_L1_ID_MASK, FED_TRAILER_SIZE, FedHeader, FedTrailer, fed_crc16,
    fed_fragments,
};
use swdaq_format::fed_detector::{DETECTOR_WORDS_SIZE, DetectorWords, detector_payload};
use swdaq_format::frd::{FRD_EVENT_HEADER_SIZE, FrdEvent as ParsedEvent, frd_flags};

/// An FRD file mapped, with `swdaq inspect`'s report of it.
pub struct FrdReader {
    bytes: Py<Buffer>,
    report: FrdReport,
}

impl FrdReader {
    pub fn open(py: Python<'_>, path: &Path) -> PyResult<Self> {
        let bytes = Buffer::map(py, path)?;
        let report = swdaq_evb::inspect::inspect(bytes.get(), None);
        Ok(Self { bytes, report })
    }

    fn event(&self, py: Python<'_>, summary: &EventSummary) -> PyResult<FrdEvent> {
        let file = self.bytes.get().as_slice();
        // The report was made from these very bytes: the event parses where it was found.
        let (event, _) = ParsedEvent::parse_first(file.get(summary.offset..).unwrap_or_default())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let payload_at = summary.offset + FRD_EVENT_HEADER_SIZE;
        let l1_id = event.header.event & FED_L1_ID_MASK;
        let mut fragments = Vec::new();
        let mut fed_error = None;
        for fed in fed_fragments(event.payload) {
            match fed {
                Ok((at, f)) => fragments.push(Py::new(
                    py,
                    FedFragment {
                        detector: detector_payload(&f)
                            .map(|payload| payload.map(|d| d.words))
                            .map_err(|e| e.to_string()),
                        header: f.header,
                        trailer: f.trailer,
                        computed_crc: fed_crc16(f.bytes),
                        event_l1_id: l1_id,
                        offset: payload_at + at,
                        size: f.bytes.len(),
                        bytes: self.bytes.clone_ref(py),
                    },
                )?),
                Err(e) => fed_error = Some(e.to_string()),
            }
        }
        fragments.reverse();
        let h = event.header;
        Ok(FrdEvent {
            offset: summary.offset,
            number: h.event,
            run: h.run,
            lumi: h.lumi,
            flags: h.flags,
            size: h.event_size,
            crc32c: h.crc32c,
            crc_ok: summary.crc_ok,
            fed_error,
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

impl Reader for FrdReader {
    fn len(&self) -> usize {
        self.report.events.len()
    }

    fn item(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        let event = self.event(py, &self.report.events[index])?;
        Ok(Py::new(py, event)?.into_any())
    }

    /// The `RAW_0002` header: `run`, `lumi`, `event_count` and `file_size` as it declares
    /// them; None when it does not parse (named in `problems`).
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_python(py, &self.report.header)
    }

    /// Damaged spans, events with a bad CRC32C or header fields the CRC does not cover
    /// that disagree, the header against the file: `offset`, `bytes` and `reason`.
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_python(py, &self.report.problems)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A CMS FRD file: its items are `FrdEvent`s, every intact event in file order (a damaged
/// span is skipped to the next intact event and named in `problems`); `header` is its
/// `RAW_0002` header.
#[pyclass(module = "swdaq", extends = File, unsendable)]
pub struct FrdFile {}

#[pymethods]
impl FrdFile {
    /// The first event numbered `number`.
    fn event(slf: PyRef<'_, Self>, py: Python<'_>, number: u32) -> PyResult<FrdEvent> {
        let file = slf.as_super();
        let reader = file.reader_as::<FrdReader>()?;
        let summary = file.find(
            &reader.report.events,
            |e| e.event == number,
            format_args!("event {number}"),
        )?;
        reader.event(py, summary)
    }
}

/// One FRD v6 event: its header's fields and its FED fragments in file order.
#[pyclass(module = "swdaq", frozen)]
pub struct FrdEvent {
    /// Where its header starts in the file.
    #[pyo3(get)]
    offset: usize,
    /// The event number (the level-1 accept it was built for).
    #[pyo3(get)]
    number: u32,
    #[pyo3(get)]
    run: u32,
    #[pyo3(get)]
    lumi: u32,
    #[pyo3(get)]
    flags: u16,
    /// Payload bytes after the 24-byte header.
    #[pyo3(get)]
    size: u32,
    /// The CRC32C its header carries.
    #[pyo3(get)]
    crc32c: u32,
    /// Whether the payload's CRC32C is the header's.
    #[pyo3(get)]
    crc_ok: bool,
    /// Why the FED fragments could not all be read (those after it are listed), else None.
    #[pyo3(get)]
    fed_error: Option<String>,
    /// What `swdaq inspect` finds wrong with it: its CRC32C, header fields against the
    /// file's, unassigned flag bits, a level-1 id none of its FEDs carries.
    #[pyo3(get)]
    problems: Vec<String>,
    #[pyo3(get)]
    fragments: Vec<Py<FedFragment>>,
    bytes: Py<Buffer>,
}

#[pymethods]
impl FrdEvent {
    /// swdaq's flag: a readout unit's data is missing.
    #[getter]
    fn incomplete(&self) -> bool {
        self.flags & frd_flags::INCOMPLETE != 0
    }

    /// Nothing wrong found with it, every FED fragment read and every one ok.
    #[getter]
    fn ok(&self) -> bool {
        self.problems.is_empty()
            && self.fed_error.is_none()
            && self.fragments.iter().all(|f| f.get().ok())
    }

    /// The FED data after the header (every fragment back to back): a read-only uint8 view.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let start = self.offset + FRD_EVENT_HEADER_SIZE;
        view(self.bytes.bind(py), start..start + self.size as usize)
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.FrdEvent({} lumi {}, {} FEDs, {} bytes{}{})",
            self.number,
            self.lumi,
            self.fragments.len(),
            self.size,
            if self.incomplete() {
                ", incomplete"
            } else {
                ""
            },
            if self.ok() { "" } else { ", BAD" }
        )
    }
}

/// One FED fragment: its header and trailer words' fields, its CRC-16 checked.
#[pyclass(module = "swdaq", frozen)]
pub struct FedFragment {
    header: FedHeader,
    trailer: FedTrailer,
    computed_crc: u16,
    /// The level-1 id of the event it is in (24 bits of its number).
    event_l1_id: u32,
    offset: usize,
    size: usize,
    bytes: Py<Buffer>,
    /// A detector's own payload words (`fed_detector`), or why they cannot be believed.
    detector: Result<Option<DetectorWords>, String>,
}

#[pymethods]
impl FedFragment {
    /// The FED id (12 bits).
    #[getter]
    fn source_id(&self) -> u16 {
        self.header.source_id
    }

    /// The level-1 accept number (24 bits).
    #[getter]
    fn l1_id(&self) -> u32 {
        self.header.l1_id
    }

    /// The bunch crossing (12 bits).
    #[getter]
    fn bx_id(&self) -> u16 {
        self.header.bx_id
    }

    #[getter]
    fn event_type(&self) -> u8 {
        self.header.event_type
    }

    /// The header's format version.
    #[getter]
    fn version(&self) -> u8 {
        self.header.version
    }

    /// Where its header word starts in the file.
    #[getter]
    fn offset(&self) -> usize {
        self.offset
    }

    /// Header, payload and trailer, in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// The CRC-16 its trailer carries.
    #[getter]
    fn crc(&self) -> u16 {
        self.trailer.crc
    }

    /// Whether the fragment's CRC-16 is its trailer's.
    #[getter]
    fn crc_ok(&self) -> bool {
        self.computed_crc == self.trailer.crc
    }

    #[getter]
    fn event_status(&self) -> u8 {
        self.trailer.event_status
    }

    /// The trigger-throttling state.
    #[getter]
    fn tts(&self) -> u8 {
        self.trailer.tts
    }

    #[getter]
    fn slink_error(&self) -> bool {
        self.trailer.slink_error
    }

    #[getter]
    fn wrong_fed_id(&self) -> bool {
        self.trailer.wrong_fed_id
    }

    #[getter]
    fn crc_modified(&self) -> bool {
        self.trailer.crc_modified
    }

    /// Its CRC-16 checks and it carries its event's level-1 id.
    #[getter]
    fn ok(&self) -> bool {
        self.problems().is_empty()
    }

    /// What is wrong with it (`swdaq inspect` counts these as the event's bad FEDs).
    #[getter]
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.crc_ok() {
            problems.push(format!(
                "CRC-16 0x{:04x} computed, its trailer says 0x{:04x}",
                self.computed_crc, self.trailer.crc
            ));
        }
        if self.header.l1_id != self.event_l1_id {
            problems.push(format!(
                "level-1 id {}, its event's is {}",
                self.header.l1_id, self.event_l1_id
            ));
        }
        if let Err(error) = &self.detector {
            problems.push(error.clone());
        }
        problems
    }

    /// A detector's own payload (a front end decoded by a plugin or a packet format): its
    /// bytes without padding, a read-only uint8 view; `None` for any other FED's payload.
    fn detector_payload<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray1<u8>>>> {
        let Ok(Some(words)) = &self.detector else {
            return Ok(None);
        };
        let start = self.offset + FED_HEADER_SIZE + DETECTOR_WORDS_SIZE;
        view(self.bytes.bind(py), start..start + words.payload_bytes).map(Some)
    }

    /// The detector's timestamp, when its decoder gave one.
    #[getter]
    fn detector_timestamp(&self) -> Option<u64> {
        self.detector
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|w| w.timestamp())
    }

    /// The decoder's flags (`SWDAQ_FRAGMENT_*`, the detector's own in bits 16..32), for a
    /// detector's own payload.
    #[getter]
    fn detector_flags(&self) -> Option<u32> {
        self.detector
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|w| w.flags)
    }

    /// The words between header and trailer: a read-only uint8 view, no copy.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let start = self.offset + FED_HEADER_SIZE;
        view(
            self.bytes.bind(py),
            start..self.offset + self.size - FED_TRAILER_SIZE,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "swdaq.FedFragment(FED {} L1 id {} BX {}, {} bytes, crc16 {})",
            self.header.source_id,
            self.header.l1_id,
            self.header.bx_id,
            self.size,
            if self.crc_ok() { "ok" } else { "BAD" }
        )
    }
}
