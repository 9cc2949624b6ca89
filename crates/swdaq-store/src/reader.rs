//! Reads swdaq HDF5 files back: file attributes, record names, whole records.

use crate::error::{AtPath, Result, StoreError};
use crate::layout::{self, attr};
use hdf5::types::VarLenUnicode;
use serde::Serialize;
use std::path::{Path, PathBuf};
use swdaq_format::{TriggerRecord, TriggerRecordHeader};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileAttributes {
    pub run_number: u32,
    pub file_index: u32,
    pub creation_timestamp_ms: u64,
    /// Absent while a file is still being written.
    pub closing_timestamp_ms: Option<u64>,
    pub recorded_size: Option<u64>,
    pub application_name: String,
    pub record_type: String,
    pub layout_version: u32,
}

pub struct RecordFileReader {
    file: hdf5::File,
    path: PathBuf,
}

impl RecordFileReader {
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            file: hdf5::File::open(path).at(path)?,
            path: path.to_path_buf(),
        })
    }

    fn scalar<T: hdf5::H5Type>(&self, name: &str) -> Result<T> {
        self.file
            .attr(name)
            .and_then(|a| a.read_scalar())
            .at(&self.path)
    }

    fn text(&self, name: &str) -> Result<String> {
        Ok(self.scalar::<VarLenUnicode>(name)?.as_str().to_string())
    }

    pub fn attributes(&self) -> Result<FileAttributes> {
        Ok(FileAttributes {
            run_number: self.scalar(attr::RUN_NUMBER)?,
            file_index: self.scalar(attr::FILE_INDEX)?,
            creation_timestamp_ms: self.scalar(attr::CREATION_TIMESTAMP)?,
            closing_timestamp_ms: self.scalar(attr::CLOSING_TIMESTAMP).ok(),
            recorded_size: self.scalar(attr::RECORDED_SIZE).ok(),
            application_name: self.text(attr::APPLICATION_NAME)?,
            record_type: self.text(attr::RECORD_TYPE)?,
            layout_version: self.scalar(attr::LAYOUT_VERSION)?,
        })
    }

    /// Record group names, in trigger-number order.
    pub fn record_names(&self) -> Result<Vec<String>> {
        let mut names = self.file.member_names().at(&self.path)?;
        names.retain(|n| n.starts_with(layout::RECORD_TYPE));
        names.sort();
        Ok(names)
    }

    /// Reads record `name` whole: its header and every fragment, each checked to parse.
    pub fn read_record(&self, name: &str) -> Result<TriggerRecord> {
        let group = self.file.group(name).at(&self.path)?;
        let header_bytes = group
            .dataset(layout::RECORD_HEADER_DATASET)
            .and_then(|d| d.read_raw::<u8>())
            .at(&self.path)?;
        let header =
            TriggerRecordHeader::decode(&header_bytes).map_err(|source| self.format(source))?;
        let raw = group.group(layout::RAW_DATA_GROUP).at(&self.path)?;
        let mut fragments = Vec::new();
        for dataset in raw.member_names().at(&self.path)? {
            let bytes = raw
                .dataset(&dataset)
                .and_then(|d| d.read_raw::<u8>())
                .at(&self.path)?;
            swdaq_format::Fragment::parse(&bytes).map_err(|source| self.format(source))?;
            fragments.push(bytes);
        }
        Ok(TriggerRecord { header, fragments })
    }

    fn format(&self, source: swdaq_format::FormatError) -> StoreError {
        StoreError::Format {
            path: self.path.clone(),
            source,
        }
    }
}
