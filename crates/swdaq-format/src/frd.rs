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
    /// swdaq: at least one readout unit's data is missing (CMS leaves bits 1..15 unassigned).
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
