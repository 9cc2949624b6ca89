//! Reads swdaq (and hdf5libs-layout) HDF5 files back: file attributes, records in trigger
//! order, whole records with their header decoded; [`decode`] helpers turn fragment payloads
//! into WIBEth frames and trigger primitives. Corrupt or foreign files give typed errors.

pub use crate::attributes::{AttributeProblem, FileAttributes};
use crate::error::{AtPath, Result, StoreError};
use crate::layout;
use serde::Serialize;
use std::path::{Path, PathBuf};
use swdaq_format::fragment::FRAGMENT_HEADER_SIZE;
use swdaq_format::{FragmentHeader, TriggerRecord, TriggerRecordHeader};

/// A record's place in a file: its group name and the numbers the name encodes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RecordId {
    pub trigger_number: u64,
    pub sequence_number: u16,
    pub group: String,
}

pub struct RecordFileReader {
    file: hdf5::File,
    path: PathBuf,
    file_len: u64,
}

impl RecordFileReader {
    pub fn open(path: &Path) -> Result<Self> {
        let file_len = std::fs::metadata(path)
            .map_err(|source| StoreError::Io {
                what: "cannot open",
                path: path.to_path_buf(),
                source,
            })?
            .len();
        Ok(Self {
            file: hdf5::File::open(path).at(path)?,
            path: path.to_path_buf(),
            file_len,
        })
    }

    /// The file's root attributes; one missing or of the wrong type is named in
    /// [`FileAttributes::problems`] and the others still read.
    pub fn attributes(&self) -> FileAttributes {
        crate::attributes::read(&self.file)
    }

    /// The records in the file, in trigger then sequence number order (group names that do
    /// not parse as `TriggerRecordNNNNN.SSSS` are not records and are skipped).
    pub fn record_ids(&self) -> Result<Vec<RecordId>> {
        let mut ids: Vec<RecordId> = self
            .file
            .member_names()
            .at(&self.path)?
            .into_iter()
            .filter_map(|group| {
                let numbers = group.strip_prefix(layout::RECORD_TYPE)?;
                let (trigger, sequence) = numbers.split_once('.')?;
                Some(RecordId {
                    trigger_number: trigger.parse().ok()?,
                    sequence_number: sequence.parse().ok()?,
                    group,
                })
            })
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Every record in order, read whole.
    pub fn records(&self) -> Result<impl Iterator<Item = Result<TriggerRecord>> + '_> {
        Ok(self
            .record_ids()?
            .into_iter()
            .map(|id| self.read_record(&id)))
    }

    /// Reads one record whole: its header, and its fragments ordered by source id and type,
    /// each checked to parse and to belong to the record.
    pub fn read_record(&self, id: &RecordId) -> Result<TriggerRecord> {
        self.collect_record(id, |_, e| Err(e))
    }

    /// Reads one record like [`Self::read_record`], but a fragment that cannot be read or
    /// does not parse is left out and returned with the reason instead of failing the record.
    pub fn read_record_skipping_bad(
        &self,
        id: &RecordId,
    ) -> Result<(TriggerRecord, Vec<BadFragment>)> {
        let mut bad = Vec::new();
        let record = self.collect_record(id, |name, e| {
            bad.push(BadFragment {
                dataset: name.to_string(),
                reason: e.reason(),
            });
            Ok(())
        })?;
        Ok((record, bad))
    }

    /// One record's header and good fragments; `on_bad` decides what a bad fragment does.
    fn collect_record(
        &self,
        id: &RecordId,
        mut on_bad: impl FnMut(&str, StoreError) -> Result<()>,
    ) -> Result<TriggerRecord> {
        let mut fragments = Vec::new();
        let header = self.walk_record(id, |raw, name| {
            let parsed = self.read_bytes(raw, name).and_then(|bytes| {
                let h = swdaq_format::Fragment::parse(&bytes)
                    .map_err(|e| self.format(e))?
                    .header;
                Ok((fragment_key(&h), bytes))
            });
            match parsed {
                Ok(fragment) => fragments.push(fragment),
                Err(e) => on_bad(name, e)?,
            }
            Ok(())
        })?;
        fragments.sort_by_key(|(key, _)| *key);
        Ok(TriggerRecord {
            header,
            fragments: fragments.into_iter().map(|(_, bytes)| bytes).collect(),
        })
    }

    /// One record's header and its fragments' headers, reading only the first bytes of each
    /// fragment (listing a file of large records costs a few kB per record, not the records).
    /// A fragment that cannot be read or decoded does not fail the record: it is listed in
    /// `bad_fragments` with the reason, and the others are still read.
    pub fn read_headers(&self, id: &RecordId) -> Result<RecordHeaders> {
        let mut fragments = Vec::new();
        let mut bad_fragments = Vec::new();
        let header = self.walk_record(id, |raw, name| {
            match self.read_fragment_header(raw, name) {
                Ok(h) => fragments.push(h),
                Err(e) => bad_fragments.push(BadFragment {
                    dataset: name.to_string(),
                    reason: e.reason(),
                }),
            }
            Ok(())
        })?;
        fragments.sort_by_key(fragment_key);
        Ok(RecordHeaders {
            header,
            fragments,
            bad_fragments,
        })
    }

    fn read_fragment_header(&self, raw: &hdf5::Group, name: &str) -> Result<FragmentHeader> {
        let (prefix, len) = self.read_prefix(raw, name, FRAGMENT_HEADER_SIZE)?;
        let h = FragmentHeader::decode(&prefix).map_err(|e| self.format(e))?;
        if h.size != len {
            return Err(self.layout(format!(
                "{name}: the fragment header says {} bytes, the dataset holds {len}",
                h.size
            )));
        }
        Ok(h)
    }

    /// Walks one record's `RawData` group: decodes the record header and hands the name of
    /// every other dataset (a fragment) to `fragment`.
    fn walk_record(
        &self,
        id: &RecordId,
        mut fragment: impl FnMut(&hdf5::Group, &str) -> Result<()>,
    ) -> Result<TriggerRecordHeader> {
        let raw = self
            .file
            .group(&format!("{}/{}", id.group, layout::RAW_DATA_GROUP))
            .at(&self.path)?;
        let mut header = None;
        for name in raw.member_names().at(&self.path)? {
            if name.ends_with(layout::RECORD_HEADER_DATASET) {
                let bytes = self.read_bytes(&raw, &name)?;
                header = Some(TriggerRecordHeader::decode(&bytes).map_err(|e| self.format(e))?);
            } else {
                fragment(&raw, &name)?;
            }
        }
        header.ok_or_else(|| self.layout(format!("{} has no record header", id.group)))
    }

    /// The first `n` bytes of a byte dataset, and its whole length.
    fn read_prefix(&self, group: &hdf5::Group, name: &str, n: usize) -> Result<(Vec<u8>, u64)> {
        let dataset = group.dataset(name).at(&self.path)?;
        let shape = dataset.shape();
        let len = dataset.size();
        if len as u64 > self.file_len || dataset.dtype().at(&self.path)?.size() != 1 {
            return Err(self.layout(format!("{name} is not a byte dataset within the file")));
        }
        let take = len.min(n);
        let bytes: Vec<i8> = match shape.as_slice() {
            [_, 1] => dataset
                .read_slice_2d::<i8, _>(ndarray::s![0..take, ..])
                .at(&self.path)?
                .into_iter()
                .collect(),
            [_] => dataset
                .read_slice_1d::<i8, _>(0..take)
                .at(&self.path)?
                .to_vec(),
            _ => return Err(self.layout(format!("{name} has shape {shape:?}, not [n] or [n, 1]"))),
        };
        Ok((bytes.into_iter().map(|b| b as u8).collect(), len as u64))
    }

    fn read_bytes(&self, group: &hdf5::Group, name: &str) -> Result<Vec<u8>> {
        let dataset = group.dataset(name).at(&self.path)?;
        // A corrupt dataspace could claim any size: bound the allocation by the file.
        if dataset.size() as u64 > self.file_len || dataset.dtype().at(&self.path)?.size() != 1 {
            return Err(self.layout(format!("{name} is not a byte dataset within the file")));
        }
        let bytes = dataset.read_raw::<i8>().at(&self.path)?;
        Ok(bytes.into_iter().map(|b| b as u8).collect())
    }

    fn format(&self, source: swdaq_format::FormatError) -> StoreError {
        StoreError::Format {
            path: self.path.clone(),
            source,
        }
    }

    fn layout(&self, what: String) -> StoreError {
        StoreError::Layout {
            path: self.path.clone(),
            what,
        }
    }
}

/// A record's header and its fragments' headers (see [`RecordFileReader::read_headers`]).
#[derive(Debug, Clone)]
pub struct RecordHeaders {
    pub header: TriggerRecordHeader,
    pub fragments: Vec<FragmentHeader>,
    /// Fragments that could not be read or decoded, with why.
    pub bad_fragments: Vec<BadFragment>,
}

/// A fragment dataset that could not be read or decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadFragment {
    /// The dataset's name in the record's `RawData` group.
    pub dataset: String,
    pub reason: String,
}

/// The order fragments come back in: by source (subsystem, id), then fragment type.
pub fn fragment_key(h: &FragmentHeader) -> (u16, u32, u32) {
    (h.element_id.subsystem.0, h.element_id.id, h.fragment_type.0)
}

/// Decoding helpers for fragment payloads.
pub mod decode {
    use swdaq_format::wibeth::{self, WibEthAdcs, WibEthFrame};
    use swdaq_format::{FormatError, TriggerPrimitive};

    /// The WIBEth frames of a payload; a trailing partial frame is an error item.
    pub fn wibeth_frames(
        payload: &[u8],
    ) -> impl Iterator<Item = Result<WibEthFrame<'_>, FormatError>> {
        payload.chunks(wibeth::FRAME_SIZE).map(WibEthFrame::parse)
    }

    /// Every ADC of every frame, `[frame][sample][channel]`.
    pub fn wibeth_adcs(payload: &[u8]) -> Result<Vec<WibEthAdcs>, FormatError> {
        wibeth_frames(payload)
            .map(|frame| {
                let mut adcs = [[0; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
                frame?.unpack(&mut adcs);
                Ok(adcs)
            })
            .collect()
    }

    /// The trigger primitives of a TP payload.
    pub fn trigger_primitives(payload: &[u8]) -> Result<Vec<TriggerPrimitive>, FormatError> {
        TriggerPrimitive::decode_all(payload)
    }
}
