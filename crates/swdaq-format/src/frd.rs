//! CMS FRD ("FED raw data") events and the files that carry them to the filter farm
//! (CMSSW `FRDEventMessage.h` version 6, `FRDFileHeader.h` version 2). All fields little-endian.
//!
//! Event header, version 6, followed by `event_size` bytes of FED fragments back to back
//! (read backwards from the last trailer, [`crate::fed::FedFragment::parse_last`]):
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..2   | version (= 6) |
//! | 2..4   | flags ([`frd_flags`]) |
//! | 4..8   | run number |
//! | 8..12  | lumi section |
//! | 12..16 | event number |
//! | 16..20 | payload size in bytes (header excluded) |
//! | 20..24 | CRC32C of the payload |
//!
//! File header `RAW_0002`, then the events:
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | id `RAW_` |
//! | 4..8   | version `0002` |
//! | 8..10  | header size (= 32) |
//! | 10..12 | data type (0: FRD events) |
//! | 12..16 | event count |
//! | 16..20 | run number |
//! | 20..24 | lumi section |
//! | 24..32 | file size in bytes, header included |

use crate::crc::crc32c;
use crate::error::{FormatError, exact, need};
use crate::input_file::{OnePass, offsets_of};
use crate::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

pub const FRD_EVENT_VERSION: u16 = 6;
pub const FRD_EVENT_HEADER_SIZE: usize = 24;
pub const FRD_FILE_ID: [u8; 4] = *b"RAW_";
pub const FRD_FILE_VERSION: [u8; 4] = *b"0002";
pub const FRD_FILE_HEADER_SIZE: usize = 32;
/// `dataType` of a file of FRD events.
pub const FRD_DATA_TYPE_EVENTS: u16 = 0;

/// Flag bits of [`FrdEventHeader::flags`].
pub mod frd_flags {
    /// CMS: the event is simulated (`FRDEVENT_MASK_ISGENDATA`).
    pub const GENERATED: u16 = 1 << 0;
    /// swdaq: a readout unit's data or a FED's fragment is missing (CMS leaves bits 1..15
    /// unassigned).
    pub const INCOMPLETE: u16 = 1 << 15;
}

/// The 24-byte header in front of every built event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrdEventHeader {
    pub flags: u16,
    pub run: u32,
    pub lumi: u32,
    pub event: u32,
    /// Payload bytes after the header.
    pub event_size: u32,
    /// CRC32C of the payload.
    pub crc32c: u32,
}

impl FrdEventHeader {
    const WHAT: &'static str = "FRD event header";

    pub fn to_bytes(&self) -> [u8; FRD_EVENT_HEADER_SIZE] {
        let mut b = [0u8; FRD_EVENT_HEADER_SIZE];
        put_u16(&mut b, 0, FRD_EVENT_VERSION);
        put_u16(&mut b, 2, self.flags);
        put_u32(&mut b, 4, self.run);
        put_u32(&mut b, 8, self.lumi);
        put_u32(&mut b, 12, self.event);
        put_u32(&mut b, 16, self.event_size);
        put_u32(&mut b, 20, self.crc32c);
        b
    }

    /// Reads the first 24 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FRD_EVENT_HEADER_SIZE)?;
        let version = get_u16(bytes, 0);
        if version != FRD_EVENT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: Self::WHAT,
                supported: FRD_EVENT_VERSION as u32,
                got: version as u32,
            });
        }
        Ok(Self {
            flags: get_u16(bytes, 2),
            run: get_u32(bytes, 4),
            lumi: get_u32(bytes, 8),
            event: get_u32(bytes, 12),
            event_size: get_u32(bytes, 16),
            crc32c: get_u32(bytes, 20),
        })
    }
}

/// One FRD event viewed in place.
#[derive(Debug, Clone, Copy)]
pub struct FrdEvent<'a> {
    pub header: FrdEventHeader,
    pub payload: &'a [u8],
}

impl<'a> FrdEvent<'a> {
    const WHAT: &'static str = "FRD event";

    /// The event at the start of `bytes` and what follows it.
    pub fn parse_first(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), FormatError> {
        let header = FrdEventHeader::parse(bytes)?;
        let end = FRD_EVENT_HEADER_SIZE + header.event_size as usize;
        need(Self::WHAT, bytes, end)?;
        Ok((
            Self {
                header,
                payload: &bytes[FRD_EVENT_HEADER_SIZE..end],
            },
            &bytes[end..],
        ))
    }

    pub fn crc_ok(&self) -> bool {
        crc32c(self.payload) == self.header.crc32c
    }
}

/// The `RAW_0002` header at the start of every FRD file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrdFileHeader {
    pub data_type: u16,
    pub event_count: u32,
    pub run: u32,
    pub lumi: u32,
    /// Whole file, header included.
    pub file_size: u64,
}

impl FrdFileHeader {
    const WHAT: &'static str = "FRD file header";

    pub fn to_bytes(&self) -> [u8; FRD_FILE_HEADER_SIZE] {
        let mut b = [0u8; FRD_FILE_HEADER_SIZE];
        b[0..4].copy_from_slice(&FRD_FILE_ID);
        b[4..8].copy_from_slice(&FRD_FILE_VERSION);
        put_u16(&mut b, 8, FRD_FILE_HEADER_SIZE as u16);
        put_u16(&mut b, 10, self.data_type);
        put_u32(&mut b, 12, self.event_count);
        put_u32(&mut b, 16, self.run);
        put_u32(&mut b, 20, self.lumi);
        put_u64(&mut b, 24, self.file_size);
        b
    }

    /// Reads the first 32 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FRD_FILE_HEADER_SIZE)?;
        let b: &[u8; FRD_FILE_HEADER_SIZE] = exact(Self::WHAT, &bytes[..FRD_FILE_HEADER_SIZE])?;
        if b[0..4] != FRD_FILE_ID {
            return Err(FormatError::BadMagic {
                what: Self::WHAT,
                expected: u32::from_le_bytes(FRD_FILE_ID),
                got: get_u32(b, 0),
            });
        }
        if b[4..8] != FRD_FILE_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: Self::WHAT,
                supported: 2,
                got: get_u32(b, 4),
            });
        }
        let header_size = get_u16(b, 8);
        if header_size as usize != FRD_FILE_HEADER_SIZE {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "header size",
                value: header_size as u64,
            });
        }
        Ok(Self {
            data_type: get_u16(b, 10),
            event_count: get_u32(b, 12),
            run: get_u32(b, 16),
            lumi: get_u32(b, 20),
            file_size: get_u64(b, 24),
        })
    }
}

/// A whole FRD file in memory: its header, checked against the bytes, and its events.
pub struct FrdFile<'a> {
    pub header: FrdFileHeader,
    events: &'a [u8],
}

impl<'a> FrdFile<'a> {
    const WHAT: &'static str = "FRD file";

    /// Checks the header against `bytes` (file size); events are read by [`FrdFile::events`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let header = FrdFileHeader::parse(bytes)?;
        if header.file_size != bytes.len() as u64 {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "file size",
                value: header.file_size,
            });
        }
        Ok(Self {
            header,
            events: &bytes[FRD_FILE_HEADER_SIZE..],
        })
    }

    /// The events in file order; a malformed event ends the iteration with its error.
    pub fn events(&self) -> impl Iterator<Item = Result<FrdEvent<'a>, FormatError>> + use<'a> {
        let mut rest = self.events;
        let mut failed = false;
        std::iter::from_fn(move || {
            if rest.is_empty() || failed {
                return None;
            }
            match FrdEvent::parse_first(rest) {
                Ok((event, after)) => {
                    rest = after;
                    Some(Ok(event))
                }
                Err(e) => {
                    failed = true;
                    Some(Err(e))
                }
            }
        })
    }
}

/// One step of [`FrdScan`]: an event, or bytes that hold no intact event.
#[derive(Debug, Clone)]
pub enum FrdItem<'a> {
    /// An event whose header parses and whose declared size fits the file; its CRC32C may
    /// still fail ([`FrdEvent::crc_ok`]). `offset` counts from the start of the file.
    Event { offset: usize, event: FrdEvent<'a> },
    /// `len` bytes at `offset` that are no intact event, and why.
    Damaged {
        offset: usize,
        len: usize,
        error: FormatError,
    },
}

/// A tolerant walk through an FRD file's events, for readers that must show every intact
/// event of a damaged file. Where an event header does not parse (or the file ends inside
/// the event) it scans forward for the next intact event: a version-6 header whose payload
/// fits the file and matches its CRC32C (and, when known, carries the file's run number).
/// An event whose CRC32C fails is checked the same way for an intact event starting inside
/// it: its size field was then wrong, and its bytes up to that event are one damaged span.
pub struct FrdScan<'a> {
    bytes: &'a [u8],
    at: usize,
    run: Option<u32>,
    /// Told as the walk goes which bytes it is done with.
    passed: Box<dyn Fn(usize) + 'a>,
}

impl<'a> FrdScan<'a> {
    /// Walks `file` (the whole file, header included) from byte `start`; `run`, when known,
    /// is the run every event must carry to count as intact while resynchronising.
    pub fn new(file: &'a [u8], start: usize, run: Option<u32>) -> Self {
        Self {
            bytes: file,
            at: start.min(file.len()),
            run,
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

    fn intact_at(&self, at: usize) -> bool {
        FrdEvent::parse_first(&self.bytes[at..])
            .is_ok_and(|(e, _)| self.run.is_none_or(|run| e.header.run == run) && e.crc_ok())
    }

    /// The first offset in `from..to` where an intact event starts.
    fn next_intact(&self, from: usize, to: usize) -> Option<usize> {
        let [version, _] = FRD_EVENT_VERSION.to_le_bytes();
        offsets_of(self.bytes, (from, to), (version, version), &*self.passed)
            .find(|&at| self.intact_at(at))
    }
}

impl<'a> Iterator for FrdScan<'a> {
    type Item = FrdItem<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let offset = self.at;
        if offset >= self.bytes.len() {
            return None;
        }
        (self.passed)(offset);
        let damaged = |next: usize, error| FrdItem::Damaged {
            offset,
            len: next - offset,
            error,
        };
        match FrdEvent::parse_first(&self.bytes[offset..]) {
            Ok((event, _)) => {
                let end = offset + FRD_EVENT_HEADER_SIZE + event.payload.len();
                if !event.crc_ok()
                    && let Some(next) = self.next_intact(offset + 1, end)
                {
                    self.at = next;
                    return Some(damaged(
                        next,
                        FormatError::Inconsistent {
                            what: "FRD event (an intact event starts inside it)",
                            field: "event size",
                            value: u64::from(event.header.event_size),
                        },
                    ));
                }
                self.at = end;
                Some(FrdItem::Event { offset, event })
            }
            Err(error) => {
                let next = self
                    .next_intact(offset + 1, self.bytes.len())
                    .unwrap_or(self.bytes.len());
                self.at = next;
                Some(damaged(next, error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event_bytes(header: FrdEventHeader, payload: &[u8]) -> Vec<u8> {
        let header = FrdEventHeader {
            event_size: payload.len() as u32,
            crc32c: crc32c(payload),
            ..header
        };
        let mut v = header.to_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    proptest! {
        #[test]
        fn event_header_round_trip(flags: u16, run: u32, lumi: u32, event: u32, event_size: u32, crc: u32) {
            let h = FrdEventHeader { flags, run, lumi, event, event_size, crc32c: crc };
            prop_assert_eq!(FrdEventHeader::parse(&h.to_bytes()).unwrap(), h);
        }

        #[test]
        fn file_header_round_trip(data_type: u16, event_count: u32, run: u32, lumi: u32, file_size: u64) {
            let h = FrdFileHeader { data_type, event_count, run, lumi, file_size };
            prop_assert_eq!(FrdFileHeader::parse(&h.to_bytes()).unwrap(), h);
        }

        #[test]
        fn file_of_events_reads_back(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8), run: u32, lumi: u32) {
            let mut body = Vec::new();
            for (i, p) in payloads.iter().enumerate() {
                body.extend(event_bytes(FrdEventHeader { run, lumi, event: i as u32, ..Default::default() }, p));
            }
            let header = FrdFileHeader {
                data_type: FRD_DATA_TYPE_EVENTS, event_count: payloads.len() as u32, run, lumi,
                file_size: (FRD_FILE_HEADER_SIZE + body.len()) as u64,
            };
            let mut file = header.to_bytes().to_vec();
            file.extend(body);
            let parsed = FrdFile::parse(&file).unwrap();
            prop_assert_eq!(parsed.header, header);
            let events: Vec<_> = parsed.events().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(events.len(), payloads.len());
            for (e, p) in events.iter().zip(&payloads) {
                prop_assert_eq!(e.payload, &p[..]);
                prop_assert!(e.crc_ok());
            }
        }

        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = FrdEventHeader::parse(&bytes);
            let _ = FrdFileHeader::parse(&bytes);
            if let Ok(f) = FrdFile::parse(&bytes) {
                for e in f.events().flatten() { let _ = e.crc_ok(); }
            }
        }
    }

    fn file_of(payloads: &[Vec<u8>], run: u32) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            body.extend(event_bytes(
                FrdEventHeader {
                    run,
                    event: i as u32,
                    ..Default::default()
                },
                p,
            ));
        }
        let header = FrdFileHeader {
            event_count: payloads.len() as u32,
            run,
            file_size: (FRD_FILE_HEADER_SIZE + body.len()) as u64,
            ..Default::default()
        };
        let mut file = header.to_bytes().to_vec();
        file.extend(body);
        file
    }

    /// Where the events a scan found intact start.
    fn intact(file: &[u8], run: u32) -> Vec<usize> {
        FrdScan::new(file, FRD_FILE_HEADER_SIZE, Some(run))
            .filter_map(|item| match item {
                FrdItem::Event { offset, event } if event.crc_ok() => Some(offset),
                _ => None,
            })
            .collect()
    }

    proptest! {
        /// Any bytes: the scan's items tile the file from the start offset, never a panic.
        #[test]
        fn scan_tiles_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600), start in 0usize..64, run: Option<u32>) {
            let mut at = start.min(bytes.len());
            for item in FrdScan::new(&bytes, start, run) {
                let (offset, len) = match item {
                    FrdItem::Event { offset, event } => (offset, FRD_EVENT_HEADER_SIZE + event.payload.len()),
                    FrdItem::Damaged { offset, len, .. } => (offset, len),
                };
                prop_assert_eq!(offset, at);
                prop_assert!(len > 0);
                at += len;
            }
            prop_assert_eq!(at, bytes.len().max(start.min(bytes.len())));
        }

        /// A good file scans back to its events; one damaged byte in an event's header, or a
        /// file cut short, loses at most that event (the one cut).
        #[test]
        fn scan_keeps_every_other_event(
            payloads in proptest::collection::vec(proptest::collection::vec(1u8..=255, 8..200), 1..8),
            victim: proptest::sample::Index, byte in 0usize..FRD_EVENT_HEADER_SIZE, flip in 1u8..=255,
            cut in 0usize..4,
        ) {
            let run = 0x5eed;
            let file = file_of(&payloads, run);
            let starts: Vec<usize> = payloads
                .iter()
                .scan(FRD_FILE_HEADER_SIZE, |at, p| {
                    let start = *at;
                    *at += FRD_EVENT_HEADER_SIZE + p.len();
                    Some(start)
                })
                .collect();
            prop_assert_eq!(intact(&file, run), starts.clone());
            let at = starts[victim.index(payloads.len())];
            let mut damaged = file.clone();
            damaged[at + byte] ^= flip;
            let others: Vec<usize> = starts.iter().copied().filter(|&s| s != at).collect();
            let found: Vec<usize> = intact(&damaged, run).into_iter().filter(|&s| s != at).collect();
            prop_assert_eq!(found, others);
            let cut_file = &file[..file.len() - 1 - cut];
            prop_assert_eq!(intact(cut_file, run), starts[..starts.len() - 1].to_vec());
        }
    }

    #[test]
    fn corruption_is_typed() {
        let ev = event_bytes(FrdEventHeader::default(), b"abcdefgh");
        let mut bad_version = ev.clone();
        bad_version[0] = 5;
        assert!(matches!(
            FrdEventHeader::parse(&bad_version),
            Err(FormatError::UnsupportedVersion { got: 5, .. })
        ));
        assert!(matches!(
            FrdEvent::parse_first(&ev[..ev.len() - 1]),
            Err(FormatError::Truncated { .. })
        ));
        let mut bad_crc = ev.clone();
        bad_crc[FRD_EVENT_HEADER_SIZE] ^= 1;
        assert!(!FrdEvent::parse_first(&bad_crc).unwrap().0.crc_ok());
        let mut file = FrdFileHeader {
            file_size: 33,
            ..Default::default()
        }
        .to_bytes()
        .to_vec();
        assert!(matches!(
            FrdFile::parse(&file),
            Err(FormatError::Inconsistent {
                field: "file size",
                ..
            })
        ));
        file[3] = b'X';
        assert!(matches!(
            FrdFileHeader::parse(&file),
            Err(FormatError::BadMagic { .. })
        ));
    }
}
