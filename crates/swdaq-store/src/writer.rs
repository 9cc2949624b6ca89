//! Writes trigger records to HDF5 files: each file is written as `<name>.writing` and renamed
//! when closed, so a file with its final name is always complete; files roll over by size or
//! record count; free space is checked before each record.

use crate::error::{AtPath, Result, StoreError};
use crate::layout::{self, attr};
use hdf5::types::VarLenUnicode;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use swdaq_format::{FragmentHeader, TriggerRecord};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub directory: PathBuf,
    pub file_prefix: String,
    pub application_name: String,
    pub run_number: u32,
    /// A file is closed once it holds this many bytes of records...
    pub max_file_bytes: u64,
    /// ... or this many records.
    pub max_records_per_file: u64,
    /// Free space that must remain after a record is written.
    pub min_free_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            directory: PathBuf::from("swdaq-data"),
            file_prefix: "swdaq".into(),
            application_name: "swdaq".into(),
            run_number: 1,
            max_file_bytes: 4 << 30,
            max_records_per_file: 100,
            min_free_bytes: 1 << 30,
        }
    }
}

struct OpenFile {
    file: hdf5::File,
    writing: PathBuf,
    done: PathBuf,
    bytes: u64,
    records: u64,
}

/// Synchronous record writer (the writer thread owns one).
pub struct RecordFileWriter {
    config: StoreConfig,
    current: Option<OpenFile>,
    next_index: u32,
    closed: Vec<PathBuf>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn write_attr<T: hdf5::H5Type>(
    loc: &hdf5::Location,
    name: &str,
    value: &T,
    path: &Path,
) -> Result<()> {
    loc.new_attr::<T>()
        .create(name)
        .and_then(|a| a.write_scalar(value))
        .at(path)
}

fn write_bytes(group: &hdf5::Group, name: &str, bytes: &[u8], path: &Path) -> Result<()> {
    let ds = group
        .new_dataset::<u8>()
        .shape(bytes.len())
        .create(name)
        .at(path)?;
    ds.write_raw(bytes).at(path)
}

impl RecordFileWriter {
    pub fn new(config: StoreConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.directory).map_err(|source| StoreError::Io {
            what: "cannot create the output directory",
            path: config.directory.clone(),
            source,
        })?;
        Ok(Self {
            config,
            current: None,
            next_index: 0,
            closed: Vec::new(),
        })
    }

    /// Files closed so far (with their final names).
    pub fn closed_files(&self) -> &[PathBuf] {
        &self.closed
    }

    fn open_next(&mut self) -> Result<&mut OpenFile> {
        let name = layout::file_name(
            &self.config.file_prefix,
            self.config.run_number,
            self.next_index,
        );
        let done = self.config.directory.join(&name);
        let writing = self.config.directory.join(format!("{name}.writing"));
        let file = hdf5::File::create(&writing).at(&writing)?;
        write_attr(&file, attr::RUN_NUMBER, &self.config.run_number, &writing)?;
        write_attr(&file, attr::FILE_INDEX, &self.next_index, &writing)?;
        write_attr(&file, attr::CREATION_TIMESTAMP, &now_ms(), &writing)?;
        write_attr(
            &file,
            attr::LAYOUT_VERSION,
            &layout::LAYOUT_VERSION,
            &writing,
        )?;
        for (name, value) in [
            (attr::APPLICATION_NAME, &self.config.application_name[..]),
            (attr::RECORD_TYPE, layout::RECORD_TYPE),
        ] {
            let value: VarLenUnicode = value.parse().map_err(|e| StoreError::Layout {
                path: writing.clone(),
                what: format!("attribute {name}: {e}"),
            })?;
            write_attr(&file, name, &value, &writing)?;
        }
        self.next_index += 1;
        Ok(self.current.insert(OpenFile {
            file,
            writing,
            done,
            bytes: 0,
            records: 0,
        }))
    }

    /// Writes one record, opening or rolling over files as needed.
    pub fn write(&mut self, record: &TriggerRecord) -> Result<()> {
        let size = record.size_bytes() as u64;
        self.check_space(size)?;
        if self.current.as_ref().is_some_and(|f| {
            f.records >= self.config.max_records_per_file
                || f.bytes + size > self.config.max_file_bytes && f.records > 0
        }) {
            self.close()?;
        }
        let open = match self.current {
            Some(ref mut f) => f,
            None => self.open_next()?,
        };
        let path = open.writing.clone();
        let group = open
            .file
            .create_group(&layout::record_group(&record.header))
            .at(&path)?;
        write_bytes(
            &group,
            layout::RECORD_HEADER_DATASET,
            &record.header.to_bytes(),
            &path,
        )?;
        let raw = group.create_group(layout::RAW_DATA_GROUP).at(&path)?;
        for fragment in &record.fragments {
            let header = FragmentHeader::decode(fragment).map_err(|source| StoreError::Format {
                path: path.clone(),
                source,
            })?;
            write_bytes(&raw, &layout::fragment_dataset(&header), fragment, &path)?;
        }
        open.bytes += size;
        open.records += 1;
        Ok(())
    }

    fn check_space(&self, needed: u64) -> Result<()> {
        let dir = &self.config.directory;
        let available = fs4::available_space(dir).map_err(|source| StoreError::Io {
            what: "cannot read the free space of",
            path: dir.clone(),
            source,
        })?;
        let reserve = self.config.min_free_bytes;
        if available < needed.saturating_add(reserve) {
            return Err(StoreError::NoSpace {
                dir: dir.clone(),
                available,
                needed,
                reserve,
            });
        }
        Ok(())
    }

    /// Closes the current file: closing attributes, flush, rename to the final name.
    pub fn close(&mut self) -> Result<()> {
        let Some(open) = self.current.take() else {
            return Ok(());
        };
        write_attr(
            &open.file,
            attr::CLOSING_TIMESTAMP,
            &now_ms(),
            &open.writing,
        )?;
        write_attr(&open.file, attr::RECORDED_SIZE, &open.bytes, &open.writing)?;
        open.file.flush().at(&open.writing)?;
        drop(open.file);
        std::fs::rename(&open.writing, &open.done).map_err(|source| StoreError::Io {
            what: "cannot rename",
            path: open.writing.clone(),
            source,
        })?;
        self.closed.push(open.done);
        Ok(())
    }
}

impl Drop for RecordFileWriter {
    fn drop(&mut self) {
        // Best effort: a writer dropped without `close` still leaves a complete, renamed file.
        let _ = self.close();
    }
}
