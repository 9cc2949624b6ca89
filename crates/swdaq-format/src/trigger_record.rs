//! Trigger-record header: what a record is and which components were asked for,
//! layout-compatible with DUNE `daqdataformats::TriggerRecordHeaderData` v4 followed by
//! `num_requested_components` `ComponentRequest`s of 32 bytes each.
//!
//! Header data (64 bytes):
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | marker 0x33334444 |
//! | 4..8   | version (= 4) |
//! | 8..16  | trigger number |
//! | 16..24 | trigger timestamp |
//! | 24..32 | number of requested components |
//! | 32..36 | run number |
//! | 36..40 | status bits ([`record_status`]) |
//! | 40..48 | trigger type (bit mask of trigger sources) |
//! | 48..50 | sequence number (records split in sequences) |
//! | 50..52 | max sequence number |
//! | 52..56 | unused |
//! | 56..64 | element id ([`SourceId`] of the builder) |
//!
//! Component request (32 bytes): version u32 (= 2) at 0, unused u32 at 4, component
//! [`SourceId`] at 8..16, window begin u64 at 16, window end u64 at 24.

use crate::error::{FormatError, need};
use crate::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::source_id::SourceId;

pub const RECORD_HEADER_DATA_SIZE: usize = 64;
pub const COMPONENT_REQUEST_SIZE: usize = 32;
pub const RECORD_MARKER: u32 = 0x3333_4444;
pub const RECORD_VERSION: u32 = 4;
pub const COMPONENT_REQUEST_VERSION: u32 = 2;
/// Bounds what a corrupt count can make a reader allocate.
pub const MAX_COMPONENTS: u64 = 1 << 20;

/// Status bits of a trigger record (DUNE `TriggerRecordStatusBits`), as masks.
pub mod record_status {
    /// Some requested components are missing.
    pub const INCOMPLETE: u32 = 1 << 0;
    /// As many fragments as requested, but not the requested ones.
    pub const MISMATCH: u32 = 1 << 1;
}

/// One source and window the builder asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComponentRequest {
    pub component: SourceId,
    pub window_begin: u64,
    pub window_end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRecordHeader {
    pub trigger_number: u64,
    pub trigger_timestamp: u64,
    pub run_number: u32,
    pub status_bits: u32,
    pub trigger_type: u64,
    pub sequence_number: u16,
    pub max_sequence_number: u16,
    pub element_id: SourceId,
    pub components: Vec<ComponentRequest>,
}

impl TriggerRecordHeader {
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_DATA_SIZE + self.components.len() * COMPONENT_REQUEST_SIZE
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        put_u32(&mut b, 0, RECORD_MARKER);
        put_u32(&mut b, 4, RECORD_VERSION);
        put_u64(&mut b, 8, self.trigger_number);
        put_u64(&mut b, 16, self.trigger_timestamp);
        put_u64(&mut b, 24, self.components.len() as u64);
        put_u32(&mut b, 32, self.run_number);
        put_u32(&mut b, 36, self.status_bits);
        put_u64(&mut b, 40, self.trigger_type);
        put_u16(&mut b, 48, self.sequence_number);
        put_u16(&mut b, 50, self.max_sequence_number);
        self.element_id.encode(&mut b[56..64]);
        for (i, c) in self.components.iter().enumerate() {
            let at = RECORD_HEADER_DATA_SIZE + i * COMPONENT_REQUEST_SIZE;
            let r = &mut b[at..at + COMPONENT_REQUEST_SIZE];
            put_u32(r, 0, COMPONENT_REQUEST_VERSION);
            c.component.encode(&mut r[8..16]);
            put_u64(r, 16, c.window_begin);
            put_u64(r, 24, c.window_end);
        }
        b
    }

    /// Decodes a header whose components fill `b` exactly.
    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "trigger record header";
        need(WHAT, b, RECORD_HEADER_DATA_SIZE)?;
        let marker = get_u32(b, 0);
        if marker != RECORD_MARKER {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: RECORD_MARKER,
                got: marker,
            });
        }
        let version = get_u32(b, 4);
        if version != RECORD_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                supported: RECORD_VERSION,
                got: version,
            });
        }
        let count = get_u64(b, 24);
        let expected = (count <= MAX_COMPONENTS)
            .then(|| RECORD_HEADER_DATA_SIZE + count as usize * COMPONENT_REQUEST_SIZE);
        if expected != Some(b.len()) {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "num_requested_components",
                value: count,
            });
        }
        let components = b[RECORD_HEADER_DATA_SIZE..]
            .chunks_exact(COMPONENT_REQUEST_SIZE)
            .map(|r| {
                let version = get_u32(r, 0);
                if version != COMPONENT_REQUEST_VERSION {
                    return Err(FormatError::UnsupportedVersion {
                        what: "component request",
                        supported: COMPONENT_REQUEST_VERSION,
                        got: version,
                    });
                }
                Ok(ComponentRequest {
                    component: SourceId::decode(&r[8..16])?,
                    window_begin: get_u64(r, 16),
                    window_end: get_u64(r, 24),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            trigger_number: get_u64(b, 8),
            trigger_timestamp: get_u64(b, 16),
            run_number: get_u32(b, 32),
            status_bits: get_u32(b, 36),
            trigger_type: get_u64(b, 40),
            sequence_number: get_u16(b, 48),
            max_sequence_number: get_u16(b, 50),
            element_id: SourceId::decode(&b[56..64])?,
            components,
        })
    }
}

/// A complete trigger record in memory: its header and one encoded fragment (header and
/// payload, see [`crate::Fragment`]) per component that answered. What record building
/// produces and storage writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRecord {
    pub header: TriggerRecordHeader,
    pub fragments: Vec<Vec<u8>>,
}

impl TriggerRecord {
    /// Parsed views of the fragments; the first malformed one is an error.
    pub fn fragments(&self) -> impl Iterator<Item = Result<crate::Fragment<'_>, FormatError>> {
        self.fragments.iter().map(|f| crate::Fragment::parse(f))
    }

    /// Bytes the record occupies on disk: header plus fragments.
    pub fn size_bytes(&self) -> usize {
        self.header.encoded_len() + self.fragments.iter().map(Vec::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_id::Subsystem;
    use proptest::prelude::*;

    prop_compose! {
        fn arb_component()(s in any::<u16>(), id in any::<u32>(), wb in any::<u64>(), we in any::<u64>()) -> ComponentRequest {
            ComponentRequest { component: SourceId::new(Subsystem(s), id), window_begin: wb, window_end: we }
        }
    }

    prop_compose! {
        fn arb_record()(w in any::<[u64; 3]>(), run_number in any::<u32>(), status_bits in any::<u32>(),
                        seq in any::<(u16, u16)>(), id in any::<u32>(),
                        components in proptest::collection::vec(arb_component(), 0..20)) -> TriggerRecordHeader {
            TriggerRecordHeader {
                trigger_number: w[0], trigger_timestamp: w[1], run_number, status_bits, trigger_type: w[2],
                sequence_number: seq.0, max_sequence_number: seq.1,
                element_id: SourceId::new(Subsystem::TR_BUILDER, id), components,
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(r in arb_record()) {
            let b = r.to_bytes();
            prop_assert_eq!(b.len(), r.encoded_len());
            prop_assert_eq!(TriggerRecordHeader::decode(&b).unwrap(), r);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = TriggerRecordHeader::decode(&b);
        }
    }

    #[test]
    fn offsets_match_dune_v4() {
        let r = TriggerRecordHeader {
            trigger_number: 1,
            trigger_timestamp: 2,
            run_number: 3,
            status_bits: record_status::INCOMPLETE,
            trigger_type: 5,
            sequence_number: 6,
            max_sequence_number: 7,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 8),
            components: vec![ComponentRequest {
                component: SourceId::readout(9),
                window_begin: 10,
                window_end: 11,
            }],
        };
        let b = r.to_bytes();
        assert_eq!(&b[0..4], &[0x44, 0x44, 0x33, 0x33]);
        assert_eq!(
            (b[4], b[8], b[16], b[24], b[32], b[36], b[40], b[48], b[50]),
            (4, 1, 2, 1, 3, 1, 5, 6, 7)
        );
        assert_eq!(&b[56..64], &[2, 0, 4, 0, 8, 0, 0, 0]);
        assert_eq!((b[64], b[72 + 4], b[80], b[88]), (2, 9, 10, 11));
    }

    #[test]
    fn corrupt_count_is_rejected_without_allocating() {
        let r = TriggerRecordHeader {
            trigger_number: 0,
            trigger_timestamp: 0,
            run_number: 0,
            status_bits: 0,
            trigger_type: 0,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::trigger(0),
            components: vec![],
        };
        let mut b = r.to_bytes();
        put_u64(&mut b, 24, u64::MAX);
        assert!(matches!(
            TriggerRecordHeader::decode(&b),
            Err(FormatError::Inconsistent { .. })
        ));
    }
}
