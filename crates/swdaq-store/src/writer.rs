//! Writes trigger records to HDF5 files: each file is written as `<name>.writing` and renamed
//! when closed, so a file with its final name is always complete; files roll over by size or
//! record count; free space is checked before each record, and a record that fails half-way
//! is unlinked again so the file only ever holds whole records. While open, the file is flushed
//! by its [`FlushPolicy`], so a killed writer leaves a readable `.writing` file ([`durable`]).
//! [`WriterCounts`] says what reached the disk: records, files, flushes, and the files' growth.

use crate::durable::{self, FlushPolicy, Unflushed};
use crate::error::{AtPath, Result, StoreError};
use crate::layout::{self, attr};
use hdf5::types::VarLenUnicode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use swdaq_format::provenance::Provenance;
use swdaq_format::{FragmentHeader, SourceId, TriggerRecord, file_checksum, run_files};

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
    /// Free space that must remain after a record is written: a record that would leave
    /// less is refused with [`StoreError::NoSpace`] before anything is written.
    pub min_free_bytes: u64,
    /// Crash safety: the open `.writing` file is made consistent on disk (see [`crate::durable`])
    /// at most this many milliseconds after a record was written...
    pub flush_interval_ms: u64,
    /// ... or once this many records wait, whichever comes first. Both 0: only closing a file
    /// makes it readable (the fastest, but a kill loses the whole open file).
    pub flush_every_records: u64,
    /// Power loss: every flush point and every close also waits until the file's bytes are
    /// on the storage device (`fdatasync`), and a created or renamed file's directory entry
    /// too (`fsync` of the directory). Off: a killed process loses nothing flushed, a power
    /// cut may lose what the kernel had not yet written back.
    pub sync_to_disk: bool,
    /// The run and the software, written as file attributes beside hdf5libs' own
    /// (`swdaq_version`, ...: the layout's module comment); `None` writes hdf5libs' alone.
    /// The run's, not a key.
    #[serde(skip)]
    pub provenance: Option<Provenance>,
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
            flush_interval_ms: 1000,
            flush_every_records: 64,
            sync_to_disk: true,
            provenance: None,
        }
    }
}

/// What a writer has put on disk so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterCounts {
    pub records: u64,
    /// Bytes of the records written (record headers and fragments).
    pub record_bytes: u64,
    /// How much the files grew on disk as HDF5 wrote them (their size, read after every
    /// record, flush and close): the records plus HDF5's metadata. Once every file is closed
    /// it is the sum of their sizes.
    pub file_bytes: u64,
    pub files_opened: u64,
    pub files_closed: u64,
    pub flushes: u64,
}

struct OpenFile {
    file: hdf5::File,
    /// The same file through the OS, to wait for its bytes to reach the device.
    handle: std::fs::File,
    writing: PathBuf,
    done: PathBuf,
    bytes: u64,
    records: u64,
    unflushed: Unflushed,
    /// The file's size when last read (what `WriterCounts::file_bytes` holds of it).
    size_on_disk: u64,
    /// The geo ids of the readout sources written so far: hdf5libs is given them by its
    /// configuration before the file opens, swdaq learns them from the records, so the
    /// file's `source_id_geo_id_map` is written when it closes.
    geo_ids: BTreeMap<SourceId, BTreeSet<u64>>,
}

/// Adds the growth of the open `file` (at `path`, for errors) since its size was last read
/// (`size_on_disk`) to `counts`.
fn count_growth(
    file: &std::fs::File,
    path: &Path,
    size_on_disk: &mut u64,
    counts: &mut WriterCounts,
) -> Result<()> {
    // `fstat` of the open handle: no path lookup per record.
    let size = file
        .metadata()
        .map_err(|source| StoreError::Io {
            what: "cannot read the size of",
            path: path.to_path_buf(),
            source,
        })?
        .len();
    // A file HDF5 writes only grows: the growth counted is exactly the closed file's size
    // (test `the_metrics_count_what_reached_the_disk`; a 3 s `swdaq run`: 44424520 bytes both).
    counts.file_bytes += size.saturating_sub(*size_on_disk);
    *size_on_disk = (*size_on_disk).max(size);
    Ok(())
}

impl OpenFile {
    fn count_growth(&mut self, counts: &mut WriterCounts) -> Result<()> {
        count_growth(&self.handle, &self.writing, &mut self.size_on_disk, counts)
    }

    /// Flushes the file (and with `sync_to_disk` waits until its bytes are on the device).
    fn flush(&mut self, counts: &mut WriterCounts, sync_to_disk: bool) -> Result<()> {
        self.file.flush().at(&self.writing)?;
        if sync_to_disk {
            durable::sync_data(&self.handle, &self.writing)?;
        }
        counts.flushes += 1;
        self.count_growth(counts)
    }
}

/// Synchronous record writer; [`crate::StorageThread`] runs one on its own thread.
pub struct RecordFileWriter {
    config: StoreConfig,
    flush_policy: FlushPolicy,
    current: Option<OpenFile>,
    next_index: u32,
    closed: Vec<PathBuf>,
    counts: WriterCounts,
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

fn write_text(loc: &hdf5::Location, name: &str, value: &str, path: &Path) -> Result<()> {
    let value: VarLenUnicode = value.parse().map_err(|e| StoreError::Layout {
        path: path.to_path_buf(),
        what: format!("attribute {name}: {e}"),
    })?;
    write_attr(loc, name, &value, path)
}

/// One contiguous (unchunked, unfiltered) `char` dataset of shape `[len, 1]`, like hdf5libs:
/// HDF5 hands the whole buffer to a single `write(2)`.
fn write_bytes(group: &hdf5::Group, name: &str, bytes: &[u8], path: &Path) -> Result<()> {
    let bytes: &[i8] = bytemuck::cast_slice(bytes);
    group
        .new_dataset::<i8>()
        .shape((bytes.len(), 1))
        .create(name)
        .and_then(|ds| ds.write_raw(bytes))
        .at(path)
}

impl RecordFileWriter {
    /// Creates the output directory if needed; files are opened with the first record.
    pub fn new(config: StoreConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.directory).map_err(|source| StoreError::Io {
            what: "cannot create the output directory",
            path: config.directory.clone(),
            source,
        })?;
        Ok(Self {
            flush_policy: FlushPolicy::new(config.flush_interval_ms, config.flush_every_records),
            config,
            current: None,
            next_index: 0,
            closed: Vec::new(),
            counts: WriterCounts::default(),
        })
    }

    /// Files closed so far (with their final names).
    pub fn closed_files(&self) -> &[PathBuf] {
        &self.closed
    }

    /// What has been written so far.
    pub fn counts(&self) -> WriterCounts {
        self.counts
    }

    fn open_next(&mut self) -> Result<OpenFile> {
        let name = layout::file_name(
            &self.config.file_prefix,
            self.config.run_number,
            self.next_index,
        );
        let done = self.config.directory.join(&name);
        let writing = self.config.directory.join(format!("{name}.writing"));
        // Creating it first turns a read-only or missing directory into a plain I/O error
        // instead of an HDF5 error stack; and exclusively, so no other writer's file is taken.
        let handle = run_files::create_new(&writing).map_err(|source| StoreError::Io {
            what: "cannot create",
            path: writing.clone(),
            source,
        })?;
        // Default file-format bounds, as hdf5libs: measured as fast as the newest formats
        // (`libver_bounds`, a larger metadata block) and readable by any HDF5 1.8+.
        let file = durable::builder(&self.flush_policy)
            .create(&writing)
            .at(&writing)?;
        let text_attrs = [
            (
                attr::APPLICATION_NAME.to_string(),
                self.config.application_name.clone(),
            ),
            (attr::LAYOUT_PARAMS.to_string(), layout::layout_params()),
            (
                attr::RECORD_TYPE.to_string(),
                layout::RECORD_TYPE.to_string(),
            ),
        ]
        .into_iter()
        .chain(
            (self.config.provenance.iter())
                .flat_map(|p| p.prefixed_texts().map(|(k, v)| (k, v.to_string()))),
        );
        write_attr(&file, attr::RUN_NUMBER, &self.config.run_number, &writing)?;
        write_attr(
            &file,
            attr::FILE_INDEX,
            &u64::from(self.next_index),
            &writing,
        )?;
        write_attr(&file, attr::CREATION_TIMESTAMP, &now_ms(), &writing)?;
        write_attr(
            &file,
            attr::LAYOUT_VERSION,
            &layout::LAYOUT_VERSION,
            &writing,
        )?;
        for (name, value) in text_attrs {
            write_text(&file, &name, &value, &writing)?;
        }
        self.next_index += 1;
        self.counts.files_opened += 1;
        let mut open = OpenFile {
            file,
            handle,
            writing,
            done,
            bytes: 0,
            records: 0,
            unflushed: Unflushed::default(),
            size_on_disk: 0,
            geo_ids: BTreeMap::new(),
        };
        if self.flush_policy.enabled() {
            // Readable (with no records) from the start, not only after the first flush.
            open.flush(&mut self.counts, self.config.sync_to_disk)?;
            if self.config.sync_to_disk {
                durable::sync_directory(&self.config.directory)?;
            }
        }
        Ok(open)
    }

    /// Writes one record, opening or rolling over files as needed. A malformed fragment, a
    /// duplicate record or too little free space is an error and nothing of the record stays.
    pub fn write(&mut self, record: &TriggerRecord) -> Result<()> {
        let size = record.size_bytes() as u64;
        self.check_space(size)?;
        let headers = record
            .fragments
            .iter()
            .map(|f| FragmentHeader::decode(f))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Format {
                path: self.config.directory.clone(),
                source,
            })?;
        if self.current.as_ref().is_some_and(|f| {
            f.records >= self.config.max_records_per_file
                || f.bytes + size > self.config.max_file_bytes && f.records > 0
        }) {
            self.close()?;
        }
        let open = match self.current.take() {
            Some(f) => f,
            None => self.open_next()?,
        };
        let open = self.current.insert(open);
        let name = layout::record_group(&record.header);
        if open.file.link_exists(&name) {
            return Err(StoreError::Duplicate {
                path: open.writing.clone(),
                record: name,
            });
        }
        let written = write_record(open, &name, record, &headers);
        if written.is_err() {
            // Best effort: the error being reported is the one that matters.
            let _ = open.file.unlink(&name);
        }
        // What a failed record left in the file still takes room on disk.
        let grown = open.count_growth(&mut self.counts);
        written?;
        grown?;
        for (fragment, header) in record.fragments.iter().zip(&headers) {
            if let Some(geo_id) = layout::fragment_geo_id(header, fragment) {
                open.geo_ids
                    .entry(header.element_id)
                    .or_default()
                    .insert(geo_id);
            }
        }
        open.bytes += size;
        open.records += 1;
        open.unflushed.add(Instant::now());
        self.counts.records += 1;
        self.counts.record_bytes += size;
        self.flush_if_due()
    }

    /// When the open file must next be flushed (see [`StoreConfig::flush_interval_ms`]); a
    /// writer thread waiting for records calls [`Self::flush_if_due`] by then.
    pub fn flush_deadline(&self) -> Option<Instant> {
        self.current
            .as_ref()?
            .unflushed
            .deadline(&self.flush_policy)
    }

    /// Flushes the open file if its flush policy says so: every record written before is
    /// then readable from the `.writing` file whatever happens to the process.
    pub fn flush_if_due(&mut self) -> Result<()> {
        let Some(open) = self.current.as_mut() else {
            return Ok(());
        };
        if open.unflushed.due(&self.flush_policy, Instant::now()) {
            open.flush(&mut self.counts, self.config.sync_to_disk)?;
            open.unflushed.clear();
        }
        Ok(())
    }

    fn check_space(&self, needed: u64) -> Result<()> {
        let dir = &self.config.directory;
        let reserve = self.config.min_free_bytes;
        let short =
            run_files::space_short(dir, needed, reserve).map_err(|source| StoreError::Io {
                what: "cannot read the free space of",
                path: dir.clone(),
                source,
            })?;
        if let Some(available) = short {
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
        let Some(mut open) = self.current.take() else {
            return Ok(());
        };
        write_text(
            &open.file,
            attr::SOURCE_ID_GEO_ID_MAP,
            &layout::geo_id_map(&open.geo_ids),
            &open.writing,
        )?;
        write_attr(&open.file, attr::RECORDED_SIZE, &open.bytes, &open.writing)?;
        write_attr(
            &open.file,
            attr::CLOSING_TIMESTAMP,
            &now_ms(),
            &open.writing,
        )?;
        open.flush(&mut self.counts, false)?;
        // Closing writes what HDF5 still holds and sets the file's final size.
        open.file.close().at(&open.writing)?;
        if self.config.sync_to_disk {
            durable::sync_data(&open.handle, &open.writing)?;
        }
        count_growth(
            &open.handle,
            &open.writing,
            &mut open.size_on_disk,
            &mut self.counts,
        )?;
        self.counts.files_closed += 1;
        run_files::rename_no_replace(&open.writing, &open.done).map_err(|source| {
            StoreError::Io {
                what: "cannot rename",
                path: open.writing.clone(),
                source,
            }
        })?;
        if self.config.sync_to_disk {
            durable::sync_directory(&self.config.directory)?;
        }
        // The HDF5 C library writes the file (and rewrites its superblock and metadata in
        // place up to the close), so swdaq never holds its final bytes: the registry reads
        // the closed file back for its checksums, off this thread.
        file_checksum::note_closed(self.config.run_number, &open.done, None);
        self.closed.push(open.done);
        Ok(())
    }
}

fn write_record(
    open: &OpenFile,
    name: &str,
    record: &TriggerRecord,
    headers: &[FragmentHeader],
) -> Result<()> {
    let path = &open.writing;
    let group = open.file.create_group(name).at(path)?;
    let raw = group.create_group(layout::RAW_DATA_GROUP).at(path)?;
    write_bytes(
        &raw,
        &layout::record_header_dataset(&record.header),
        &record.header.to_bytes(),
        path,
    )?;
    for (fragment, header) in record.fragments.iter().zip(headers) {
        write_bytes(&raw, &layout::fragment_dataset(header), fragment, path)?;
    }
    for (attribute, value) in layout::record_attributes(name, &record.header, headers) {
        write_text(&group, attribute, &value, path)?;
    }
    Ok(())
}

impl Drop for RecordFileWriter {
    fn drop(&mut self) {
        // Best effort: a writer dropped without `close` still leaves a complete, renamed file.
        let _ = self.close();
    }
}
