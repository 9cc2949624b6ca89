//! The 16-byte DAQ Ethernet header that starts every front-end Ethernet frame
//! (DUNE `detdataformats::DAQEthHeader`).
//!
//! | bytes | bits (LSB first) | field        |
//! |-------|------------------|--------------|
//! | 0..8  | 0..6             | version      |
//! |       | 6..12            | det_id       |
//! |       | 12..22           | crate_id     |
//! |       | 22..26           | slot_id      |
//! |       | 26..34           | stream_id    |
//! |       | 34..40           | reserved     |
//! |       | 40..52           | seq_id (wraps at 4096) |
//! |       | 52..64           | block_length |
//! | 8..16 | 0..64            | timestamp (62.5 MHz ticks) |

use crate::le::{bits, get_u64, put_u64, with_bits};

pub const DAQ_ETH_HEADER_SIZE: usize = 16;
/// The sequence id is 12 bits wide and wraps.
pub const SEQ_ID_MODULUS: u16 = 1 << 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DaqEthHeader {
    pub version: u8,
    pub det_id: u8,
    pub crate_id: u16,
    pub slot_id: u8,
    pub stream_id: u8,
    pub seq_id: u16,
    pub block_length: u16,
    pub timestamp: u64,
}

// (shift, width) of each field of the first word.
const VERSION: (u32, u32) = (0, 6);
const DET_ID: (u32, u32) = (6, 6);
const CRATE_ID: (u32, u32) = (12, 10);
const SLOT_ID: (u32, u32) = (22, 4);
const STREAM_ID: (u32, u32) = (26, 8);
const SEQ_ID: (u32, u32) = (40, 12);
const BLOCK_LENGTH: (u32, u32) = (52, 12);

impl DaqEthHeader {
    /// Reads the header from the first 16 bytes of `b` (caller guarantees the length).
    pub(crate) fn read(b: &[u8]) -> Self {
        let w = get_u64(b, 0);
        let f = |(s, n): (u32, u32)| bits(w, s, n);
        Self {
            version: f(VERSION) as u8,
            det_id: f(DET_ID) as u8,
            crate_id: f(CRATE_ID) as u16,
            slot_id: f(SLOT_ID) as u8,
            stream_id: f(STREAM_ID) as u8,
            seq_id: f(SEQ_ID) as u16,
            block_length: f(BLOCK_LENGTH) as u16,
            timestamp: get_u64(b, 8),
        }
    }

    /// Writes the header into the first 16 bytes of `b`; fields wider than their bit
    /// width are truncated, as the hardware would.
    pub(crate) fn write(&self, b: &mut [u8]) {
        let mut w = 0u64;
        for ((s, n), v) in [
            (VERSION, self.version as u64),
            (DET_ID, self.det_id as u64),
            (CRATE_ID, self.crate_id as u64),
            (SLOT_ID, self.slot_id as u64),
            (STREAM_ID, self.stream_id as u64),
            (SEQ_ID, self.seq_id as u64),
            (BLOCK_LENGTH, self.block_length as u64),
        ] {
            w = with_bits(w, s, n, v);
        }
        put_u64(b, 0, w);
        put_u64(b, 8, self.timestamp);
    }

    /// Rewrites only the timestamp and sequence id of an encoded header in place: what a
    /// replaying source does to every frame, without re-encoding the rest.
    pub fn restamp(b: &mut [u8], timestamp: u64, seq_id: u16) {
        let w = get_u64(b, 0);
        put_u64(b, 0, with_bits(w, SEQ_ID.0, SEQ_ID.1, seq_id as u64));
        put_u64(b, 8, timestamp);
    }
}

/// Sequence-id distance from `prev` to `next` modulo 4096 (1 for consecutive frames).
pub fn seq_id_step(prev: u16, next: u16) -> u16 {
    next.wrapping_sub(prev) % SEQ_ID_MODULUS
}
