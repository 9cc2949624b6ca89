//! ATLAS EventStorage files, format version 6: the files ATLAS's SFOs write and its offline
//! software reads (`EventStorage::DataReader`), one full event ([`crate::eformat_event`]) per
//! data block. Little-endian 32-bit words; a record's size counts words.
//!
//! Records as tdaq-common's EventStorage defines them (`EventStorage/EventStorageRecords.h`,
//! `FILE_FORMAT_VERSION 0x00000006`, public copy in the Ish-D/AtlEventProcess repository,
//! `include/EventStorage/`, commit 5a5a72d), written in the order and with the string padding
//! of the EventStorage writer (athena's copy of it, `Event/ByteStreamCnvSvcLegacy/src/
//! offline_EventStorage/v5_DataWriter.cxx`, ATLAS-experiment/athena commit 019b569), which
//! differs from version 6 only in the run parameters record (two detector-mask words, not
//! four; read here too):
//!
//! | record | words |
//! |--------|-------|
//! | file start | marker `0x1234aaaa`, size 8, version 6, file number, date, time, size limit (data blocks), size limit (MB) |
//! | file name strings | marker `0x1234aabb`; application name, file name core: each a length in bytes, then the bytes padded with spaces to whole words |
//! | free metadata strings | marker `0x1234aabc`, count; each string a length, then its bytes padded with spaces (`GUID=`, `Stream=`, `Project=`, `LumiBlock=`; then swdaq's provenance, `swdaq_version=`, ...: [`provenance_strings`]) |
//! | run parameters | marker `0x1234bbbb`, size 12, run number, max events, recording enabled, trigger type, detector mask in four words (least significant first), beam type, beam energy |
//! | per event: data separator | marker `0x1234cccc`, size 4, data block number (from 1 over the writer's sequence of files), data block size (bytes), then the event |
//! | file end | marker `0x1234dddd`, size 10, date, time, events in file, data in file (MB, rounded), events in sequence, data in sequence (MB), status (1: last file of its sequence), `0x1234eeee` |
//!
//! Dates are `DDMMYYYY` and times `HHMMSS` as decimal numbers (the writer's `date_timeAsInt`;
//! ATLAS takes local time, swdaq UTC). File names follow tdaq-common's `daq::RawFileName`
//! (`EventStorage/RawFileName.h`; the construction read in FASER's copy of
//! `RawFileName.cxx`): [`RawFileName`].

use crate::error::FormatError;
use crate::input_file::{OnePass, offsets_of};
use crate::le::{get_u32, put_u32};
use crate::provenance::{KEY_PREFIX, Provenance};

pub const FILE_START_MARKER: u32 = 0x1234_aaaa;
pub const RUN_PARAMETERS_MARKER: u32 = 0x1234_bbbb;
pub const DATA_SEPARATOR_MARKER: u32 = 0x1234_cccc;
pub const FILE_NAME_STRINGS_MARKER: u32 = 0x1234_aabb;
pub const FREE_STRINGS_MARKER: u32 = 0x1234_aabc;
pub const FILE_END_MARKER: u32 = 0x1234_dddd;
pub const FILE_END_MARKER_LAST: u32 = 0x1234_eeee;
/// The format version written.
pub const FORMAT_VERSION: u32 = 6;
pub const FILE_START_WORDS: usize = 8;
pub const RUN_PARAMETERS_WORDS: usize = 12;
/// Version 5's run parameters record (a 64-bit detector mask).
pub const RUN_PARAMETERS_WORDS_V5: usize = 10;
pub const DATA_SEPARATOR_WORDS: usize = 4;
pub const FILE_END_WORDS: usize = 10;
const WORD: usize = 4;
/// Strings longer than this are taken for damage, not read (bounds what a bad length costs).
const MAX_STRING_BYTES: usize = 1 << 16;
const MAX_FREE_STRINGS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileStart {
    pub version: u32,
    /// The file's number in its sequence (the file name's sequence number).
    pub file_number: u32,
    pub date: u32,
    pub time: u32,
    pub size_limit_data_blocks: u32,
    pub size_limit_mb: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunParameters {
    pub run_number: u32,
    pub max_events: u32,
    pub rec_enable: u32,
    pub trigger_type: u32,
    pub detector_mask: u128,
    pub beam_type: u32,
    pub beam_energy: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileEnd {
    pub date: u32,
    pub time: u32,
    pub events_in_file: u32,
    pub data_in_file_mb: u32,
    /// Events of the writer's sequence of files up to and including this one.
    pub events_in_sequence: u32,
    pub data_in_sequence_mb: u32,
    /// 1: the last file of its sequence.
    pub status: u32,
}

/// Everything in front of a file's first event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileHead {
    pub start: FileStart,
    pub app_name: String,
    pub file_name_core: String,
    pub metadata: Vec<String>,
    pub run: RunParameters,
}

impl FileHead {
    /// The value of metadata string `KEY=value`.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find_map(|m| m.strip_prefix(key)?.strip_prefix('='))
    }

    /// The provenance metadata strings ([`provenance_strings`]) in file order, each key
    /// without its prefix and its value decoded; none in older files or ATLAS's own.
    pub fn provenance(&self) -> Vec<(&str, String)> {
        self.metadata
            .iter()
            .filter_map(|m| {
                let (key, value) = m.strip_prefix(KEY_PREFIX)?.split_once('=')?;
                Some((key, unescape(value)))
            })
            .collect()
    }

    /// The head's records, as the writer writes them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let s = &self.start;
        let mut w = vec![
            FILE_START_MARKER,
            FILE_START_WORDS as u32,
            s.version,
            s.file_number,
            s.date,
            s.time,
            s.size_limit_data_blocks,
            s.size_limit_mb,
        ];
        let mut out = words_to_bytes(&w);
        put_u32_vec(&mut out, FILE_NAME_STRINGS_MARKER);
        put_string(&mut out, &self.app_name);
        put_string(&mut out, &self.file_name_core);
        if !self.metadata.is_empty() {
            put_u32_vec(&mut out, FREE_STRINGS_MARKER);
            put_u32_vec(&mut out, self.metadata.len() as u32);
            for m in &self.metadata {
                put_string(&mut out, m);
            }
        }
        let r = &self.run;
        // Version 5 kept two detector-mask words, version 6 four.
        let mask_words = if s.version == 5 { 2 } else { 4 };
        w = vec![
            RUN_PARAMETERS_MARKER,
            (8 + mask_words) as u32,
            r.run_number,
            r.max_events,
            r.rec_enable,
            r.trigger_type,
        ];
        w.extend((0..mask_words).map(|i| (r.detector_mask >> (32 * i)) as u32));
        w.extend([r.beam_type, r.beam_energy]);
        out.extend(words_to_bytes(&w));
        out
    }

    /// Reads the head at the start of `bytes`; returns it and its length in bytes.
    pub fn parse(bytes: &[u8]) -> Result<(Self, usize), FormatError> {
        let mut at = 0;
        let start = fixed(
            bytes,
            &mut at,
            "file start record",
            FILE_START_MARKER,
            |n| n == FILE_START_WORDS,
        )?;
        let version = start[2];
        if version != FORMAT_VERSION && version != 5 {
            return Err(FormatError::UnsupportedVersion {
                what: "EventStorage file",
                supported: FORMAT_VERSION,
                got: version,
            });
        }
        expect_marker(
            bytes,
            &mut at,
            "file name strings",
            FILE_NAME_STRINGS_MARKER,
        )?;
        let app_name = get_string(bytes, &mut at, "application name")?;
        let file_name_core = get_string(bytes, &mut at, "file name core")?;
        let mut metadata = Vec::new();
        if word_at(bytes, at) == Some(FREE_STRINGS_MARKER) {
            at += WORD;
            let n = word_at(bytes, at).ok_or_else(|| short("free metadata strings", bytes, at))?;
            at += WORD;
            if n as usize > MAX_FREE_STRINGS {
                return Err(inconsistent("free metadata strings", "count", n as u64));
            }
            for _ in 0..n {
                metadata.push(get_string(bytes, &mut at, "free metadata string")?);
            }
        }
        let words = if version == 5 {
            RUN_PARAMETERS_WORDS_V5
        } else {
            RUN_PARAMETERS_WORDS
        };
        let r = fixed(
            bytes,
            &mut at,
            "run parameters record",
            RUN_PARAMETERS_MARKER,
            |n| n == words,
        )?;
        let mask_words = words - 8;
        let detector_mask = (0..mask_words)
            .map(|i| u128::from(r[6 + i]) << (32 * i))
            .fold(0, |m, w| m | w);
        let head = Self {
            start: FileStart {
                version,
                file_number: start[3],
                date: start[4],
                time: start[5],
                size_limit_data_blocks: start[6],
                size_limit_mb: start[7],
            },
            app_name,
            file_name_core,
            metadata,
            run: RunParameters {
                run_number: r[2],
                max_events: r[3],
                rec_enable: r[4],
                trigger_type: r[5],
                detector_mask,
                beam_type: r[6 + mask_words],
                beam_energy: r[7 + mask_words],
            },
        };
        Ok((head, at))
    }
}

/// Metadata strings naming the run and the software that wrote the file, after ATLAS's
/// own: `swdaq_version=...`, `swdaq_git_commit=...`, ... ([`Provenance::texts`]; the run
/// number is the run parameters record's). A value's `%` and `=` are written `%25` and `%3D`:
/// athena's file-metadata reader splits every `KEY=value` string at each `=` into exactly
/// two parts (ATLAS-experiment/athena 83fa722, `Tools/PyUtils/python/MetaReader.py`,
/// `k, v = md.split('=')`), and build flags hold `=`.
pub fn provenance_strings(provenance: &Provenance) -> Vec<String> {
    provenance
        .prefixed_texts()
        .map(|(key, value)| format!("{key}={}", escape(value)))
        .collect()
}

fn escape(value: &str) -> String {
    value.replace('%', "%25").replace('=', "%3D")
}

/// Undoes [`escape`]; any other `%` is kept as it is.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let (decoded, after) = match rest.get(at + 1..at + 3) {
            Some("25") => ('%', at + 3),
            Some("3D") => ('=', at + 3),
            _ => ('%', at + 1),
        };
        out.push(decoded);
        rest = &rest[after..];
    }
    out.push_str(rest);
    out
}

/// The data separator record in front of an event of `size` bytes.
pub fn data_separator(block_number: u32, size: u32) -> [u8; DATA_SEPARATOR_WORDS * WORD] {
    let mut b = [0u8; DATA_SEPARATOR_WORDS * WORD];
    for (i, w) in [
        DATA_SEPARATOR_MARKER,
        DATA_SEPARATOR_WORDS as u32,
        block_number,
        size,
    ]
    .into_iter()
    .enumerate()
    {
        put_u32(&mut b, i * WORD, w);
    }
    b
}

impl FileEnd {
    pub fn to_bytes(&self) -> [u8; FILE_END_WORDS * WORD] {
        let mut b = [0u8; FILE_END_WORDS * WORD];
        for (i, w) in [
            FILE_END_MARKER,
            FILE_END_WORDS as u32,
            self.date,
            self.time,
            self.events_in_file,
            self.data_in_file_mb,
            self.events_in_sequence,
            self.data_in_sequence_mb,
            self.status,
            FILE_END_MARKER_LAST,
        ]
        .into_iter()
        .enumerate()
        {
            put_u32(&mut b, i * WORD, w);
        }
        b
    }

    /// A file end record that fills `bytes` exactly.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        let mut at = 0;
        let w = fixed(bytes, &mut at, "file end record", FILE_END_MARKER, |n| {
            n == FILE_END_WORDS
        })?;
        if w[9] != FILE_END_MARKER_LAST {
            return Err(FormatError::BadMagic {
                what: "file end record's last word",
                expected: FILE_END_MARKER_LAST,
                got: w[9],
            });
        }
        if bytes.len() != FILE_END_WORDS * WORD {
            return Err(inconsistent(
                "file end record",
                "bytes after it",
                bytes.len() as u64,
            ));
        }
        Ok(Self {
            date: w[2],
            time: w[3],
            events_in_file: w[4],
            data_in_file_mb: w[5],
            events_in_sequence: w[6],
            data_in_sequence_mb: w[7],
            status: w[8],
        })
    }
}

/// Megabytes as the writer counts them (2^20 bytes, rounded to the nearest).
pub fn megabytes(bytes: u64) -> u32 {
    ((bytes + (1 << 19)) >> 20) as u32
}

/// `(DDMMYYYY, HHMMSS)` of a time in seconds since the Unix epoch, in UTC.
pub fn date_time(unix_seconds: u64) -> (u32, u32) {
    let days = (unix_seconds / 86_400) as i64;
    let secs = (unix_seconds % 86_400) as u32;
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u32;
    let time = secs / 3600 * 10_000 + secs % 3600 / 60 * 100 + secs % 60;
    (day * 1_000_000 + month * 10_000 + year, time)
}

/// One record after a file's head, as [`Records`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// A data separator and its block (a full event), `offset` being the separator's.
    Event {
        offset: usize,
        block_number: u32,
        data: &'a [u8],
    },
    End {
        offset: usize,
        end: FileEnd,
    },
    /// Bytes that are neither: their span and why; the walk goes on at the next record.
    Damaged {
        offset: usize,
        len: usize,
        why: String,
    },
}

/// Walks the records from `offset` (the end of the head) to the end of the file, however
/// damaged: a bad record is reported with its span and the walk resynchronises on the next
/// data separator whose block fits the file (and that the caller's check accepts), or a
/// file end record.
pub struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
    block_ok: fn(&[u8]) -> bool,
    /// Told as the walk goes which bytes it is done with.
    passed: Box<dyn Fn(usize) + 'a>,
}

impl<'a> Records<'a> {
    pub fn new(bytes: &'a [u8], offset: usize) -> Self {
        Self::checking(bytes, offset, |_| true)
    }

    /// A walk that also takes a data block for damage when `block_ok` refuses it (a reader
    /// that knows what the blocks hold checks that their own size agrees, say).
    pub fn checking(bytes: &'a [u8], offset: usize, block_ok: fn(&[u8]) -> bool) -> Self {
        Self {
            bytes,
            at: offset.min(bytes.len()),
            block_ok,
            passed: Box::new(|_| {}),
        }
    }

    /// Tells `file` (the bytes walked) as the walk goes which bytes it is done with
    /// ([`OnePass::passed`]: a mapped file then hands their pages back).
    pub fn telling(self, file: &'a (impl OnePass + ?Sized)) -> Self {
        Self {
            passed: Box::new(|offset| file.passed(offset)),
            ..self
        }
    }

    /// What lies at `at`: a whole record and its length, or why not.
    fn record_at(&self, at: usize) -> Result<(Record<'a>, usize), String> {
        let rest = &self.bytes[at..];
        match word_at(rest, 0) {
            Some(DATA_SEPARATOR_MARKER) => {
                let sep = DATA_SEPARATOR_WORDS * WORD;
                if rest.len() < sep {
                    return Err(format!("data separator cut short ({} bytes)", rest.len()));
                }
                if get_u32(rest, 4) as usize != DATA_SEPARATOR_WORDS {
                    return Err(format!("data separator size {}", get_u32(rest, 4)));
                }
                let size = get_u32(rest, 12) as usize;
                if size > rest.len() - sep {
                    return Err(format!(
                        "data block of {size} bytes runs past the end of the file ({} left)",
                        rest.len() - sep
                    ));
                }
                let data = &rest[sep..sep + size];
                if !(self.block_ok)(data) {
                    return Err(format!(
                        "the {size}-byte data block does not hold what its separator says"
                    ));
                }
                let record = Record::Event {
                    offset: at,
                    block_number: get_u32(rest, 8),
                    data,
                };
                Ok((record, sep + size))
            }
            Some(FILE_END_MARKER) => {
                let len = FILE_END_WORDS * WORD;
                let end =
                    FileEnd::parse(&rest[..len.min(rest.len())]).map_err(|e| e.to_string())?;
                Ok((Record::End { offset: at, end }, len))
            }
            Some(other) => Err(format!(
                "0x{other:08x} where a data separator (0x{DATA_SEPARATOR_MARKER:08x}) or the file end record was expected"
            )),
            None => Err(format!("{} stray bytes at the end", rest.len())),
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.at >= self.bytes.len() {
            return None;
        }
        (self.passed)(self.at);
        match self.record_at(self.at) {
            Ok((record, len)) => {
                self.at += len;
                Some(record)
            }
            Err(why) => {
                let offset = self.at;
                // Only a record's marker can start one: the offsets of its first byte.
                let [separator, ..] = DATA_SEPARATOR_MARKER.to_le_bytes();
                let [end, ..] = FILE_END_MARKER.to_le_bytes();
                let span = (offset + 1, self.bytes.len());
                let next = offsets_of(self.bytes, span, (separator, end), &*self.passed)
                    .find(|&a| self.record_at(a).is_ok())
                    .unwrap_or(self.bytes.len());
                self.at = next;
                Some(Record::Damaged {
                    offset,
                    len: next - offset,
                    why,
                })
            }
        }
    }
}

/// A raw data file's name as ATLAS names it (`daq::RawFileName`):
/// `project.RRRRRRRR.streamType_streamName.daq.RAW._lbLLLL._app._SSSS.data`, `.writing` in
/// place of `.data` while the file is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFileName {
    pub project: String,
    pub run_number: u32,
    pub stream_type: String,
    pub stream_name: String,
    pub lumi_block: u32,
    pub app_name: String,
    pub sequence: u32,
}

/// The extension of a finished file and of one being written.
pub const FINISHED_EXTENSION: &str = ".data";
pub const WRITING_EXTENSION: &str = ".writing";

impl RawFileName {
    /// The file name core (what the file name strings record holds).
    pub fn core(&self) -> String {
        format!(
            "{}.{:08}.{}_{}.daq.RAW._lb{:04}._{}",
            self.project,
            self.run_number,
            self.stream_type,
            self.stream_name,
            self.lumi_block,
            self.app_name
        )
    }

    /// `Stream=` of the file's metadata.
    pub fn stream(&self) -> String {
        format!("{}_{}", self.stream_type, self.stream_name)
    }

    pub fn finished(&self) -> String {
        format!("{}._{:04}{FINISHED_EXTENSION}", self.core(), self.sequence)
    }

    pub fn writing(&self) -> String {
        format!("{}._{:04}{WRITING_EXTENSION}", self.core(), self.sequence)
    }

    /// Reads a name back as ATLAS's reader does: at least 7 dot-separated fields, the fifth
    /// `RAW`, then `._` and the sequence number.
    pub fn parse(name: &str) -> Option<Self> {
        let (core, trailer) = name.rsplit_once("._")?;
        let sequence = trailer.split('.').next()?.parse().ok()?;
        let fields: Vec<&str> = core.split('.').collect();
        if fields.len() < 7 || fields[4] != "RAW" {
            return None;
        }
        let (stream_type, stream_name) = fields[2].split_once('_')?;
        Some(Self {
            project: fields[0].to_string(),
            run_number: fields[1].parse().ok()?,
            stream_type: stream_type.to_string(),
            stream_name: stream_name.to_string(),
            lumi_block: fields[5].strip_prefix("_lb")?.parse().ok()?,
            app_name: fields[6].strip_prefix('_')?.to_string(),
            sequence,
        })
    }
}

fn word_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at.checked_add(WORD)?)
        .map(|_| get_u32(bytes, at))
}

fn short(what: &'static str, bytes: &[u8], at: usize) -> FormatError {
    FormatError::Truncated {
        what,
        need: at + WORD,
        got: bytes.len(),
    }
}

fn inconsistent(what: &'static str, field: &'static str, value: u64) -> FormatError {
    FormatError::Inconsistent { what, field, value }
}

fn expect_marker(
    bytes: &[u8],
    at: &mut usize,
    what: &'static str,
    marker: u32,
) -> Result<(), FormatError> {
    let got = word_at(bytes, *at).ok_or_else(|| short(what, bytes, *at))?;
    if got != marker {
        return Err(FormatError::BadMagic {
            what,
            expected: marker,
            got,
        });
    }
    *at += WORD;
    Ok(())
}

/// A fixed-size record at `at`: its marker, a size word `size_ok` accepts, its words.
fn fixed(
    bytes: &[u8],
    at: &mut usize,
    what: &'static str,
    marker: u32,
    size_ok: impl Fn(usize) -> bool,
) -> Result<Vec<u32>, FormatError> {
    let start = *at;
    expect_marker(bytes, at, what, marker)?;
    let n = word_at(bytes, *at).ok_or_else(|| short(what, bytes, *at))? as usize;
    if !size_ok(n) {
        return Err(inconsistent(what, "record size", n as u64));
    }
    let end = start + n * WORD;
    if bytes.len() < end {
        return Err(FormatError::Truncated {
            what,
            need: end,
            got: bytes.len(),
        });
    }
    *at = end;
    Ok((0..n).map(|i| get_u32(bytes, start + i * WORD)).collect())
}

fn get_string(bytes: &[u8], at: &mut usize, what: &'static str) -> Result<String, FormatError> {
    let len = word_at(bytes, *at).ok_or_else(|| short(what, bytes, *at))? as usize;
    if len > MAX_STRING_BYTES {
        return Err(inconsistent(what, "length", len as u64));
    }
    let start = *at + WORD;
    let end = start + len.next_multiple_of(WORD);
    if bytes.len() < end {
        return Err(FormatError::Truncated {
            what,
            need: end,
            got: bytes.len(),
        });
    }
    let text = std::str::from_utf8(&bytes[start..start + len])
        .map_err(|_| inconsistent(what, "UTF-8", len as u64))?;
    *at = end;
    Ok(text.to_string())
}

fn put_u32_vec(out: &mut Vec<u8>, w: u32) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// A length, the bytes, spaces up to a whole word (as the EventStorage writer pads).
fn put_string(out: &mut Vec<u8>, s: &str) {
    put_u32_vec(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len().next_multiple_of(WORD), b' ');
}

fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head() -> FileHead {
        FileHead {
            start: FileStart {
                version: FORMAT_VERSION,
                file_number: 1,
                date: 17_032_025,
                time: 120_501,
                size_limit_data_blocks: 0,
                size_limit_mb: 256,
            },
            app_name: "SFO-1".into(),
            file_name_core: "data_test.00000007.physics_Main.daq.RAW._lb0001._SFO-1".into(),
            metadata: vec![
                "GUID=0A1B2C3D-0000-4000-8000-000000000001".into(),
                "Stream=physics_Main".into(),
                "Project=data_test".into(),
                "LumiBlock=1".into(),
            ],
            run: RunParameters {
                run_number: 7,
                max_events: 0,
                rec_enable: 1,
                trigger_type: 0,
                detector_mask: 1 << 70 | 5,
                beam_type: 0,
                beam_energy: 0,
            },
        }
    }

    #[test]
    fn provenance_strings_survive_a_reader_that_splits_at_every_equals_sign() {
        let provenance = Provenance {
            version: "0.4.0".into(),
            git_commit: "abc123-dirty".into(),
            build_flags: "opt-level=3 debug=false rustflags=\"-C target-cpu=native\" 100%3D".into(),
            run_registry: "postgresql://daq@db/runs?sslmode=require".into(),
            run_type: "physics".into(),
            ..Provenance::default()
        };
        let mut h = head();
        h.metadata.extend(provenance_strings(&provenance));
        for m in &h.metadata {
            assert_eq!(m.matches('=').count(), 1, "{m}");
        }
        let (back, _) = FileHead::parse(&h.to_bytes()).unwrap();
        let found = back.provenance();
        let expected: Vec<(&str, String)> = provenance
            .texts()
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        assert_eq!(found, expected);
        assert!(
            head().provenance().is_empty(),
            "ATLAS's own strings are not provenance"
        );
        assert_eq!(unescape("50% off %3"), "50% off %3", "a stray % is kept");
    }

    #[test]
    fn records_sit_where_the_eventstorage_writer_puts_them() {
        let h = head();
        let b = h.to_bytes();
        let w = |i: usize| get_u32(&b, i * 4);
        assert_eq!(
            (0..8).map(w).collect::<Vec<_>>(),
            vec![0x1234aaaa, 8, 6, 1, 17_032_025, 120_501, 0, 256]
        );
        assert_eq!((w(8), w(9)), (0x1234aabb, 5));
        // "SFO-1" padded with spaces to 8 bytes.
        assert_eq!(&b[40..48], b"SFO-1   ");
        let run_at = b.len() - 48;
        assert_eq!(
            (0..12).map(|i| w(run_at / 4 + i)).collect::<Vec<_>>(),
            vec![0x1234bbbb, 12, 7, 0, 1, 0, 5, 0, 64, 0, 0, 0]
        );
        let (back, len) = FileHead::parse(&b).unwrap();
        assert_eq!((back, len), (h.clone(), b.len()));
        assert_eq!(h.metadata_value("LumiBlock"), Some("1"));
        let sep = data_separator(3, 96);
        assert_eq!(sep[..8], [0xcc, 0xcc, 0x34, 0x12, 4, 0, 0, 0]);
        let end = FileEnd {
            date: 1,
            time: 2,
            events_in_file: 3,
            data_in_file_mb: 0,
            events_in_sequence: 3,
            data_in_sequence_mb: 0,
            status: 1,
        };
        let e = end.to_bytes();
        assert_eq!(get_u32(&e, 36), 0x1234eeee);
        assert_eq!(FileEnd::parse(&e).unwrap(), end);
    }

    #[test]
    fn a_version_5_head_is_read_with_its_two_mask_words() {
        let mut b = head().to_bytes();
        b[8] = 5;
        let run_at = b.len() - 48;
        // Drop the two high detector-mask words and the record's size to 10.
        b.drain(run_at + 32..run_at + 40);
        b[run_at + 4] = 10;
        let (h, len) = FileHead::parse(&b).unwrap();
        assert_eq!((h.start.version, h.run.detector_mask, len), (5, 5, b.len()));
    }

    #[test]
    fn dates_are_ddmmyyyy_and_times_hhmmss() {
        // 1970-01-01, DDMMYYYY.
        assert_eq!(date_time(0), (1011970, 0));
        // 2024-02-29 13:45:07 UTC.
        assert_eq!(date_time(1_709_214_307), (29022024, 134507));
        assert_eq!(megabytes((1 << 19) - 1), 0);
        assert_eq!(megabytes(1 << 19), 1);
    }

    #[test]
    fn file_names_as_atlas_builds_and_reads_them() {
        let n = RawFileName {
            project: "data_test".into(),
            run_number: 7,
            stream_type: "physics".into(),
            stream_name: "Main".into(),
            lumi_block: 12,
            app_name: "SFO-1".into(),
            sequence: 1,
        };
        assert_eq!(
            n.finished(),
            "data_test.00000007.physics_Main.daq.RAW._lb0012._SFO-1._0001.data"
        );
        assert_eq!(
            n.writing(),
            "data_test.00000007.physics_Main.daq.RAW._lb0012._SFO-1._0001.writing"
        );
        assert_eq!(RawFileName::parse(&n.finished()), Some(n.clone()));
        assert_eq!(RawFileName::parse(&n.writing()), Some(n));
        for bad in [
            "x.raw",
            "a.1.b_c.daq.RAW._lb1._x",
            "a.b.c_d.daq.RAW._lb0001._x._0001.data",
        ] {
            assert_eq!(RawFileName::parse(bad), None, "{bad}");
        }
    }

    fn file(events: &[&[u8]]) -> (Vec<u8>, usize) {
        let mut b = head().to_bytes();
        let body = b.len();
        for (i, e) in events.iter().enumerate() {
            b.extend(data_separator(i as u32 + 1, e.len() as u32));
            b.extend_from_slice(e);
        }
        b.extend(FileEnd::default().to_bytes());
        (b, body)
    }

    #[test]
    fn records_are_walked_and_damage_skipped() {
        let events: [&[u8]; 3] = [&[1; 8], &[2; 12], &[3; 4]];
        let (b, body) = file(&events);
        let got: Vec<Record> = Records::new(&b, body).collect();
        assert_eq!(got.len(), 4);
        assert!(matches!(got[1], Record::Event { block_number: 2, data, .. } if data == [2; 12]));
        assert!(matches!(got[3], Record::End { .. }));
        // The second separator's marker damaged: the walk picks up at the third event.
        let mut bad = b.clone();
        let second = body + 16 + 8;
        bad[second] ^= 1;
        let got: Vec<Record> = Records::new(&bad, body).collect();
        assert!(
            matches!(got[1], Record::Damaged { offset, .. } if offset == second),
            "{got:?}"
        );
        assert!(matches!(
            got[2],
            Record::Event {
                block_number: 3,
                ..
            }
        ));
        assert!(matches!(got[3], Record::End { .. }));
        // Cut short: the end record is missing and the cut block named.
        let got: Vec<Record> = Records::new(&b[..b.len() - 45], body).collect();
        assert!(
            matches!(got.last(), Some(Record::Damaged { .. })),
            "{got:?}"
        );
    }

    proptest! {
        #[test]
        fn heads_round_trip(app in ".{0,20}", core in ".{0,40}", metadata in proptest::collection::vec(".{0,30}", 0..5), run: u32, mask: u128) {
            let mut h = head();
            h.app_name = app;
            h.file_name_core = core;
            h.metadata = metadata;
            h.run.run_number = run;
            h.run.detector_mask = mask;
            let b = h.to_bytes();
            prop_assert_eq!(b.len() % 4, 0);
            let (back, len) = FileHead::parse(&b).unwrap();
            prop_assert_eq!(back, h);
            prop_assert_eq!(len, b.len());
        }

        #[test]
        fn any_bytes_are_walked_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), at in 0usize..700) {
            let _ = FileHead::parse(&bytes);
            let mut covered = at.min(bytes.len());
            for r in Records::new(&bytes, at.min(bytes.len())) {
                let (offset, len) = match r {
                    Record::Event { offset, data, .. } => (offset, 16 + data.len()),
                    Record::End { offset, .. } => (offset, 40),
                    Record::Damaged { offset, len, .. } => (offset, len),
                };
                // Records tile the file: no byte skipped silently, none read twice.
                prop_assert_eq!(offset, covered);
                covered += len;
            }
            prop_assert_eq!(covered, bytes.len().max(at.min(bytes.len())));
        }

        #[test]
        fn names_round_trip(project in "[a-z0-9_]{1,12}", run: u32, lb in 0u32..10_000, seq in 1u32..10_000, app in "[A-Za-z0-9-]{1,10}") {
            let n = RawFileName { project, run_number: run, stream_type: "physics".into(), stream_name: "Main".into(), lumi_block: lb, app_name: app, sequence: seq };
            prop_assert_eq!(RawFileName::parse(&n.finished()), Some(n));
        }
    }
}
