//! ATLAS full-event fragments: the event the HLT builds from every ROB's fragment
//! ([`crate::eformat`]), as the SW ROD run stores it. Little-endian 32-bit words.
//!
//! Header (`20 + n` words), laid out as ATLAS eformat's full-event writer lays out its
//! header (checked against athena's `offline_eformat` `v40_write/FullEventFragment.h`:
//! generic part in words 0..6+n, then the specific part read from `m_node[2]`):
//!
//! | word       | field |
//! |------------|-------|
//! | 0          | marker `0xaa1234aa` |
//! | 1          | fragment size (whole event, words) |
//! | 2          | header size (words, `20 + n`) |
//! | 3          | format version `0x0400_0000` (the version of the layout above) |
//! | 4          | source id (0: the full-event sub-detector) |
//! | 5          | number of status words `n` |
//! | 6..        | status words |
//! | 6 + n      | checksum type (0: none) |
//! | 7 + n, 8 + n | bunch-crossing time: seconds, nanoseconds |
//! | 9 + n      | global id |
//! | 10 + n     | run type |
//! | 11 + n     | run number |
//! | 12 + n     | luminosity block |
//! | 13 + n     | extended L1 ID |
//! | 14 + n     | BCID |
//! | 15 + n     | L1 trigger type |
//! | 16 + n ..  | four counted lists (count word, then words): L1 trigger info, L2 trigger info, event-filter info, stream tags; written empty |
//!
//! then the ROB fragments, back to back. eformat v5 grew this header (64-bit global id,
//! compression fields); that layout was not verified, so it is not written.
//!
//! swdaq's status: the first word has [`MISSING_ROBS`] when ROBs are missing, and each
//! following word is the source id of one missing ROB.

use crate::eformat::RobFragment;
use crate::error::{FormatError, need};
use crate::fragment::FragmentType;
use crate::le::{get_u32, put_u32};

/// Frame type of swdaq raw files holding full events, one a record ("EVT").
pub const RAW_FILE_TYPE: FragmentType = FragmentType(0x0045_5654);

pub const EVENT_MARKER: u32 = 0xaa12_34aa;
pub const EVENT_VERSION: u32 = 0x0400_0000;
/// Header words besides the status words: 6 generic, 10 fixed specific, 4 list counts.
pub const EVENT_FIXED_HEADER_WORDS: usize = 20;
/// First status word bit (a producer-specific bit): ROBs are missing, named by the
/// following status words.
pub const MISSING_ROBS: u32 = 1 << 16;
const WORD: usize = 4;
const WHAT: &str = "full event";

/// The header fields that vary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub bc_time_seconds: u32,
    pub bc_time_nanoseconds: u32,
    pub global_id: u32,
    pub run_type: u32,
    pub run_number: u32,
    pub lumi_block: u32,
    pub l1_id: u32,
    pub bc_id: u32,
    pub l1_trigger_type: u32,
}

/// The status words of an event missing the ROBs `missing` (none: one zero word).
pub fn event_status(missing: &[u32]) -> Vec<u32> {
    if missing.is_empty() {
        return vec![0];
    }
    std::iter::once(MISSING_ROBS)
        .chain(missing.iter().copied())
        .collect()
}

/// Appends a full event holding `robs` (each a whole ROB fragment, whole words) to `out`.
pub fn encode_event(out: &mut Vec<u8>, header: &EventHeader, status: &[u32], robs: &[&[u8]]) {
    let header_words = EVENT_FIXED_HEADER_WORDS + status.len();
    let payload: usize = robs.iter().map(|r| r.len()).sum();
    let size = header_words * WORD + payload;
    let start = out.len();
    out.resize(start + header_words * WORD, 0);
    let b = &mut out[start..];
    let generic = [
        EVENT_MARKER,
        (size / WORD) as u32,
        header_words as u32,
        EVENT_VERSION,
        0,
        status.len() as u32,
    ];
    for (i, w) in generic.iter().chain(status).enumerate() {
        put_u32(b, i * WORD, *w);
    }
    let specific = [
        0,
        header.bc_time_seconds,
        header.bc_time_nanoseconds,
        header.global_id,
        header.run_type,
        header.run_number,
        header.lumi_block,
        header.l1_id,
        header.bc_id,
        header.l1_trigger_type,
    ];
    let at = (6 + status.len()) * WORD;
    for (i, w) in specific.iter().enumerate() {
        put_u32(b, at + i * WORD, *w);
    }
    // The four list counts stay zero.
    for rob in robs {
        out.extend_from_slice(rob);
    }
}

/// A zero-copy view of a full event.
#[derive(Debug, Clone, Copy)]
pub struct FullEvent<'a> {
    pub source_id: u32,
    pub header: EventHeader,
    status: &'a [u8],
    payload: &'a [u8],
}

impl<'a> FullEvent<'a> {
    /// Parses a full event that fills `bytes` exactly (its ROBs are parsed by [`Self::robs`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        need(WHAT, bytes, EVENT_FIXED_HEADER_WORDS * WORD)?;
        let inconsistent = |field, value: usize| FormatError::Inconsistent {
            what: WHAT,
            field,
            value: value as u64,
        };
        let marker = get_u32(bytes, 0);
        if marker != EVENT_MARKER {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: EVENT_MARKER,
                got: marker,
            });
        }
        let size_words = get_u32(bytes, 4) as usize;
        if size_words.checked_mul(WORD) != Some(bytes.len()) {
            return Err(inconsistent("fragment size", size_words));
        }
        let version = get_u32(bytes, 12);
        if version >> 16 != EVENT_VERSION >> 16 {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                supported: EVENT_VERSION,
                got: version,
            });
        }
        let n_status = get_u32(bytes, 20) as usize;
        let header_words = get_u32(bytes, 8) as usize;
        if n_status > size_words
            || header_words != EVENT_FIXED_HEADER_WORDS + n_status
            || header_words > size_words
        {
            return Err(inconsistent("header size", header_words));
        }
        let at = (6 + n_status) * WORD;
        let w = |i: usize| get_u32(bytes, at + i * WORD);
        if w(0) != 0 {
            return Err(inconsistent("checksum type", w(0) as usize));
        }
        for (field, i) in [
            ("L1 trigger info words", 10),
            ("L2 trigger info words", 11),
            ("event filter info words", 12),
            ("stream tag words", 13),
        ] {
            // Lists are not written: a count would move the payload, which is not read here.
            if w(i) != 0 {
                return Err(inconsistent(field, w(i) as usize));
            }
        }
        Ok(Self {
            source_id: get_u32(bytes, 16),
            header: EventHeader {
                bc_time_seconds: w(1),
                bc_time_nanoseconds: w(2),
                global_id: w(3),
                run_type: w(4),
                run_number: w(5),
                lumi_block: w(6),
                l1_id: w(7),
                bc_id: w(8),
                l1_trigger_type: w(9),
            },
            status: &bytes[24..24 + n_status * WORD],
            payload: &bytes[header_words * WORD..],
        })
    }

    pub fn status(&self) -> impl Iterator<Item = u32> + 'a {
        self.status
            .chunks_exact(WORD)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }

    /// Source ids of the ROBs the event says are missing.
    pub fn missing_robs(&self) -> Vec<u32> {
        let mut status = self.status();
        match status.next() {
            Some(first) if first & MISSING_ROBS != 0 => status.collect(),
            _ => Vec::new(),
        }
    }

    /// The ROB fragments, back to back.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The ROB fragments in order; one whose size word overruns the event ends the walk
    /// with an error.
    pub fn robs(&self) -> RobIter<'a> {
        RobIter { rest: self.payload }
    }
}

pub struct RobIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for RobIter<'a> {
    type Item = Result<RobFragment<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let len = if self.rest.len() >= 2 * WORD {
            (get_u32(self.rest, WORD) as usize).checked_mul(WORD)
        } else {
            None
        };
        match len {
            Some(len) if len > 0 && len <= self.rest.len() => {
                let (rob, rest) = self.rest.split_at(len);
                self.rest = rest;
                Some(RobFragment::parse(rob))
            }
            _ => {
                let value = self.rest.len() as u64;
                self.rest = &[];
                Some(Err(FormatError::Inconsistent {
                    what: WHAT,
                    field: "ROB fragment size",
                    value,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eformat::RodHeader;
    use proptest::prelude::*;

    fn rob(source: u32, l1_id: u32, data: &[u8]) -> Vec<u8> {
        let rod = RodHeader {
            source_id: source,
            run_number: 7,
            l1_id,
            bc_id: 3,
            l1_trigger_type: 0,
            detector_event_type: 0,
        };
        RobFragment::assemble(source, &[0], &rod, data)
    }

    #[test]
    fn words_sit_where_the_eformat_writer_puts_them() {
        let header = EventHeader {
            bc_time_seconds: 100,
            bc_time_nanoseconds: 200,
            global_id: 9,
            run_type: 0,
            run_number: 7,
            lumi_block: 1,
            l1_id: 0x0100_0005,
            bc_id: 0x123,
            l1_trigger_type: 0x80,
        };
        let r = rob(0x0071_0000, 5, &[1, 2, 3, 4]);
        let mut b = Vec::new();
        encode_event(&mut b, &header, &event_status(&[0x0071_0001]), &[&r]);
        let w: Vec<u32> = b
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let header_words = 22;
        assert_eq!(
            w[..header_words],
            [
                0xaa1234aa,
                (header_words + r.len() / 4) as u32,
                header_words as u32,
                0x0400_0000,
                0,
                2,
                MISSING_ROBS,
                0x0071_0001,
                0, // checksum type
                100,
                200,
                9,
                0,
                7,
                1,
                0x0100_0005,
                0x123,
                0x80,
                0,
                0,
                0,
                0,
            ]
        );
        assert_eq!(w[header_words], 0xdd1234dd);
        let e = FullEvent::parse(&b).unwrap();
        assert_eq!(e.header, header);
        assert_eq!(e.missing_robs(), vec![0x0071_0001]);
        let robs: Vec<_> = e.robs().collect::<Result<_, _>>().unwrap();
        assert_eq!(robs.len(), 1);
        assert_eq!(robs[0].source_id, 0x0071_0000);
    }

    #[test]
    fn a_rob_overrunning_the_event_is_an_error() {
        let r = rob(1, 1, &[0; 8]);
        let mut b = Vec::new();
        encode_event(&mut b, &EventHeader::default(), &[0], &[&r]);
        // Make the ROB claim one word more than the event holds (event size kept).
        let at = EVENT_FIXED_HEADER_WORDS * 4 + 4 + 4;
        let words = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        b[at..at + 4].copy_from_slice(&(words + 1).to_le_bytes());
        let e = FullEvent::parse(&b).unwrap();
        let got: Vec<_> = e.robs().collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].is_err());
    }

    proptest! {
        #[test]
        fn event_round_trip(missing in proptest::collection::vec(any::<u32>(), 0..5),
                            l1_id in any::<u32>(), global_id in any::<u32>(),
                            robs in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..6)) {
            let robs: Vec<Vec<u8>> = robs.iter().map(|(s, d)| rob(*s, l1_id, d)).collect();
            let refs: Vec<&[u8]> = robs.iter().map(Vec::as_slice).collect();
            let header = EventHeader { l1_id, global_id, ..EventHeader::default() };
            let mut b = vec![0xAB; 3];
            encode_event(&mut b, &header, &event_status(&missing), &refs);
            let e = FullEvent::parse(&b[3..]).unwrap();
            prop_assert_eq!(e.header, header);
            prop_assert_eq!(e.missing_robs(), missing);
            let got: Vec<u32> = e.robs().map(|r| r.map(|r| r.source_id)).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, robs.iter().map(|r| u32::from_le_bytes(r[16..20].try_into().unwrap())).collect::<Vec<_>>());
        }

        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(e) = FullEvent::parse(&b) {
                let _ = e.missing_robs();
                for r in e.robs() {
                    let _ = r;
                }
            }
        }
    }
}
