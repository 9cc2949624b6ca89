//! ProtoDUNE-SP WIB frame (`fddetdataformats::WIBFrame`, "WIB1"), 464 bytes: one time
//! sample of 256 channels, 12-bit ADCs packed in four COLDATA blocks. 50 MHz clock,
//! 25 ticks per sample (2 MHz frames). The format of the hit-finding talk in `shared/seeds/000_*`.
//!
//! The frame is defined in little-endian 32-bit words; bit positions are LSB first.
//!
//! | bytes   | content |
//! |---------|---------|
//! | 0..16   | WIB header: w0 sof [0,8) version [8,13) fiber_no [13,16) crate_no [16,21) slot_no [21,24); w1 mm [0] oos [1] wib_errors [16,32); w2 timestamp bits 0..32; w3 timestamp bits 32..48 [0,16), wib_counter [16,31), z [31] |
//! | 16..464 | 4 COLDATA blocks of 112 bytes: a 16-byte COLDATA header then 8 segments of 12 bytes |
//!
//! COLDATA header: w0 s1_error [0,4) s2_error [4,8) checksum_a low [16,24) checksum_b low [24,32);
//! w1 checksum_a high [0,8) checksum_b high [8,16) coldata_convert_count [16,32);
//! w2 error_register [0,16); w3 eight 4-bit `hdr` nibbles (order 1,3,2,4,5,7,6,8).
//!
//! Channel `c` of the frame: block `c / 64`; within it ADC `a = (c % 64) / 8` and
//! ADC-channel `k = c % 8`; segment `(a / 2) * 2 + k / 4`. A segment holds 4 channels of two
//! ADCs (even and odd), each 12-bit value split in an 8-bit and a 4-bit part (see
//! [`SEGMENT_LAYOUT`]). When `z` is 0 the 15-bit `wib_counter` field carries timestamp bits
//! 48..63.

use crate::error::{FormatError, exact};
use crate::le::{bits, get_u32, put_u32, with_bits};

pub const FRAME_SIZE: usize = 464;
pub const NUM_CHANNELS: usize = 256;
pub const NUM_BLOCKS: usize = 4;
pub const BLOCK_SIZE: usize = 112;
pub const HEADER_SIZE: usize = 16;
pub const SEGMENT_SIZE: usize = 12;
pub const BITS_PER_ADC: u32 = 12;
pub const ADC_MAX: u16 = (1 << BITS_PER_ADC) - 1;
pub const TICKS_PER_SAMPLE: u64 = 25;
pub const TICKS_PER_FRAME: u64 = TICKS_PER_SAMPLE;
const _: () = assert!(HEADER_SIZE + NUM_BLOCKS * BLOCK_SIZE == FRAME_SIZE);

/// For (ADC parity, channel-in-ADC % 4): the segment bit offsets of the value's low part and
/// high part and the low part's width (8 or 4 bits; the high part has the rest of the 12).
pub const SEGMENT_LAYOUT: [[(u32, u32, u32); 4]; 2] = [
    [(0, 16, 8), (20, 32, 4), (48, 64, 8), (68, 80, 4)],
    [(8, 24, 8), (28, 40, 4), (56, 72, 8), (76, 88, 4)],
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WibHeader {
    pub sof: u8,
    pub version: u8,
    pub fiber_no: u8,
    pub crate_no: u8,
    pub slot_no: u8,
    pub mm: u8,
    pub oos: u8,
    pub wib_errors: u16,
    /// 48-bit timestamp, or 63-bit when `z` is 0.
    pub timestamp: u64,
    /// Meaningful only when `z` is 1.
    pub wib_counter: u16,
    pub z: u8,
}

impl WibHeader {
    fn read(b: &[u8]) -> Self {
        let (w0, w1, w3) = (
            get_u32(b, 0) as u64,
            get_u32(b, 4) as u64,
            get_u32(b, 12) as u64,
        );
        let z = bits(w3, 31, 1) as u8;
        let counter = bits(w3, 16, 15);
        let mut timestamp = get_u32(b, 8) as u64 | bits(w3, 0, 16) << 32;
        if z == 0 {
            timestamp |= counter << 48;
        }
        Self {
            sof: bits(w0, 0, 8) as u8,
            version: bits(w0, 8, 5) as u8,
            fiber_no: bits(w0, 13, 3) as u8,
            crate_no: bits(w0, 16, 5) as u8,
            slot_no: bits(w0, 21, 3) as u8,
            mm: bits(w1, 0, 1) as u8,
            oos: bits(w1, 1, 1) as u8,
            wib_errors: bits(w1, 16, 16) as u16,
            timestamp,
            wib_counter: if z == 1 { counter as u16 } else { 0 },
            z,
        }
    }

    fn write(&self, b: &mut [u8]) {
        let w0 = [
            (0, 8, self.sof),
            (8, 5, self.version),
            (13, 3, self.fiber_no),
        ]
        .into_iter()
        .chain([(16, 5, self.crate_no), (21, 3, self.slot_no)])
        .fold(0u64, |w, (s, n, v)| with_bits(w, s, n, v as u64));
        let w1 = with_bits(
            with_bits(self.mm as u64 & 1, 1, 1, self.oos as u64),
            16,
            16,
            self.wib_errors as u64,
        );
        let high = if self.z == 1 {
            self.wib_counter as u64
        } else {
            self.timestamp >> 48
        };
        let w3 = with_bits(
            with_bits(self.timestamp >> 32 & 0xffff, 16, 15, high),
            31,
            1,
            self.z as u64,
        );
        put_u32(b, 0, w0 as u32);
        put_u32(b, 4, w1 as u32);
        put_u32(b, 8, self.timestamp as u32);
        put_u32(b, 12, w3 as u32);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ColdataHeader {
    pub s1_error: u8,
    pub s2_error: u8,
    pub checksum_a: u16,
    pub checksum_b: u16,
    pub coldata_convert_count: u16,
    pub error_register: u16,
    /// `hdr_1..hdr_8` as they lie in the word (order 1,3,2,4,5,7,6,8), 4 bits each.
    pub hdr_word: u32,
}

impl ColdataHeader {
    fn read(b: &[u8]) -> Self {
        let (w0, w1, w2) = (
            get_u32(b, 0) as u64,
            get_u32(b, 4) as u64,
            get_u32(b, 8) as u64,
        );
        Self {
            s1_error: bits(w0, 0, 4) as u8,
            s2_error: bits(w0, 4, 4) as u8,
            checksum_a: (bits(w0, 16, 8) | bits(w1, 0, 8) << 8) as u16,
            checksum_b: (bits(w0, 24, 8) | bits(w1, 8, 8) << 8) as u16,
            coldata_convert_count: bits(w1, 16, 16) as u16,
            error_register: bits(w2, 0, 16) as u16,
            hdr_word: get_u32(b, 12),
        }
    }

    /// Writes this header as block `block`'s COLDATA header inside an encoded frame.
    pub fn write(&self, frame: &mut [u8], block: usize) {
        let b = &mut frame[HEADER_SIZE + block * BLOCK_SIZE..];
        let (a, c) = (self.checksum_a as u64, self.checksum_b as u64);
        let w0 = (self.s1_error as u64 & 0xf)
            | (self.s2_error as u64 & 0xf) << 4
            | (a & 0xff) << 16
            | (c & 0xff) << 24;
        let w1 = a >> 8 | (c >> 8) << 8 | (self.coldata_convert_count as u64) << 16;
        put_u32(b, 0, w0 as u32);
        put_u32(b, 4, w1 as u32);
        put_u32(b, 8, self.error_register as u32);
        put_u32(b, 12, self.hdr_word);
    }
}

/// Byte offset of the segment holding frame channel `c` and the layout entry for it.
fn locate(channel: usize) -> (usize, (u32, u32, u32)) {
    let (block, in_block) = (channel / 64, channel % 64);
    let (adc, k) = (in_block / 8, in_block % 8);
    let segment = (adc / 2) * 2 + k / 4;
    (segment_at(block, segment), SEGMENT_LAYOUT[adc % 2][k % 4])
}

/// Byte offset of segment 0..8 of COLDATA block 0..4 (each block opens with a 16-byte
/// COLDATA header).
pub const fn segment_at(block: usize, segment: usize) -> usize {
    HEADER_SIZE + block * BLOCK_SIZE + 16 + segment * SEGMENT_SIZE
}

/// Reads `width` bits at bit `offset` of a segment (bits never straddle the 12 bytes).
fn segment_bits(seg: &[u8], offset: u32, width: u32) -> u16 {
    let word = get_u32(seg, (offset / 32) as usize * 4) as u64;
    bits(word, offset % 32, width) as u16
}

fn set_segment_bits(seg: &mut [u8], offset: u32, width: u32, value: u16) {
    let at = (offset / 32) as usize * 4;
    let word = get_u32(seg, at) as u64;
    put_u32(
        seg,
        at,
        with_bits(word, offset % 32, width, value as u64) as u32,
    );
}

/// A bounds-checked, zero-copy view of one ProtoDUNE WIB frame.
#[derive(Clone, Copy)]
pub struct ProtoWibFrame<'a> {
    bytes: &'a [u8; FRAME_SIZE],
}

impl<'a> ProtoWibFrame<'a> {
    /// Views `bytes` as a frame; it must be exactly [`FRAME_SIZE`] long.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        Ok(Self {
            bytes: exact("ProtoDUNE WIB frame", bytes)?,
        })
    }

    pub fn as_bytes(&self) -> &'a [u8; FRAME_SIZE] {
        self.bytes
    }

    pub fn wib_header(&self) -> WibHeader {
        WibHeader::read(self.bytes)
    }

    pub fn timestamp(&self) -> u64 {
        self.wib_header().timestamp
    }

    /// COLDATA header of block 0..4. Panics on a block index out of range.
    pub fn coldata_header(&self, block: usize) -> ColdataHeader {
        assert!(block < NUM_BLOCKS);
        ColdataHeader::read(&self.bytes[HEADER_SIZE + block * BLOCK_SIZE..])
    }

    /// ADC value of frame channel 0..256. Panics on a channel out of range.
    pub fn adc(&self, channel: usize) -> u16 {
        assert!(channel < NUM_CHANNELS);
        let (at, (low_at, high_at, low_width)) = locate(channel);
        let seg = &self.bytes[at..at + SEGMENT_SIZE];
        segment_bits(seg, low_at, low_width)
            | segment_bits(seg, high_at, 12 - low_width) << low_width
    }

    /// Unpacks all 256 channels (the scalar reference).
    pub fn unpack(&self, out: &mut [u16; NUM_CHANNELS]) {
        for (channel, v) in out.iter_mut().enumerate() {
            *v = self.adc(channel);
        }
    }
}

/// Rewrites only the timestamp of an encoded frame in place (what a replaying source does).
pub fn restamp(frame: &mut [u8], timestamp: u64) {
    let header = WibHeader {
        timestamp,
        ..WibHeader::read(frame)
    };
    header.write(frame);
}

/// Writes a complete frame into `out` ([`FRAME_SIZE`] long), COLDATA headers zeroed.
pub fn encode(header: &WibHeader, adcs: &[u16; NUM_CHANNELS], out: &mut [u8]) {
    assert_eq!(out.len(), FRAME_SIZE, "ProtoDUNE WIB frame buffer size");
    out.fill(0);
    header.write(out);
    for (channel, &v) in adcs.iter().enumerate() {
        let v = v & ADC_MAX;
        let (at, (low_at, high_at, low_width)) = locate(channel);
        let seg = &mut out[at..at + SEGMENT_SIZE];
        set_segment_bits(seg, low_at, low_width, v & ((1 << low_width) - 1));
        set_segment_bits(seg, high_at, 12 - low_width, v >> low_width);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        fn arb_header()(b in any::<[u8; 7]>(), wib_errors in any::<u16>(), ts in any::<u64>(), counter in 0u16..0x8000, z in 0u8..2) -> WibHeader {
            WibHeader {
                sof: b[0], version: b[1] & 0x1f, fiber_no: b[2] & 7, crate_no: b[3] & 0x1f, slot_no: b[4] & 7,
                mm: b[5] & 1, oos: b[6] & 1, wib_errors,
                timestamp: if z == 1 { ts & 0xffff_ffff_ffff } else { ts & 0x7fff_ffff_ffff_ffff },
                wib_counter: if z == 1 { counter } else { 0 }, z,
            }
        }
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(header in arb_header(), adcs in proptest::collection::vec(0..=ADC_MAX, NUM_CHANNELS),
                                          coldata in any::<(u8, u8, u16, u16, u16, u16, u32)>()) {
            let adcs: [u16; NUM_CHANNELS] = adcs.try_into().unwrap();
            let mut buf = vec![0u8; FRAME_SIZE];
            encode(&header, &adcs, &mut buf);
            let ch = ColdataHeader { s1_error: coldata.0 & 0xf, s2_error: coldata.1 & 0xf, checksum_a: coldata.2,
                checksum_b: coldata.3, coldata_convert_count: coldata.4, error_register: coldata.5, hdr_word: coldata.6 };
            ch.write(&mut buf, 2);
            let frame = ProtoWibFrame::parse(&buf).unwrap();
            prop_assert_eq!(frame.wib_header(), header);
            prop_assert_eq!(frame.coldata_header(2), ch);
            let mut out = [0u16; NUM_CHANNELS];
            frame.unpack(&mut out);
            prop_assert_eq!(out, adcs);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(frame) = ProtoWibFrame::parse(&bytes) {
                let mut out = [0u16; NUM_CHANNELS];
                frame.unpack(&mut out);
                let _ = (frame.wib_header(), frame.coldata_header(3));
            }
        }
    }

    #[test]
    fn restamp_changes_only_the_timestamp() {
        let header = WibHeader {
            crate_no: 3,
            slot_no: 2,
            timestamp: 77,
            ..WibHeader::default()
        };
        let mut buf = vec![0u8; FRAME_SIZE];
        encode(&header, &[5; NUM_CHANNELS], &mut buf);
        restamp(&mut buf, 1 << 40);
        let frame = ProtoWibFrame::parse(&buf).unwrap();
        assert_eq!(
            frame.wib_header(),
            WibHeader {
                timestamp: 1 << 40,
                ..header
            }
        );
        assert_eq!(frame.adc(255), 5);
    }

    #[test]
    fn segment_layout_matches_the_bitfields() {
        // Channel 1 of ADC 0: low nibble at segment bits 20..24, high byte at 32..40.
        let mut adcs = [0u16; NUM_CHANNELS];
        adcs[1] = 0xABC;
        let mut buf = vec![0u8; FRAME_SIZE];
        encode(&WibHeader::default(), &adcs, &mut buf);
        let seg0 = HEADER_SIZE + HEADER_SIZE;
        assert_eq!(get_u32(&buf, seg0), 0xC << 20);
        assert_eq!(get_u32(&buf, seg0 + 4), 0xAB);
        // Channel 12 (ADC 1, k 4) lives in segment 1, odd-ADC slot 0: low byte at 8, high nibble at 24.
        let mut adcs = [0u16; NUM_CHANNELS];
        adcs[12] = 0x123;
        encode(&WibHeader::default(), &adcs, &mut buf);
        assert_eq!(get_u32(&buf, seg0 + SEGMENT_SIZE), 0x23 << 8 | 0x1 << 24);
    }

    #[test]
    fn every_bit_of_the_payload_belongs_to_exactly_one_channel() {
        let mut seen = vec![0u8; FRAME_SIZE];
        for c in 0..NUM_CHANNELS {
            let mut adcs = [0u16; NUM_CHANNELS];
            adcs[c] = ADC_MAX;
            let mut buf = vec![0u8; FRAME_SIZE];
            encode(&WibHeader::default(), &adcs, &mut buf);
            for (s, b) in seen.iter_mut().zip(&buf) {
                assert_eq!(*s & b, 0, "channel {c} overlaps another");
                *s |= b;
            }
        }
        let payload_bits: u32 = seen.iter().map(|b| b.count_ones()).sum();
        assert_eq!(payload_bits, 256 * 12);
    }
}
