//! Fragment: one source's answer to one data request, a 72-byte header followed by the
//! payload (frames, TPs, ...). Layout-compatible with DUNE `daqdataformats::FragmentHeader` v5.
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | marker 0x11112222 |
//! | 4..8   | version (= 5) |
//! | 8..16  | size of header + payload in bytes |
//! | 16..24 | trigger number |
//! | 24..32 | trigger timestamp |
//! | 32..40 | window begin (ticks, inclusive) |
//! | 40..48 | window end (ticks, exclusive) |
//! | 48..52 | run number |
//! | 52..56 | error bits ([`fragment_error`]) |
//! | 56..60 | fragment type ([`FragmentType`]) |
//! | 60..62 | sequence number |
//! | 62..64 | detector id |
//! | 64..72 | element id ([`SourceId`]) |

use crate::error::{FormatError, need};
use crate::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::source_id::SourceId;

pub const FRAGMENT_HEADER_SIZE: usize = 72;
pub const FRAGMENT_MARKER: u32 = 0x1111_2222;
pub const FRAGMENT_VERSION: u32 = 5;

/// Error bits of [`FragmentHeader::error_bits`] (DUNE `FragmentErrorBits`), as masks.
pub mod fragment_error {
    /// The requested data was not found at all: the fragment is empty.
    pub const DATA_NOT_FOUND: u32 = 1 << 0;
    /// Only part of the requested data is present.
    pub const INCOMPLETE: u32 = 1 << 1;
    /// The requested window was invalid (empty, reversed or too large).
    pub const INVALID_WINDOW: u32 = 1 << 2;
    /// swdaq: the data in the window crosses a link error (gap, jump, bad header).
    /// DUNE leaves bits 3..31 unassigned.
    pub const DATA_ERROR: u32 = 1 << 3;
    /// swdaq: the request waited for data that never came before the time-out.
    pub const TIMED_OUT: u32 = 1 << 4;

    /// Names of the set bits, for people reading `inspect` output.
    pub fn names(bits: u32) -> Vec<&'static str> {
        [
            (DATA_NOT_FOUND, "DataNotFound"),
            (INCOMPLETE, "Incomplete"),
            (INVALID_WINDOW, "InvalidWindow"),
            (DATA_ERROR, "DataError"),
            (TIMED_OUT, "TimedOut"),
        ]
        .into_iter()
        .filter(|(mask, _)| bits & mask != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// The payload's format (DUNE `FragmentType`). Unknown codes are kept as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FragmentType(pub u32);

impl FragmentType {
    pub const UNKNOWN: Self = Self(0);
    pub const PROTO_WIB: Self = Self(1);
    pub const WIB: Self = Self(2);
    pub const TRIGGER_PRIMITIVE: Self = Self(6);
    pub const TRIGGER_ACTIVITY: Self = Self(7);
    pub const TRIGGER_CANDIDATE: Self = Self(8);
    pub const HARDWARE_SIGNAL: Self = Self(9);
    pub const WIBETH: Self = Self(12);
    /// swdaq: regions of interest of one link ([`crate::roi`]); outside DUNE's codes.
    pub const ROI: Self = Self(100);
    /// swdaq: a detector's own time slices as board frames ([`crate::board_frame`]).
    pub const DETECTOR_FRAMES: Self = Self(101);

    /// DUNE's name for the type, as used in HDF5 dataset names.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "ProtoWIB",
            2 => "WIB",
            6 => "Trigger_Primitive",
            7 => "Trigger_Activity",
            8 => "Trigger_Candidate",
            9 => "Hardware_Signal",
            12 => "WIBEth",
            100 => "ROI",
            101 => "Detector_Frames",
            _ => "Unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Header plus payload, in bytes.
    pub size: u64,
    pub trigger_number: u64,
    pub trigger_timestamp: u64,
    pub window_begin: u64,
    pub window_end: u64,
    pub run_number: u32,
    pub error_bits: u32,
    pub fragment_type: FragmentType,
    pub sequence_number: u16,
    pub detector_id: u16,
    pub element_id: SourceId,
}

impl FragmentHeader {
    pub fn encode(&self, out: &mut [u8]) {
        put_u32(out, 0, FRAGMENT_MARKER);
        put_u32(out, 4, FRAGMENT_VERSION);
        put_u64(out, 8, self.size);
        put_u64(out, 16, self.trigger_number);
        put_u64(out, 24, self.trigger_timestamp);
        put_u64(out, 32, self.window_begin);
        put_u64(out, 40, self.window_end);
        put_u32(out, 48, self.run_number);
        put_u32(out, 52, self.error_bits);
        put_u32(out, 56, self.fragment_type.0);
        put_u16(out, 60, self.sequence_number);
        put_u16(out, 62, self.detector_id);
        self.element_id.encode(&mut out[64..72]);
    }

    pub fn to_bytes(&self) -> [u8; FRAGMENT_HEADER_SIZE] {
        let mut b = [0u8; FRAGMENT_HEADER_SIZE];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "fragment header";
        need(WHAT, b, FRAGMENT_HEADER_SIZE)?;
        let marker = get_u32(b, 0);
        if marker != FRAGMENT_MARKER {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: FRAGMENT_MARKER,
                got: marker,
            });
        }
        let version = get_u32(b, 4);
        if version != FRAGMENT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                supported: FRAGMENT_VERSION,
                got: version,
            });
        }
        Ok(Self {
            size: get_u64(b, 8),
            trigger_number: get_u64(b, 16),
            trigger_timestamp: get_u64(b, 24),
            window_begin: get_u64(b, 32),
            window_end: get_u64(b, 40),
            run_number: get_u32(b, 48),
            error_bits: get_u32(b, 52),
            fragment_type: FragmentType(get_u32(b, 56)),
            sequence_number: get_u16(b, 60),
            detector_id: get_u16(b, 62),
            element_id: SourceId::decode(&b[64..72])?,
        })
    }
}

/// A zero-copy view of a complete fragment: header and payload.
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    pub header: FragmentHeader,
    pub payload: &'a [u8],
}

impl<'a> Fragment<'a> {
    /// Parses a fragment that fills `bytes` exactly (the header's size must match).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let header = FragmentHeader::decode(bytes)?;
        if header.size != bytes.len() as u64 {
            return Err(FormatError::Inconsistent {
                what: "fragment",
                field: "size",
                value: header.size,
            });
        }
        Ok(Self {
            header,
            payload: &bytes[FRAGMENT_HEADER_SIZE..],
        })
    }

    /// Serialises a header and a payload given as a scatter list into one buffer of exactly
    /// the right size (one allocation, no regrowth), setting the header's size.
    pub fn assemble<'p, I>(mut header: FragmentHeader, payload: I) -> Vec<u8>
    where
        I: IntoIterator<Item = &'p [u8]>,
        I::IntoIter: Clone,
    {
        let parts = payload.into_iter();
        let len = FRAGMENT_HEADER_SIZE + parts.clone().map(<[u8]>::len).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        out.resize(FRAGMENT_HEADER_SIZE, 0);
        for part in parts {
            out.extend_from_slice(part);
        }
        header.size = out.len() as u64;
        header.encode(&mut out[..FRAGMENT_HEADER_SIZE]);
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::source_id::Subsystem;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_header()(w in any::<[u64; 5]>(), run_number in any::<u32>(), error_bits in any::<u32>(),
                        fragment_type in any::<u32>(), sequence_number in any::<u16>(), detector_id in any::<u16>(),
                        subsystem in any::<u16>(), id in any::<u32>()) -> FragmentHeader {
            FragmentHeader {
                size: w[0], trigger_number: w[1], trigger_timestamp: w[2], window_begin: w[3], window_end: w[4],
                run_number, error_bits, fragment_type: FragmentType(fragment_type), sequence_number, detector_id,
                element_id: SourceId::new(Subsystem(subsystem), id),
            }
        }
    }

    proptest! {
        #[test]
        fn header_round_trip(h in arb_header()) {
            prop_assert_eq!(FragmentHeader::decode(&h.to_bytes()).unwrap(), h);
        }

        #[test]
        fn fragment_round_trip(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..500)) {
            let bytes = Fragment::assemble(h, [&payload[..]]);
            let f = Fragment::parse(&bytes).unwrap();
            prop_assert_eq!(f.payload, &payload[..]);
            prop_assert_eq!(f.header, FragmentHeader { size: bytes.len() as u64, ..h });
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Fragment::parse(&b);
        }
    }

    #[test]
    fn offsets_match_dune_v5() {
        let h = FragmentHeader {
            size: 72,
            trigger_number: 7,
            trigger_timestamp: 8,
            window_begin: 9,
            window_end: 10,
            run_number: 11,
            error_bits: fragment_error::INCOMPLETE,
            fragment_type: FragmentType::WIBETH,
            sequence_number: 12,
            detector_id: 3,
            element_id: SourceId::readout(13),
        };
        let b = h.to_bytes();
        assert_eq!(&b[0..4], &[0x22, 0x22, 0x11, 0x11]);
        assert_eq!(b[4], 5);
        assert_eq!(
            (
                b[16], b[24], b[32], b[40], b[48], b[52], b[56], b[60], b[62]
            ),
            (7, 8, 9, 10, 11, 2, 12, 12, 3)
        );
        assert_eq!(&b[64..72], &[2, 0, 1, 0, 13, 0, 0, 0]);
    }

    #[test]
    fn bad_marker_version_and_size_are_typed_errors() {
        let h = FragmentHeader::decode(&[0u8; 72]);
        assert!(matches!(h, Err(FormatError::BadMagic { .. })));
        let mut b = Fragment::assemble(arb_fixed(), [&[1u8, 2, 3][..]]);
        b[4] = 4;
        assert!(matches!(
            Fragment::parse(&b),
            Err(FormatError::UnsupportedVersion { got: 4, .. })
        ));
        b[4] = 5;
        assert!(matches!(
            Fragment::parse(&b[..b.len() - 1]),
            Err(FormatError::Inconsistent { field: "size", .. })
        ));
        assert!(matches!(
            Fragment::parse(&b[..10]),
            Err(FormatError::Truncated { .. })
        ));
    }

    fn arb_fixed() -> FragmentHeader {
        FragmentHeader {
            size: 0,
            trigger_number: 1,
            trigger_timestamp: 2,
            window_begin: 3,
            window_end: 4,
            run_number: 5,
            error_bits: 0,
            fragment_type: FragmentType::TRIGGER_PRIMITIVE,
            sequence_number: 0,
            detector_id: 3,
            element_id: SourceId::trigger(1),
        }
    }
}
