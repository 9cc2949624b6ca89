//! The bytes every payload view shares: a file mapped once (FRD and link files) or a
//! fragment read out of HDF5. A view is a read-only numpy array over a range of them whose
//! `base` is the [`Buffer`], so the bytes live as long as any view does, whether or not the
//! file, item or fragment it came from is still around.

use numpy::ndarray::ArrayView1;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::ops::Range;
use std::path::Path;
use swdaq_format::input_file::{MappedFile, OnePass};

/// Bytes numpy views share: a mapped file, or one fragment's bytes.
#[pyclass(module = "swdaq", frozen)]
pub struct Buffer {
    bytes: Bytes,
}

enum Bytes {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl Buffer {
    /// Maps the file at `path` read-only; a FIFO would block the open and could not be
    /// mapped: refused, named, at once.
    pub fn map(py: Python<'_>, path: &Path) -> PyResult<Py<Self>> {
        let map = MappedFile::open(path).map_err(|e| os_error(path, &e))?;
        Py::new(
            py,
            Self {
                bytes: Bytes::Mapped(map),
            },
        )
    }

    /// Holds `bytes` (one fragment read out of HDF5).
    pub fn owned(py: Python<'_>, bytes: Vec<u8>) -> PyResult<Py<Self>> {
        Py::new(
            py,
            Self {
                bytes: Bytes::Owned(bytes),
            },
        )
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(map) => map.bytes(),
            Bytes::Owned(bytes) => bytes,
        }
    }
}

/// A format's opening walk hands back the pages of a mapped file behind it: a file with a
/// long zero tail costs its items' memory, not its size. A view's bytes read later map
/// their pages again.
impl OnePass for Buffer {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }

    fn passed(&self, offset: usize) {
        if let Bytes::Mapped(map) = &self.bytes {
            map.passed(offset)
        }
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.as_slice().len()
    }

    fn __repr__(&self) -> String {
        let kind = match self.bytes {
            Bytes::Mapped(_) => "mapped file",
            Bytes::Owned(_) => "fragment",
        };
        format!("swdaq.Buffer({kind}, {} bytes)", self.as_slice().len())
    }
}

/// `range` of `buffer`'s bytes as a read-only uint8 numpy array, without a copy.
pub fn view<'py>(
    buffer: &Bound<'py, Buffer>,
    range: Range<usize>,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let bytes = buffer.get().as_slice().get(range.clone()).ok_or_else(|| {
        PyValueError::new_err(format!(
            "bytes {range:?} lie outside the {} bytes read",
            buffer.get().as_slice().len()
        ))
    })?;
    let bytes = ArrayView1::from(bytes);
    // SAFETY: the array's base is `buffer`, so the bytes must stay valid and in place while
    // `buffer` lives: a Buffer is frozen (its map or vector is never replaced, resized or
    // written after creation), and neither a map nor a vector's heap memory moves (a map's
    // pages handed back by `OnePass::passed` map again, in place, with the same bytes).
    let array = unsafe { PyArray1::borrow_from_array(&bytes, buffer.clone().into_any()) };
    // The memory is read-only (a map) or shared with every other view: numpy must not write.
    array.try_readwrite()?.make_nonwriteable();
    Ok(array)
}

/// An `OSError` of the errno's kind (`FileNotFoundError`, `PermissionError`, ...) naming `path`.
pub fn os_error(path: &Path, e: &std::io::Error) -> PyErr {
    let message = e.to_string();
    match e.raw_os_error() {
        Some(errno) => PyOSError::new_err((errno, message, path.to_path_buf())),
        None => PyOSError::new_err(format!("{}: {message}", path.display())),
    }
}
