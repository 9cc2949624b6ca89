//! The crate's error type: every failure, of the disk, of HDF5 or of the data, is one of these.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("HDF5 error on {path}: {source}")]
    Hdf5 { path: PathBuf, source: hdf5::Error },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "not enough free space in {dir}: {available} bytes left, a record needs {needed} plus the {reserve}-byte reserve"
    )]
    NoSpace {
        dir: PathBuf,
        available: u64,
        needed: u64,
        reserve: u64,
    },
    #[error("{path}: malformed content: {source}")]
    Format {
        path: PathBuf,
        source: swdaq_format::FormatError,
    },
    #[error("{path}: {what}")]
    Layout { path: PathBuf, what: String },
    #[error("{path}: {record} is already in the file")]
    Duplicate { path: PathBuf, record: String },
    #[error("event display: {0}")]
    Display(String),
}

impl StoreError {
    /// Whether the error is the record's own (malformed fragment, duplicate record): the
    /// writer is fine and can take the next record.
    pub fn is_record_error(&self) -> bool {
        matches!(self, Self::Format { .. } | Self::Duplicate { .. })
    }

    /// What went wrong, without the file's path (for a report that already names the file).
    pub fn reason(&self) -> String {
        match self {
            Self::Hdf5 { source, .. } => source.to_string(),
            Self::Io { what, source, .. } => format!("{what}: {source}"),
            Self::Format { source, .. } => format!("malformed content: {source}"),
            Self::Layout { what, .. } => what.clone(),
            Self::Duplicate { record, .. } => format!("{record} is already in the file"),
            Self::NoSpace { .. } | Self::Display(_) => self.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Attaches the file path to HDF5 errors.
pub(crate) trait AtPath<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> AtPath<T> for hdf5::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| StoreError::Hdf5 {
            path: path.to_path_buf(),
            source,
        })
    }
}
