//! `swdaq.open` and what every file object shares: the format told from the file's first
//! bytes (the detection `swdaq inspect` uses), its items in file order by index or
//! iteration, its header and its problems as `swdaq inspect --json` lists them. Each format's
//! reader ([`Reader`]) fills them in; its subclass of [`File`] adds what only it has.

use crate::buffer::os_error;
use crate::{atlas, frd, link, records};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use serde::Serialize;
use std::any::Any;
use std::path::PathBuf;
use swdaq_format::file_kind::{Detected, FileKind, detect_path};

/// One format's reader, behind [`File`].
pub trait Reader {
    /// How many items (records, events, frames) the file holds.
    fn len(&self) -> usize;
    /// The item at `index` (below [`Reader::len`]).
    fn item(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>>;
    /// The file's own fields: HDF5 attributes, the FRD file header, the raw file header.
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;
    /// Everything wrong with the file, each a dict as `swdaq inspect --json` lists it.
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;
    fn as_any(&self) -> &dyn Any;
}

/// Any file swdaq writes, opened by `swdaq.open`: `len(f)` items (trigger records, events or
/// frames) in file order, `f[i]` (negative from the end) and iteration; `with swdaq.open(p)
/// as f:` closes it at the end. Every item has `fragments`, `ok` and `problems`; every
/// fragment `payload()` (a read-only numpy view of its bytes, no copy), `size`, `ok` and
/// `problems`, beside its format's header fields.
#[pyclass(module = "swdaq", subclass, unsendable)]
pub struct File {
    path: PathBuf,
    detected: Detected,
    reader: Option<Box<dyn Reader>>,
}

impl File {
    fn reader(&self) -> PyResult<&dyn Reader> {
        self.reader
            .as_deref()
            .ok_or_else(|| PyValueError::new_err(format!("{} is closed", self.path.display())))
    }

    /// The reader of the subclass asking.
    pub fn reader_as<T: 'static>(&self) -> PyResult<&T> {
        self.reader()?
            .as_any()
            .downcast_ref()
            .ok_or_else(|| PyValueError::new_err("a file object of another format"))
    }

    /// The first of `items` (the reader's listing) that `matches`, or an `IndexError`
    /// saying the file holds no `what`.
    pub fn find<'a, T>(
        &self,
        items: &'a [T],
        matches: impl Fn(&T) -> bool,
        what: std::fmt::Arguments<'_>,
    ) -> PyResult<&'a T> {
        items
            .iter()
            .find(|item| matches(item))
            .ok_or_else(|| PyIndexError::new_err(format!("no {what} in {}", self.path.display())))
    }

    /// `index` counted from the end when negative, checked against the length.
    fn position(&self, index: isize) -> PyResult<usize> {
        let len = self.reader()?.len();
        let at = if index < 0 {
            index.checked_add_unsigned(len)
        } else {
            Some(index)
        };
        at.and_then(|at| usize::try_from(at).ok())
            .filter(|&at| at < len)
            .ok_or_else(|| PyIndexError::new_err(format!("index {index} of {len} items")))
    }
}

#[pymethods]
impl File {
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The format the file was read as, in `swdaq inspect`'s words (its `format` in `--json`).
    #[getter]
    fn format(&self) -> &'static str {
        self.detected.kind.describe()
    }

    /// The suffix of a file its writer never closed (`.tmp`, `.writing`, `.part`), else None.
    #[getter]
    fn left_open(&self) -> Option<&'static str> {
        self.detected.left_open
    }

    /// The file's own fields (see each format's class).
    #[getter]
    fn header(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.reader()?.header(py)
    }

    /// Everything wrong with the file, each a dict as `swdaq inspect --json` lists it under
    /// `problems`; empty for a good file.
    #[getter]
    fn problems(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.reader()?.problems(py)
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.reader()?.len())
    }

    fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<Py<PyAny>> {
        let at = self.position(index)?;
        self.reader()?.item(py, at)
    }

    fn __iter__(slf: Bound<'_, Self>) -> Items {
        Items {
            file: slf.unbind(),
            next: 0,
        }
    }

    /// Lets the file go; views and items already taken keep what they need.
    fn close(&mut self) {
        self.reader = None;
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
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
        match &self.reader {
            Some(r) => format!(
                "swdaq.open({:?}): {}, {} items",
                self.path,
                self.format(),
                r.len()
            ),
            None => format!("swdaq.open({:?}): closed", self.path),
        }
    }
}

/// Iteration over a file's items.
#[pyclass(module = "swdaq", unsendable)]
pub struct Items {
    file: Py<File>,
    next: usize,
}

#[pymethods]
impl Items {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let file = self.file.borrow(py);
        let reader = file.reader()?;
        if self.next >= reader.len() {
            return Ok(None);
        }
        self.next += 1;
        reader.item(py, self.next - 1).map(Some)
    }
}

/// Opens any file swdaq writes, its format told from its first bytes as `swdaq inspect`
/// tells it: an HDF5 trigger-record file (`RecordFile`), a CMS FRD file (`FrdFile`, its
/// header damaged or not), a swdaq raw file of link frames (`LinkFile`), an ATLAS
/// EventStorage file (`AtlasFile`). A file that is
/// missing or unreadable raises `OSError`; a directory, an empty file or one of no known
/// format `ValueError` with `swdaq inspect`'s words.
#[pyfunction]
pub fn open(py: Python<'_>, path: PathBuf) -> PyResult<Py<PyAny>> {
    let detected = detect_path(&path).map_err(|e| os_error(&path, &e))?;
    let base = |reader: Box<dyn Reader>| File {
        path: path.clone(),
        detected,
        reader: Some(reader),
    };
    let file = match detected.kind {
        FileKind::Hdf5 => {
            let reader = records::RecordReader::open(&path)?;
            with_subclass(py, base(Box::new(reader)), records::RecordFile {})?
        }
        FileKind::Frd | FileKind::FrdDamagedHeader => {
            let reader = frd::FrdReader::open(py, &path)?;
            with_subclass(py, base(Box::new(reader)), frd::FrdFile {})?
        }
        FileKind::SwdaqRaw => {
            let reader = link::LinkReader::open(py, &path)?;
            with_subclass(py, base(Box::new(reader)), link::LinkFile {})?
        }
        FileKind::EventStorage => {
            let reader = atlas::EventStorageReader::open(py, &path)?;
            with_subclass(py, base(Box::new(reader)), atlas::AtlasFile {})?
        }
        FileKind::OldSwrodEvents | FileKind::Directory | FileKind::Empty | FileKind::Unknown => {
            return Err(PyValueError::new_err(format!(
                "{}: {}",
                path.display(),
                detected.describe()
            )));
        }
    };
    Ok(file)
}

/// `base` as the Python object of its format's subclass.
fn with_subclass<S>(py: Python<'_>, base: File, subclass: S) -> PyResult<Py<PyAny>>
where
    S: pyo3::PyClass<BaseType = File>,
{
    let init = PyClassInitializer::from(base).add_subclass(subclass);
    Ok(Py::new(py, init)?.into_any())
}

/// `value` as Python objects, the same shape `swdaq inspect --json` prints it in.
pub fn to_python(py: Python<'_>, value: &impl Serialize) -> PyResult<Py<PyAny>> {
    let json = serde_json::to_string(value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
