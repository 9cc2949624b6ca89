//! ATLAS event format v5: a ROB fragment wrapping one ROD fragment, as a readout system
//! (ROS, SW ROD) hands it to the HLT. Every field is a little-endian 32-bit word; sizes
//! count words. Layout as tdaq-common's eformat v5 writer lays it out
//! (`eformat/write/ROBFragment.h`: the 7-word ROB header `m_header[7]`, the 9-word ROD header,
//! the 3-word ROD trailer; `eformat/Version.h`: `DEFAULT_VERSION = 0x05000000`,
//! `DEFAULT_ROD_VERSION = 0x03010000`; `eformat/Status.h` for the status bits), read in the
//! public copies of the Ish-D/AtlEventProcess repository, `include/eformat/`, commit 5a5a72d.
//!
//! ROB header (`7 + n` words):
//!
//! | word  | field |
//! |-------|-------|
//! | 0     | marker `0xdd1234dd` |
//! | 1     | fragment size (whole ROB, words) |
//! | 2     | header size (words, `7 + n`) |
//! | 3     | format version `0x0500_0000` (major 5 in the upper 16 bits) |
//! | 4     | source id |
//! | 5     | number of status words `n` |
//! | 6..   | status words ([`status`]) |
//! | 6 + n | checksum type (0: none, the only one written and read here) |
//!
//! ROD fragment: header (9 words: marker `0xee1234ee`, header size 9, format version
//! `0x0301_0000`, source id, run number, extended L1 ID, BCID, L1 trigger type, detector
//! event type), data words, status words, trailer (3 words: number of status words, number
//! of data words, status position — 0: status before the data, 1: after; written as 1).
//!
//! swdaq's SW ROD fills the ROD data with one record per e-link chunk: a word
//! `e-link << 16 | length in bytes`, then the chunk padded to whole words (see
//! [`ChunkRecords`]).

use crate::error::{FormatError, need};
use crate::le::{get_u32, put_u32};

pub const ROB_MARKER: u32 = 0xdd12_34dd;
pub const ROD_MARKER: u32 = 0xee12_34ee;
pub const ROB_VERSION: u32 = 0x0500_0000;
pub const ROD_VERSION: u32 = 0x0301_0000;
/// ROB header words besides the status words.
pub const ROB_FIXED_HEADER_WORDS: usize = 7;
pub const ROD_HEADER_WORDS: usize = 9;
pub const ROD_TRAILER_WORDS: usize = 3;
const WORD: usize = 4;

/// Status word bits. The first status word holds generic bits (0..16, eformat's
/// `GenericStatus`) and specific bits (16..32, defined by the producer: the SW ROD's own for
/// its fragments, eformat's `DummyROBStatus` and the ROBIN's `RobinStatus` for a stand-in
/// fragment, whose generic bits say `DUMMY_FRAGMENT`).
pub mod status {
    pub const BCID_CHECK_FAIL: u32 = 0x1;
    pub const L1ID_CHECK_FAIL: u32 = 0x2;
    pub const TIMEOUT: u32 = 0x4;
    pub const DATA_CORRUPTION: u32 = 0x8;
    pub const INTERNAL_OVERFLOW: u32 = 0x10;
    pub const DUMMY_FRAGMENT: u32 = 0x20;
    /// swdaq SW ROD: some e-links did not deliver; status words 1.. are a bitmask of the
    /// missing e-links (bit `i % 32` of word `1 + i / 32` for the ROB's `i`-th e-link).
    pub const MISSING_ELINKS: u32 = 1 << 16;
    /// swdaq SW ROD: a chunk arrived after its fragment was completed (counted, dropped).
    pub const LATE_CHUNKS: u32 = 1 << 17;
    /// swdaq SW ROD: the aggregation plugin failed for this L1 ID (its error counted), so the
    /// ROD data holds the chunks in swdaq's own chunk-record layout instead of the plugin's.
    pub const PLUGIN_FAILED: u32 = 1 << 18;
    /// swdaq SW ROD: the ROD data is the detector's, built by its aggregation plugin, not
    /// swdaq's chunk records: a reader without the detector's code shows it as bytes.
    pub const DETECTOR_PAYLOAD: u32 = 1 << 19;
    /// A stand-in fragment (with `DUMMY_FRAGMENT`): collecting the real one failed
    /// (eformat `DummyROBStatus::COLLECTION_TIMEOUT`).
    pub const COLLECTION_TIMEOUT: u32 = 0x2 << 16;
    /// A stand-in fragment (with `DUMMY_FRAGMENT`): its readout no longer had the fragment
    /// (eformat `RobinStatus::FRAGMENT_LOST`).
    pub const FRAGMENT_LOST: u32 = 0x2000 << 16;

    /// Names of the set bits of a first status word, for people reading dumps.
    pub fn names(word: u32) -> Vec<&'static str> {
        let specific: &[(u32, &str)] = if word & DUMMY_FRAGMENT != 0 {
            &[
                (COLLECTION_TIMEOUT, "CollectionTimeout"),
                (FRAGMENT_LOST, "FragmentLost"),
            ]
        } else {
            &[
                (MISSING_ELINKS, "MissingElinks"),
                (LATE_CHUNKS, "LateChunks"),
                (PLUGIN_FAILED, "PluginFailed"),
                (DETECTOR_PAYLOAD, "DetectorPayload"),
            ]
        };
        [
            (BCID_CHECK_FAIL, "BcidCheckFail"),
            (L1ID_CHECK_FAIL, "L1idCheckFail"),
            (TIMEOUT, "Timeout"),
            (DATA_CORRUPTION, "DataCorruption"),
            (INTERNAL_OVERFLOW, "InternalOverflow"),
            (DUMMY_FRAGMENT, "DummyFragment"),
        ]
        .iter()
        .chain(specific)
        .copied()
        .filter(|(mask, _)| word & mask != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// The ROD header fields that vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RodHeader {
    pub source_id: u32,
    pub run_number: u32,
    /// Extended L1 ID: ECR count in the upper 8 bits, L1 accept count in the lower 24.
    pub l1_id: u32,
    pub bc_id: u32,
    pub l1_trigger_type: u32,
    pub detector_event_type: u32,
}

/// Bytes from the start of a ROB to its ROD data, for `n_rob_status` ROB status words.
pub fn data_offset(n_rob_status: usize) -> usize {
    (ROB_FIXED_HEADER_WORDS + n_rob_status + ROD_HEADER_WORDS) * WORD
}

/// Total bytes of a ROB with `n_rob_status` status words and `data_len` bytes of ROD data.
pub fn rob_size(n_rob_status: usize, data_len: usize) -> usize {
    data_offset(n_rob_status) + data_len + ROD_TRAILER_WORDS * WORD
}

/// Writes the headers and trailer of a ROB around ROD data already at
/// `buf[data_offset(rob_status.len())..][..data_len]` (so builders fill the data in place)
/// and returns the ROB's size. `data_len` must be whole words and `buf` large enough.
pub fn encode_rob(
    buf: &mut [u8],
    rob_source_id: u32,
    rob_status: &[u32],
    rod: &RodHeader,
    data_len: usize,
) -> Result<usize, FormatError> {
    const WHAT: &str = "ROB fragment";
    if !data_len.is_multiple_of(WORD) {
        return Err(FormatError::Inconsistent {
            what: WHAT,
            field: "data length",
            value: data_len as u64,
        });
    }
    let size = rob_size(rob_status.len(), data_len);
    need(WHAT, buf, size)?;
    let header_words = ROB_FIXED_HEADER_WORDS + rob_status.len();
    put_u32(buf, 0, ROB_MARKER);
    put_u32(buf, 4, (size / WORD) as u32);
    put_u32(buf, 8, header_words as u32);
    put_u32(buf, 12, ROB_VERSION);
    put_u32(buf, 16, rob_source_id);
    put_u32(buf, 20, rob_status.len() as u32);
    for (i, s) in rob_status.iter().enumerate() {
        put_u32(buf, 24 + i * WORD, *s);
    }
    put_u32(buf, 24 + rob_status.len() * WORD, 0);
    let rod_at = header_words * WORD;
    let fields = [
        ROD_MARKER,
        ROD_HEADER_WORDS as u32,
        ROD_VERSION,
        rod.source_id,
        rod.run_number,
        rod.l1_id,
        rod.bc_id,
        rod.l1_trigger_type,
        rod.detector_event_type,
    ];
    for (i, f) in fields.into_iter().enumerate() {
        put_u32(buf, rod_at + i * WORD, f);
    }
    let trailer_at = size - ROD_TRAILER_WORDS * WORD;
    put_u32(buf, trailer_at, 0);
    put_u32(buf, trailer_at + 4, (data_len / WORD) as u32);
    put_u32(buf, trailer_at + 8, 1);
    Ok(size)
}

/// A zero-copy view of a ROB fragment and its ROD.
#[derive(Debug, Clone, Copy)]
pub struct RobFragment<'a> {
    pub source_id: u32,
    /// ROB status words, as bytes (read them with [`RobFragment::status`]).
    status: &'a [u8],
    pub rod: RodHeader,
    rod_status: &'a [u8],
    /// The ROD data words, as bytes.
    pub data: &'a [u8],
}

impl<'a> RobFragment<'a> {
    /// Parses a ROB fragment that fills `bytes` exactly.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "ROB fragment";
        let min = rob_size(0, 0);
        need(WHAT, bytes, min)?;
        check_marker(WHAT, get_u32(bytes, 0), ROB_MARKER)?;
        let size_words = get_u32(bytes, 4) as usize;
        let inconsistent = |field, value: usize| FormatError::Inconsistent {
            what: WHAT,
            field,
            value: value as u64,
        };
        if size_words.checked_mul(WORD) != Some(bytes.len()) {
            return Err(inconsistent("fragment size", size_words));
        }
        check_major(WHAT, get_u32(bytes, 12), ROB_VERSION)?;
        let n_status = get_u32(bytes, 20) as usize;
        let header_words = get_u32(bytes, 8) as usize;
        if n_status > size_words || header_words != ROB_FIXED_HEADER_WORDS + n_status {
            return Err(inconsistent("header size", header_words));
        }
        if header_words * WORD + (ROD_HEADER_WORDS + ROD_TRAILER_WORDS) * WORD > bytes.len() {
            return Err(inconsistent("header size", header_words));
        }
        let checksum_type = get_u32(bytes, (6 + n_status) * WORD) as usize;
        if checksum_type != 0 {
            return Err(inconsistent("checksum type", checksum_type));
        }
        let status = &bytes[24..24 + n_status * WORD];
        let rod = &bytes[header_words * WORD..];

        const ROD: &str = "ROD fragment";
        check_marker(ROD, get_u32(rod, 0), ROD_MARKER)?;
        let rod_header_words = get_u32(rod, 4) as usize;
        if rod_header_words != ROD_HEADER_WORDS {
            return Err(inconsistent("ROD header size", rod_header_words));
        }
        check_major(ROD, get_u32(rod, 8), ROD_VERSION)?;
        let trailer = rod.len() - ROD_TRAILER_WORDS * WORD;
        let rod_n_status = get_u32(rod, trailer) as usize;
        let n_data = get_u32(rod, trailer + 4) as usize;
        let body_words = (trailer / WORD) - ROD_HEADER_WORDS;
        if rod_n_status.checked_add(n_data) != Some(body_words) {
            return Err(inconsistent("ROD data size", n_data));
        }
        let body = &rod[ROD_HEADER_WORDS * WORD..trailer];
        let (data, rod_status) = match get_u32(rod, trailer + 8) {
            0 => {
                let (s, d) = body.split_at(rod_n_status * WORD);
                (d, s)
            }
            1 => body.split_at(n_data * WORD),
            other => return Err(inconsistent("status position", other as usize)),
        };
        Ok(Self {
            source_id: get_u32(bytes, 16),
            status,
            rod: RodHeader {
                source_id: get_u32(rod, 12),
                run_number: get_u32(rod, 16),
                l1_id: get_u32(rod, 20),
                bc_id: get_u32(rod, 24),
                l1_trigger_type: get_u32(rod, 28),
                detector_event_type: get_u32(rod, 32),
            },
            rod_status,
            data,
        })
    }

    /// The ROB status words.
    pub fn status(&self) -> impl Iterator<Item = u32> + 'a {
        words(self.status)
    }

    /// The ROD status words.
    pub fn rod_status(&self) -> impl Iterator<Item = u32> + 'a {
        words(self.rod_status)
    }

    /// Builds a ROB fragment in one buffer (tests, tools; the SW ROD builds in place with
    /// [`encode_rob`]). `data` is padded with zeros to whole words.
    pub fn assemble(
        rob_source_id: u32,
        rob_status: &[u32],
        rod: &RodHeader,
        data: &[u8],
    ) -> Vec<u8> {
        let data_len = data.len().next_multiple_of(WORD);
        let mut out = vec![0u8; rob_size(rob_status.len(), data_len)];
        let at = data_offset(rob_status.len());
        out[at..at + data.len()].copy_from_slice(data);
        // Cannot fail: the buffer is sized for it and the length is whole words.
        let _ = encode_rob(&mut out, rob_source_id, rob_status, rod, data_len);
        out
    }
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(WORD)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn check_marker(what: &'static str, got: u32, expected: u32) -> Result<(), FormatError> {
    if got == expected {
        Ok(())
    } else {
        Err(FormatError::BadMagic {
            what,
            expected,
            got,
        })
    }
}

/// Versions agree in their major number (upper 16 bits); minor versions are compatible.
fn check_major(what: &'static str, got: u32, supported: u32) -> Result<(), FormatError> {
    if got >> 16 == supported >> 16 {
        Ok(())
    } else {
        Err(FormatError::UnsupportedVersion {
            what,
            supported,
            got,
        })
    }
}

/// One e-link's chunk in the ROD data of a SW ROD fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRecord<'a> {
    pub elink: u16,
    pub data: &'a [u8],
}

/// Bytes a chunk of `len` bytes takes in the ROD data: a header word and whole words.
#[inline(always)]
pub fn chunk_record_size(len: usize) -> usize {
    WORD + len.next_multiple_of(WORD)
}

/// Writes a chunk record at the start of `out` (which must hold
/// [`chunk_record_size`]`(chunk.len())` bytes; chunks are at most 65535 bytes) and returns
/// its size.
#[inline(always)]
pub fn put_chunk_record(out: &mut [u8], elink: u16, chunk: &[u8]) -> usize {
    let size = chunk_record_size(chunk.len());
    // Zero the last word first, then write over it: the padding is zero without a memset
    // call (for an empty chunk the last word is the header word).
    put_u32(out, size - WORD, 0);
    put_u32(
        out,
        0,
        u32::from(elink) << 16 | (chunk.len() as u32 & 0xFFFF),
    );
    out[WORD..WORD + chunk.len()].copy_from_slice(chunk);
    size
}

/// Walks the chunk records of a SW ROD fragment's ROD data; a record that overruns the data
/// ends the walk with an `Inconsistent` error.
pub struct ChunkRecords<'a> {
    rest: &'a [u8],
}

impl<'a> ChunkRecords<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }
}

impl<'a> Iterator for ChunkRecords<'a> {
    type Item = Result<ChunkRecord<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let bad = |value: usize| FormatError::Inconsistent {
            what: "SW ROD chunk record",
            field: "length",
            value: value as u64,
        };
        if self.rest.len() < WORD {
            self.rest = &[];
            return Some(Err(bad(0)));
        }
        let head = get_u32(self.rest, 0);
        let len = (head & 0xFFFF) as usize;
        let size = chunk_record_size(len);
        if size > self.rest.len() {
            self.rest = &[];
            return Some(Err(bad(len)));
        }
        let record = ChunkRecord {
            elink: (head >> 16) as u16,
            data: &self.rest[WORD..WORD + len],
        };
        self.rest = &self.rest[size..];
        Some(Ok(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        fn arb_rod()(w in any::<[u32; 6]>()) -> RodHeader {
            RodHeader { source_id: w[0], run_number: w[1], l1_id: w[2], bc_id: w[3], l1_trigger_type: w[4], detector_event_type: w[5] }
        }
    }

    #[test]
    fn words_sit_where_eformat_v5_puts_them() {
        let rod = RodHeader {
            source_id: 0x0071_0001,
            run_number: 42,
            l1_id: 0x0100_0007,
            bc_id: 0x123,
            l1_trigger_type: 0x80,
            detector_event_type: 9,
        };
        let b = RobFragment::assemble(0x0071_0001, &[status::TIMEOUT], &rod, &[1, 2, 3, 4]);
        let w: Vec<u32> = words(&b).collect();
        assert_eq!(
            w,
            vec![
                0xdd1234dd,
                21,
                8,
                0x0500_0000,
                0x0071_0001,
                1,
                4,
                0, // ROB header
                0xee1234ee,
                9,
                0x0301_0000,
                0x0071_0001,
                42,
                0x0100_0007,
                0x123,
                0x80,
                9,           // ROD header
                0x0403_0201, // data
                0,
                1,
                1 // ROD trailer
            ]
        );
        assert_eq!(&b[0..4], &[0xdd, 0x34, 0x12, 0xdd]);
    }

    #[test]
    fn bad_fields_are_typed_errors() {
        let good = RobFragment::assemble(1, &[], &RodHeader::default(), &[0; 8]);
        let mut b = good.clone();
        b[0] = 0;
        assert!(matches!(
            RobFragment::parse(&b),
            Err(FormatError::BadMagic { .. })
        ));
        let mut b = good.clone();
        b[15] = 4;
        assert!(matches!(
            RobFragment::parse(&b),
            Err(FormatError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            RobFragment::parse(&good[..good.len() - 4]),
            Err(FormatError::Inconsistent { .. })
        ));
        let mut b = good.clone();
        b[20] = 200; // status count larger than the fragment
        assert!(matches!(
            RobFragment::parse(&b),
            Err(FormatError::Inconsistent { .. })
        ));
        assert!(matches!(
            encode_rob(&mut [0u8; 200], 1, &[], &RodHeader::default(), 3),
            Err(FormatError::Inconsistent { .. })
        ));
    }

    proptest! {
        #[test]
        fn rob_round_trip(source in any::<u32>(), st in proptest::collection::vec(any::<u32>(), 0..8), rod in arb_rod(),
                          data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let b = RobFragment::assemble(source, &st, &rod, &data);
            let f = RobFragment::parse(&b).unwrap();
            prop_assert_eq!(f.source_id, source);
            prop_assert_eq!(f.status().collect::<Vec<_>>(), st);
            prop_assert_eq!(f.rod, rod);
            prop_assert_eq!(f.rod_status().count(), 0);
            prop_assert_eq!(&f.data[..data.len()], &data[..]);
            prop_assert!(f.data[data.len()..].iter().all(|&x| x == 0));
        }

        #[test]
        fn chunk_records_round_trip(chunks in proptest::collection::vec((any::<u16>(), proptest::collection::vec(any::<u8>(), 0..80)), 0..20)) {
            let mut data = vec![0u8; chunks.iter().map(|(_, c)| chunk_record_size(c.len())).sum()];
            let mut at = 0;
            for (e, c) in &chunks {
                at += put_chunk_record(&mut data[at..], *e, c);
            }
            let got: Vec<_> = ChunkRecords::new(&data).map(|r| r.map(|r| (r.elink, r.data.to_vec()))).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, chunks);
        }

        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(f) = RobFragment::parse(&b) {
                prop_assert_eq!(f.status().count() * 4 + f.data.len() + 76 + f.rod_status().count() * 4, b.len());
            }
            for r in ChunkRecords::new(&b) {
                let _ = r;
            }
        }
    }
}
