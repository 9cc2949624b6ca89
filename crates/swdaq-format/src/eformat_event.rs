//! ATLAS full events, eformat v5.0: the event the HLT builds from every ROB's fragment
//! ([`crate::eformat`]). Little-endian 32-bit words.
//!
//! Layout as tdaq-common's eformat v5 writer lays it out (`eformat/write/FullEventFragment.h`
//! and `eformat/FullEventFragmentNoTemplates.h`, `eformat/Version.h`: `DEFAULT_VERSION =
//! 0x05000000`; public copies in the Ish-D/AtlEventProcess repository, `include/eformat/`,
//! commit 5a5a72d). The generic part is the writer's `m_node[0]` and `m_node[1]`, the specific
//! part `m_node[2]` (14 words) followed by the four counted lists (`m_node[3..10]`):
//!
//! | word (s = 6 + n) | field |
//! |------------------|-------|
//! | 0                | marker `0xaa1234aa` |
//! | 1                | fragment size (whole event, words) |
//! | 2                | header size (words: `23 + n` + the four lists' words) |
//! | 3                | format version `0x0500_0000` |
//! | 4                | source id (0: the full event) |
//! | 5                | number of status words `n` |
//! | 6..              | status words |
//! | s + 0            | checksum type (0: none; the only one written and read here) |
//! | s + 1, s + 2     | bunch-crossing time: seconds, nanoseconds |
//! | s + 3, s + 4     | global id, low and high 32 bits |
//! | s + 5            | run type |
//! | s + 6            | run number |
//! | s + 7            | luminosity block (16 bits) |
//! | s + 8            | extended L1 ID |
//! | s + 9            | BCID (12 bits) |
//! | s + 10           | L1 trigger type (8 bits) |
//! | s + 11           | compression type (0: uncompressed, the only one written and read here) |
//! | s + 12           | payload size once uncompressed (words) |
//! | s + 13 ..        | L1 trigger info: count, words; L2 trigger info: count, words; HLT info: count, words; stream tags: count, words |
//!
//! then the ROB fragments, back to back. A missing ROB is a ROB fragment like any other,
//! with no ROD data and a first status word saying why ([`dummy_rob_status`]), as a
//! readout system answers for a fragment it does not have: the event lists every ROB.
//!
//! Stream tags are null-terminated strings padded with nulls to whole words (eformat's
//! `StreamTag.h`); each tag here is its name, type and obeys-lumiblock flag (`"1"` or
//! `"0"`), each null-terminated. eformat's encoder (`StreamTag.cxx`) is not in any public
//! copy found, so that order within a tag follows the header's description and the fields
//! of `eformat::helper::StreamTag`, not the encoder itself.

use crate::eformat::{RobFragment, status};
use crate::error::{FormatError, need};
use crate::le::{get_u32, put_u32};

pub const EVENT_MARKER: u32 = 0xaa12_34aa;
pub const EVENT_VERSION: u32 = 0x0500_0000;
/// Header words besides the status words and the lists' words: 6 generic, 14 specific
/// (the L1 info count among them), 3 more list counts.
pub const EVENT_FIXED_HEADER_WORDS: usize = 23;
const SPECIFIC_WORDS: usize = 14;
const WORD: usize = 4;
const WHAT: &str = "full event";

/// The header fields that vary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub bc_time_seconds: u32,
    pub bc_time_nanoseconds: u32,
    pub global_id: u64,
    pub run_type: u32,
    pub run_number: u32,
    pub lumi_block: u32,
    pub l1_id: u32,
    pub bc_id: u32,
    pub l1_trigger_type: u32,
}

/// The four counted lists of the header, as words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventLists<'a> {
    pub l1_trigger_info: &'a [u32],
    pub l2_trigger_info: &'a [u32],
    pub hlt_info: &'a [u32],
    pub stream_tags: &'a [u32],
}

/// One stream tag: the stream an event goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTag {
    pub name: String,
    /// `physics`, `calibration`, `express`, `debug`, `monitoring`, ...
    pub kind: String,
    /// The event belongs to the luminosity block in its header.
    pub obeys_lumiblock: bool,
}

/// Stream tags as header words: each field null-terminated, nulls up to a whole word.
pub fn encode_stream_tags(tags: &[StreamTag]) -> Vec<u32> {
    let mut bytes = Vec::new();
    for t in tags {
        let flag = if t.obeys_lumiblock { "1" } else { "0" };
        for field in [t.name.as_str(), t.kind.as_str(), flag] {
            bytes.extend_from_slice(field.as_bytes());
            bytes.push(0);
        }
    }
    bytes.resize(bytes.len().next_multiple_of(WORD), 0);
    words(&bytes).collect()
}

/// Stream tags from their header bytes; padding nulls end the list.
pub fn decode_stream_tags(bytes: &[u8]) -> Result<Vec<StreamTag>, FormatError> {
    let bad = |value: usize| FormatError::Inconsistent {
        what: "stream tags",
        field: "strings",
        value: value as u64,
    };
    let mut fields = Vec::new();
    let mut rest = bytes;
    while let Some(end) = rest.iter().position(|&b| b == 0) {
        if end == 0 {
            break; // the padding
        }
        fields.push(std::str::from_utf8(&rest[..end]).map_err(|_| bad(fields.len()))?);
        rest = &rest[end + 1..];
    }
    if rest.iter().any(|&b| b != 0) {
        return Err(bad(fields.len())); // a string without its null, or text in the padding
    }
    if !fields.len().is_multiple_of(3) {
        return Err(bad(fields.len()));
    }
    fields
        .chunks(3)
        .map(|f| {
            let obeys_lumiblock = match f[2] {
                "1" => true,
                "0" => false,
                _ => return Err(bad(fields.len())),
            };
            Ok(StreamTag {
                name: f[0].to_string(),
                kind: f[1].to_string(),
                obeys_lumiblock,
            })
        })
        .collect()
}

/// First status word of a ROB that stands in for one the event builder could not collect:
/// eformat's generic `DUMMY_FRAGMENT`, with `COLLECTION_TIMEOUT` (the request timed out or
/// its server had gone) or the ROBIN's `FRAGMENT_LOST` (the server no longer had it) in the
/// specific half (`eformat/Status.h`).
pub fn dummy_rob_status(lost: bool) -> u32 {
    status::DUMMY_FRAGMENT
        | if lost {
            status::FRAGMENT_LOST
        } else {
            status::COLLECTION_TIMEOUT
        }
}

/// Appends a full event holding `robs` (each a whole ROB fragment, whole words) to `out`.
pub fn encode_event(
    out: &mut Vec<u8>,
    header: &EventHeader,
    status: &[u32],
    lists: &EventLists<'_>,
    robs: &[&[u8]],
) {
    let list_words = [
        lists.l1_trigger_info,
        lists.l2_trigger_info,
        lists.hlt_info,
        lists.stream_tags,
    ];
    let header_words =
        EVENT_FIXED_HEADER_WORDS + status.len() + list_words.iter().map(|l| l.len()).sum::<usize>();
    let payload: usize = robs.iter().map(|r| r.len()).sum();
    let size = header_words * WORD + payload;
    let mut w = Vec::with_capacity(header_words);
    w.extend([
        EVENT_MARKER,
        (size / WORD) as u32,
        header_words as u32,
        EVENT_VERSION,
        0,
        status.len() as u32,
    ]);
    w.extend_from_slice(status);
    w.extend([
        0,
        header.bc_time_seconds,
        header.bc_time_nanoseconds,
        header.global_id as u32,
        (header.global_id >> 32) as u32,
        header.run_type,
        header.run_number,
        header.lumi_block,
        header.l1_id,
        header.bc_id,
        header.l1_trigger_type,
        0,
        (payload / WORD) as u32,
    ]);
    for list in list_words {
        w.push(list.len() as u32);
        w.extend_from_slice(list);
    }
    let start = out.len();
    out.resize(start + header_words * WORD, 0);
    for (i, v) in w.iter().enumerate() {
        put_u32(&mut out[start..], i * WORD, *v);
    }
    for rob in robs {
        out.extend_from_slice(rob);
    }
}

/// A zero-copy view of a full event.
#[derive(Debug, Clone, Copy)]
pub struct FullEvent<'a> {
    pub source_id: u32,
    /// The format version word (major 5; the minor half as written).
    pub version: u32,
    pub header: EventHeader,
    status: &'a [u8],
    l1_trigger_info: &'a [u8],
    l2_trigger_info: &'a [u8],
    hlt_info: &'a [u8],
    stream_tags: &'a [u8],
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
        let header_words = get_u32(bytes, 8) as usize;
        if header_words > size_words {
            return Err(inconsistent("header size", header_words));
        }
        let header = &bytes[..header_words * WORD];
        let n_status = get_u32(bytes, 20) as usize;
        if n_status
            .checked_add(EVENT_FIXED_HEADER_WORDS)
            .is_none_or(|least| header_words < least)
        {
            return Err(inconsistent("header size", header_words));
        }
        let specific = n_status
            .checked_add(6)
            .filter(|s| (s + SPECIFIC_WORDS) * WORD <= header.len())
            .ok_or_else(|| inconsistent("number of status words", n_status))?;
        let w = |i: usize| get_u32(header, (specific + i) * WORD);
        if w(0) != 0 {
            return Err(inconsistent("checksum type", w(0) as usize));
        }
        if w(11) != 0 {
            return Err(inconsistent("compression type", w(11) as usize));
        }
        // The lists: a count, then its words; the last ends the header exactly.
        let mut at = specific + SPECIFIC_WORDS - 1;
        let mut lists = [&bytes[..0]; 4];
        for (i, field) in [
            "L1 trigger info words",
            "L2 trigger info words",
            "HLT info words",
            "stream tag words",
        ]
        .into_iter()
        .enumerate()
        {
            let n = match header.get(at * WORD..at * WORD + WORD) {
                Some(_) => get_u32(header, at * WORD) as usize,
                None => return Err(inconsistent("header size", header_words)),
            };
            let end = at
                .checked_add(1)
                .and_then(|a| a.checked_add(n))
                .filter(|&e| e <= header_words)
                .ok_or_else(|| inconsistent(field, n))?;
            lists[i] = &header[(at + 1) * WORD..end * WORD];
            at = end;
        }
        if at != header_words {
            return Err(inconsistent("header size", header_words));
        }
        let payload = &bytes[header_words * WORD..];
        // eformat reads an uncompressed event's payload from the fragment size: the
        // uncompressed-size word is either that size or left 0.
        let readable = w(12) as usize;
        if readable != 0 && readable * WORD != payload.len() {
            return Err(inconsistent("uncompressed payload size", readable));
        }
        Ok(Self {
            source_id: get_u32(bytes, 16),
            version,
            header: EventHeader {
                bc_time_seconds: w(1),
                bc_time_nanoseconds: w(2),
                global_id: u64::from(w(4)) << 32 | u64::from(w(3)),
                run_type: w(5),
                run_number: w(6),
                lumi_block: w(7),
                l1_id: w(8),
                bc_id: w(9),
                l1_trigger_type: w(10),
            },
            status: &bytes[24..24 + n_status * WORD],
            l1_trigger_info: lists[0],
            l2_trigger_info: lists[1],
            hlt_info: lists[2],
            stream_tags: lists[3],
            payload,
        })
    }

    pub fn status(&self) -> impl Iterator<Item = u32> + 'a {
        words(self.status)
    }

    pub fn l1_trigger_info(&self) -> Vec<u32> {
        words(self.l1_trigger_info).collect()
    }

    pub fn l2_trigger_info(&self) -> Vec<u32> {
        words(self.l2_trigger_info).collect()
    }

    pub fn hlt_info(&self) -> Vec<u32> {
        words(self.hlt_info).collect()
    }

    /// The stream tags' words, as bytes.
    pub fn stream_tag_bytes(&self) -> &'a [u8] {
        self.stream_tags
    }

    pub fn stream_tags(&self) -> Result<Vec<StreamTag>, FormatError> {
        decode_stream_tags(self.stream_tags)
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

    /// Source ids of the ROBs that are stand-ins for ones not collected (first status word
    /// `DUMMY_FRAGMENT`), in event order; ROBs that do not parse are left to [`Self::robs`].
    pub fn missing_robs(&self) -> Vec<u32> {
        self.robs()
            .filter_map(Result::ok)
            .filter(|r| r.status().next().unwrap_or(0) & status::DUMMY_FRAGMENT != 0)
            .map(|r| r.source_id)
            .collect()
    }
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(WORD)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
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

    fn rob(source: u32, l1_id: u32, first_status: u32, data: &[u8]) -> Vec<u8> {
        let rod = RodHeader {
            source_id: source,
            run_number: 7,
            l1_id,
            bc_id: 3,
            l1_trigger_type: 0,
            detector_event_type: 0,
        };
        RobFragment::assemble(source, &[first_status], &rod, data)
    }

    fn main_stream() -> Vec<StreamTag> {
        vec![StreamTag {
            name: "Main".into(),
            kind: "physics".into(),
            obeys_lumiblock: true,
        }]
    }

    #[test]
    fn words_sit_where_the_eformat_v5_writer_puts_them() {
        let header = EventHeader {
            bc_time_seconds: 100,
            bc_time_nanoseconds: 200,
            global_id: 0x1_0000_0009,
            run_type: 0,
            run_number: 7,
            lumi_block: 2,
            l1_id: 0x0100_0005,
            bc_id: 0x123,
            l1_trigger_type: 0x80,
        };
        let r = rob(0x0071_0000, 5, 0, &[1, 2, 3, 4]);
        let tags = encode_stream_tags(&main_stream());
        let lists = EventLists {
            l1_trigger_info: &[0xA, 0xB, 0xC],
            l2_trigger_info: &[],
            hlt_info: &[1],
            stream_tags: &tags,
        };
        let mut b = Vec::new();
        encode_event(&mut b, &header, &[0], &lists, &[&r]);
        let w: Vec<u32> = words(&b).collect();
        // "Main\0physics\01\0" is 15 bytes: 4 words.
        let header_words = 23 + 1 + 3 + 1 + 4;
        assert_eq!(
            w[..header_words],
            [
                0xaa1234aa,
                (header_words + r.len() / 4) as u32,
                header_words as u32,
                0x0500_0000,
                0,
                1,
                0, // status
                0, // checksum type
                100,
                200,
                9,
                1, // global id, low then high
                0,
                7,
                2,
                0x0100_0005,
                0x123,
                0x80,
                0,                    // compression type
                (r.len() / 4) as u32, // uncompressed payload size
                3,
                0xA,
                0xB,
                0xC,
                0, // no L2 info
                1,
                1, // HLT info
                4,
                u32::from_le_bytes(*b"Main"),
                u32::from_le_bytes(*b"\0phy"),
                u32::from_le_bytes(*b"sics"),
                u32::from_le_bytes(*b"\x001\0\0"),
            ]
        );
        assert_eq!(w[header_words], 0xdd1234dd);
        let e = FullEvent::parse(&b).unwrap();
        assert_eq!(e.header, header);
        assert_eq!(e.version, EVENT_VERSION);
        assert_eq!(e.l1_trigger_info(), vec![0xA, 0xB, 0xC]);
        assert_eq!(e.hlt_info(), vec![1]);
        assert_eq!(e.stream_tags().unwrap(), main_stream());
        assert!(e.missing_robs().is_empty());
        let robs: Vec<_> = e.robs().collect::<Result<_, _>>().unwrap();
        assert_eq!(robs[0].source_id, 0x0071_0000);
    }

    #[test]
    fn a_v4_event_a_compressed_one_and_bad_lists_are_named() {
        let r = rob(1, 1, 0, &[0; 8]);
        let mut good = Vec::new();
        encode_event(
            &mut good,
            &EventHeader::default(),
            &[0],
            &EventLists::default(),
            &[&r],
        );
        let mut v4 = good.clone();
        v4[14] = 4;
        assert!(matches!(
            FullEvent::parse(&v4),
            Err(FormatError::UnsupportedVersion { .. })
        ));
        let s = (6 + 1) * 4;
        for (word, field) in [
            (11, "compression type"),
            (0, "checksum type"),
            (12, "uncompressed payload size"),
        ] {
            let mut b = good.clone();
            b[s + word * 4] = 9;
            match FullEvent::parse(&b) {
                Err(FormatError::Inconsistent { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        // An L1 info count running past the header.
        let mut b = good.clone();
        b[s + 13 * 4] = 200;
        assert!(FullEvent::parse(&b).is_err());
        // 0 in the uncompressed-size word is what eformat may leave: read.
        let mut b = good.clone();
        b[s + 12 * 4..s + 13 * 4].fill(0);
        assert!(FullEvent::parse(&b).is_ok());
    }

    #[test]
    fn a_missing_rob_is_a_dummy_fragment_named_by_its_source() {
        let robs = [
            rob(0x0071_0000, 4, 0, &[1; 8]),
            rob(0x0071_0001, 4, dummy_rob_status(false), &[]),
            rob(0x0071_0002, 4, dummy_rob_status(true), &[]),
        ];
        let refs: Vec<&[u8]> = robs.iter().map(Vec::as_slice).collect();
        let mut b = Vec::new();
        encode_event(
            &mut b,
            &EventHeader::default(),
            &[0],
            &EventLists::default(),
            &refs,
        );
        let e = FullEvent::parse(&b).unwrap();
        assert_eq!(e.missing_robs(), vec![0x0071_0001, 0x0071_0002]);
        assert_eq!(
            status::names(dummy_rob_status(true)),
            vec!["DummyFragment", "FragmentLost"]
        );
    }

    #[test]
    fn stream_tags_decode_or_are_named() {
        let tags = vec![
            StreamTag {
                name: "Main".into(),
                kind: "physics".into(),
                obeys_lumiblock: true,
            },
            StreamTag {
                name: "IDMon".into(),
                kind: "calibration".into(),
                obeys_lumiblock: false,
            },
        ];
        let words = encode_stream_tags(&tags);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(decode_stream_tags(&bytes).unwrap(), tags);
        assert_eq!(decode_stream_tags(&[]).unwrap(), vec![]);
        for bad in [
            &b"Main\0physics\0"[..],
            b"Main\0physics\0x\0\0\0\0",
            b"Main",
        ] {
            assert!(decode_stream_tags(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn event_round_trip(status_words in proptest::collection::vec(any::<u32>(), 0..5),
                            l1_id in any::<u32>(), global_id in any::<u64>(), lumi_block in any::<u32>(),
                            l1 in proptest::collection::vec(any::<u32>(), 0..6),
                            hlt in proptest::collection::vec(any::<u32>(), 0..4),
                            names in proptest::collection::vec("[A-Za-z_]{1,12}", 0..3),
                            robs in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..6)) {
            let robs: Vec<Vec<u8>> = robs.iter().map(|(s, d)| rob(*s, l1_id, 0, d)).collect();
            let refs: Vec<&[u8]> = robs.iter().map(Vec::as_slice).collect();
            let tags: Vec<StreamTag> = names.iter().map(|n| StreamTag { name: n.clone(), kind: "physics".into(), obeys_lumiblock: n.len() % 2 == 0 }).collect();
            let tag_words = encode_stream_tags(&tags);
            let lists = EventLists { l1_trigger_info: &l1, l2_trigger_info: &[], hlt_info: &hlt, stream_tags: &tag_words };
            let header = EventHeader { l1_id, global_id, lumi_block, ..EventHeader::default() };
            let mut b = vec![0xAB; 3];
            encode_event(&mut b, &header, &status_words, &lists, &refs);
            let e = FullEvent::parse(&b[3..]).unwrap();
            prop_assert_eq!(e.header, header);
            prop_assert_eq!(e.status().collect::<Vec<_>>(), status_words);
            prop_assert_eq!(e.l1_trigger_info(), l1);
            prop_assert_eq!(e.hlt_info(), hlt);
            prop_assert_eq!(e.stream_tags().unwrap(), tags);
            let got: Vec<u32> = e.robs().map(|r| r.map(|r| r.source_id)).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, robs.iter().map(|r| u32::from_le_bytes(r[16..20].try_into().unwrap())).collect::<Vec<_>>());
        }

        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(e) = FullEvent::parse(&b) {
                let _ = e.missing_robs();
                let _ = e.stream_tags();
                for r in e.robs() {
                    let _ = r;
                }
            }
            let _ = decode_stream_tags(&b);
        }
    }
}
