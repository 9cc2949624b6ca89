//! FELIX to-host blocks, GBT mode: how a FELIX card delivers e-link chunks to host memory.
//! Layout as the FELIX software reads it (flxcard `flxdefs.h`, 1 KiB blocks, 16-bit trailers).
//!
//! A block is [`BLOCK_SIZE`] bytes, all from one e-link: a 4-byte header, then subchunks,
//! each its payload (padded to an even length) followed by its 2-byte trailer. A reader
//! finds the subchunks by walking the trailers backwards from the end of the block. A chunk
//! larger than the room left in a block continues in the e-link's next block (`First`,
//! `Middle`..., `Last`); a chunk in one subchunk is `Both`. Room the card does not fill is
//! closed by one `Timeout` subchunk whose payload is padding.
//!
//! Block header (two little-endian u16):
//!
//! | bits of word 0 | field |
//! |----------------|-------|
//! | 0..11          | e-link number (GBT link << 6 \| e-group << 3 \| e-path) |
//! | 11..16         | block sequence number, per e-link, modulo 32 |
//!
//! word 1: block marker `0xABCD`.
//!
//! Subchunk trailer (little-endian u16):
//!
//! | bits   | field |
//! |--------|-------|
//! | 0..10  | payload length in bytes (without padding) |
//! | 10     | CRC error (the front end's CRC did not match) |
//! | 11     | error (the e-link reported an error) |
//! | 12     | truncated (the chunk exceeded the card's maximum and was cut) |
//! | 13..16 | type ([`SubchunkKind`]) |
//!
//! The L1 accepts themselves reach the host as [`TtcRecord`]s on the TTC-to-host e-link.

use crate::error::{FormatError, exact};
use crate::fragment::FragmentType;
use crate::le::{get_u16, put_u16};

pub const BLOCK_SIZE: usize = 1024;
/// The frame type of raw files holding FELIX blocks (one record per block): swdaq's own
/// code, outside DUNE's fragment types ("FLX").
pub const RAW_FILE_TYPE: FragmentType = FragmentType(0x0046_4C58);
pub const BLOCK_HEADER_SIZE: usize = 4;
pub const BLOCK_MARKER: u16 = 0xABCD;
pub const TRAILER_SIZE: usize = 2;
/// Largest e-link number (11 bits).
pub const MAX_ELINK: u16 = 0x07FF;
/// Block sequence numbers count modulo this (5 bits).
pub const SEQUENCE_MODULO: u8 = 32;
/// Most subchunks a block can hold (empty payloads, trailers only).
pub const MAX_SUBCHUNKS: usize = (BLOCK_SIZE - BLOCK_HEADER_SIZE) / TRAILER_SIZE;

const LENGTH_MASK: u16 = 0x03FF;
const CRC_ERROR_BIT: u16 = 1 << 10;
const ERROR_BIT: u16 = 1 << 11;
const TRUNCATED_BIT: u16 = 1 << 12;
const KIND_SHIFT: u16 = 13;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    pub elink: u16,
    pub sequence: u8,
}

impl BlockHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let word = (self.elink & MAX_ELINK) | (u16::from(self.sequence % SEQUENCE_MODULO) << 11);
        put_u16(out, 0, word);
        put_u16(out, 2, BLOCK_MARKER);
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "FELIX block header";
        crate::error::need(WHAT, b, BLOCK_HEADER_SIZE)?;
        let marker = get_u16(b, 2);
        if marker != BLOCK_MARKER {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: u32::from(BLOCK_MARKER),
                got: u32::from(marker),
            });
        }
        let word = get_u16(b, 0);
        Ok(Self {
            elink: word & MAX_ELINK,
            sequence: (word >> 11) as u8,
        })
    }
}

/// Where a subchunk sits in its chunk (the trailer's 3-bit type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubchunkKind {
    /// Filler without payload.
    Null = 0,
    /// The start of a chunk that continues in the next block.
    First = 1,
    /// The end of a chunk begun in an earlier block.
    Last = 2,
    /// A whole chunk.
    Both = 3,
    /// Neither start nor end of a chunk.
    Middle = 4,
    /// The card closed the block: the payload is padding.
    Timeout = 5,
    /// Not assigned by FELIX.
    Undefined = 6,
    /// Out-of-band filler without payload.
    OutOfBand = 7,
}

impl SubchunkKind {
    fn from_bits(bits: u16) -> Self {
        match bits & 7 {
            0 => Self::Null,
            1 => Self::First,
            2 => Self::Last,
            3 => Self::Both,
            4 => Self::Middle,
            5 => Self::Timeout,
            6 => Self::Undefined,
            _ => Self::OutOfBand,
        }
    }

    /// Whether this subchunk carries chunk data (as opposed to filler).
    pub fn carries_data(self) -> bool {
        matches!(self, Self::First | Self::Last | Self::Both | Self::Middle)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubchunkTrailer {
    pub kind: SubchunkKind,
    /// Payload bytes, without the padding to an even length.
    pub length: u16,
    pub crc_error: bool,
    pub error: bool,
    pub truncated: bool,
}

impl SubchunkTrailer {
    pub fn to_u16(self) -> u16 {
        (self.length & LENGTH_MASK)
            | if self.crc_error { CRC_ERROR_BIT } else { 0 }
            | if self.error { ERROR_BIT } else { 0 }
            | if self.truncated { TRUNCATED_BIT } else { 0 }
            | ((self.kind as u16) << KIND_SHIFT)
    }

    /// Every 16-bit value is a trailer; null and out-of-band trailers have no payload
    /// whatever their length bits say (as the FELIX software reads them).
    pub fn from_u16(word: u16) -> Self {
        let kind = SubchunkKind::from_bits(word >> KIND_SHIFT);
        let filler = matches!(kind, SubchunkKind::Null | SubchunkKind::OutOfBand);
        Self {
            kind,
            length: if filler { 0 } else { word & LENGTH_MASK },
            crc_error: !filler && word & CRC_ERROR_BIT != 0,
            error: !filler && word & ERROR_BIT != 0,
            truncated: !filler && word & TRUNCATED_BIT != 0,
        }
    }

    /// Bytes the subchunk takes in the block: padded payload plus trailer.
    pub fn footprint(self) -> usize {
        padded(usize::from(self.length)) + TRAILER_SIZE
    }
}

/// Payload length rounded up to the trailer alignment.
#[inline(always)]
pub fn padded(len: usize) -> usize {
    (len + 1) & !1
}

/// One subchunk of a block: its trailer and its payload, where it lies in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subchunk<'a> {
    pub trailer: SubchunkTrailer,
    pub data: &'a [u8],
}

/// Positions of a block's subchunks, filled by [`Block::index`]: a fixed array, so decoding
/// allocates nothing.
pub struct SubchunkIndex {
    /// (payload start, trailer word), last subchunk of the block first.
    entries: [(u16, u16); MAX_SUBCHUNKS],
    len: usize,
}

impl Default for SubchunkIndex {
    fn default() -> Self {
        Self {
            entries: [(0, 0); MAX_SUBCHUNKS],
            len: 0,
        }
    }
}

impl SubchunkIndex {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A zero-copy view of one block.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    pub header: BlockHeader,
    bytes: &'a [u8; BLOCK_SIZE],
}

impl<'a> Block<'a> {
    /// Views exactly [`BLOCK_SIZE`] bytes as a block (checks the marker).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let bytes = exact::<BLOCK_SIZE>("FELIX block", bytes)?;
        Ok(Self {
            header: BlockHeader::decode(bytes)?,
            bytes,
        })
    }

    /// Finds the subchunks by walking the trailers from the end of the block. A length that
    /// reaches into the header is an `Inconsistent` error (the block is corrupt).
    pub fn index(&self, index: &mut SubchunkIndex) -> Result<(), FormatError> {
        index.len = 0;
        let mut end = BLOCK_SIZE;
        while end > BLOCK_HEADER_SIZE {
            let word = get_u16(self.bytes, end - TRAILER_SIZE);
            let trailer = SubchunkTrailer::from_u16(word);
            let footprint = trailer.footprint();
            if footprint > end - BLOCK_HEADER_SIZE {
                index.len = 0;
                return Err(FormatError::Inconsistent {
                    what: "FELIX subchunk",
                    field: "length",
                    value: u64::from(trailer.length),
                });
            }
            end -= footprint;
            index.entries[index.len] = (end as u16, word);
            index.len += 1;
        }
        Ok(())
    }

    /// The subchunks found by [`Block::index`], in block order.
    pub fn subchunks<'i>(&self, index: &'i SubchunkIndex) -> impl Iterator<Item = Subchunk<'a>> + 'i
    where
        'a: 'i,
    {
        let bytes = self.bytes;
        index.entries[..index.len]
            .iter()
            .rev()
            .map(move |&(start, word)| {
                let trailer = SubchunkTrailer::from_u16(word);
                let start = usize::from(start);
                Subchunk {
                    trailer,
                    data: &bytes[start..start + usize::from(trailer.length)],
                }
            })
    }
}

/// The e-link on which an emulated card sends its TTC-to-host records. FELIX forwards each
/// L1 accept's TTC information to the host on a virtual e-link of its own; this number is
/// swdaq's choice (the highest 11-bit e-link), not FELIX's, and no data e-link may use it.
pub const TTC_TO_HOST_ELINK: u16 = MAX_ELINK;

/// One L1 accept as the TTC-to-host e-link carries it, one record per chunk. The layout
/// follows no experiment file: it is swdaq's own, for its generator and SW ROD to agree on.
/// FELIX's TTC-to-host message (a virtual e-link, see the FELIX Link Mapping Specification,
/// atlas-project-felix user docs) holds more fields, in a layout of the firmware release,
/// which no public FELIX source read for this work spells out; a real FELIX host needs a
/// decoder of its own here. Little-endian:
///
/// | bytes | field |
/// |-------|-------|
/// | 0..4  | extended L1 ID (ECR count in the upper 8 bits) |
/// | 4..6  | BCID (12 bits used) |
/// | 6     | L1 trigger type |
/// | 7     | reserved, 0 |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TtcRecord {
    pub l1_id: u32,
    pub bcid: u16,
    pub trigger_type: u8,
}

impl TtcRecord {
    pub const SIZE: usize = 8;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.l1_id.to_le_bytes());
        b[4..6].copy_from_slice(&(self.bcid & 0x0FFF).to_le_bytes());
        b[6] = self.trigger_type;
        b
    }

    /// Reads a whole record: shorter or longer chunks are errors, as is a BCID beyond 12 bits
    /// or a reserved byte not 0 (not a record this emulator wrote).
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "TTC-to-host record";
        let b = exact::<{ Self::SIZE }>(WHAT, bytes)?;
        let bcid = get_u16(b, 4);
        if bcid > 0x0FFF || b[7] != 0 {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: if b[7] != 0 { "reserved" } else { "bcid" },
                value: if b[7] != 0 {
                    u64::from(b[7])
                } else {
                    u64::from(bcid)
                },
            });
        }
        Ok(Self {
            l1_id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            bcid,
            trigger_type: b[6],
        })
    }
}

/// Flags a chunk carries into the trailer of its last subchunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkFlags {
    pub truncated: bool,
    pub crc_error: bool,
}

/// Packs one e-link's chunks into blocks the way the card does: subchunks one after the
/// other, a chunk split where a block is full, the block closed with a `Timeout` filler
/// when the next subchunk would not fit. Full blocks go to `emit`.
pub struct BlockPacker {
    elink: u16,
    sequence: u8,
    block: [u8; BLOCK_SIZE],
    /// Where the next subchunk's payload goes.
    fill: usize,
}

impl BlockPacker {
    pub fn new(elink: u16) -> Self {
        Self::starting_at(elink, 0)
    }

    /// A packer whose first block carries sequence number `sequence`.
    pub fn starting_at(elink: u16, sequence: u8) -> Self {
        Self {
            elink: elink & MAX_ELINK,
            sequence: sequence % SEQUENCE_MODULO,
            block: [0; BLOCK_SIZE],
            fill: BLOCK_HEADER_SIZE,
        }
    }

    /// The sequence number the next emitted block will carry.
    pub fn next_sequence(&self) -> u8 {
        self.sequence
    }

    /// Skips sequence numbers (a lost block, for fault injection).
    pub fn skip_sequence(&mut self, n: u8) {
        self.sequence = (self.sequence + n) % SEQUENCE_MODULO;
    }

    /// Appends one chunk, emitting every block it fills.
    pub fn push(&mut self, chunk: &[u8], flags: ChunkFlags, mut emit: impl FnMut(&[u8])) {
        let mut rest = chunk;
        let mut first = true;
        loop {
            // Payload room left once this subchunk's trailer is in, kept even; at least 2
            // because a block with less room is flushed below.
            let room = (BLOCK_SIZE - self.fill - TRAILER_SIZE) & !1;
            let last = rest.len() <= room;
            let take = if last { rest.len() } else { room };
            let kind = match (first, last) {
                (true, true) => SubchunkKind::Both,
                (true, false) => SubchunkKind::First,
                (false, true) => SubchunkKind::Last,
                (false, false) => SubchunkKind::Middle,
            };
            let trailer = SubchunkTrailer {
                kind,
                length: take as u16,
                crc_error: last && flags.crc_error,
                error: false,
                truncated: last && flags.truncated,
            };
            self.put(&rest[..take], trailer);
            rest = &rest[take..];
            first = false;
            if BLOCK_SIZE - self.fill < 2 * TRAILER_SIZE {
                self.flush(&mut emit);
            }
            if last {
                return;
            }
        }
    }

    /// Appends one chunk of `len` bytes that `fill` writes where it lands, when it fits the
    /// room left in the block (else `fill` writes it to `spill` and it is pushed as usual):
    /// the same blocks as [`BlockPacker::push`], without writing the chunk twice.
    pub fn push_in_place(
        &mut self,
        len: usize,
        flags: ChunkFlags,
        fill: impl FnOnce(&mut [u8]),
        spill: &mut Vec<u8>,
        mut emit: impl FnMut(&[u8]),
    ) {
        let room = (BLOCK_SIZE - self.fill - TRAILER_SIZE) & !1;
        if len > room {
            spill.resize(len, 0);
            fill(spill);
            self.push(spill, flags, emit);
            return;
        }
        let at = self.fill;
        fill(&mut self.block[at..at + len]);
        self.seal(
            len,
            SubchunkTrailer {
                kind: SubchunkKind::Both,
                length: len as u16,
                crc_error: flags.crc_error,
                error: false,
                truncated: flags.truncated,
            },
        );
        if BLOCK_SIZE - self.fill < 2 * TRAILER_SIZE {
            self.flush(&mut emit);
        }
    }

    /// Closes the current block (if it holds anything) with a `Timeout` filler and emits it.
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        if self.fill == BLOCK_HEADER_SIZE {
            return;
        }
        let free = BLOCK_SIZE - self.fill;
        if free > 0 {
            let pad = free - TRAILER_SIZE;
            self.block[self.fill..self.fill + pad].fill(0);
            self.put(
                &[],
                SubchunkTrailer {
                    kind: SubchunkKind::Timeout,
                    length: pad as u16,
                    crc_error: false,
                    error: false,
                    truncated: false,
                },
            );
            // `put` wrote no payload: move the trailer to the block's end.
            self.fill = BLOCK_SIZE;
        }
        BlockHeader {
            elink: self.elink,
            sequence: self.sequence,
        }
        .encode(&mut self.block);
        emit(&self.block);
        self.sequence = (self.sequence + 1) % SEQUENCE_MODULO;
        self.fill = BLOCK_HEADER_SIZE;
    }

    fn put(&mut self, payload: &[u8], trailer: SubchunkTrailer) {
        let at = self.fill;
        if trailer.kind == SubchunkKind::Timeout {
            put_u16(&mut self.block, BLOCK_SIZE - TRAILER_SIZE, trailer.to_u16());
            return;
        }
        self.block[at..at + payload.len()].copy_from_slice(payload);
        self.seal(payload.len(), trailer);
    }

    /// Pads the `len` payload bytes just written at `fill` and puts `trailer` after them.
    #[inline]
    fn seal(&mut self, len: usize, trailer: SubchunkTrailer) {
        let at = self.fill;
        let end = at + padded(len);
        if end > at + len {
            self.block[end - 1] = 0;
        }
        put_u16(&mut self.block, end, trailer.to_u16());
        self.fill = end + TRAILER_SIZE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unpack(blocks: &[Vec<u8>]) -> Vec<(Vec<u8>, ChunkFlags)> {
        let mut chunks = Vec::new();
        let mut partial: Option<Vec<u8>> = None;
        let mut index = SubchunkIndex::default();
        for b in blocks {
            let block = Block::parse(b).unwrap();
            block.index(&mut index).unwrap();
            for s in block.subchunks(&index) {
                let flags = ChunkFlags {
                    truncated: s.trailer.truncated,
                    crc_error: s.trailer.crc_error,
                };
                match s.trailer.kind {
                    SubchunkKind::Both => chunks.push((s.data.to_vec(), flags)),
                    SubchunkKind::First => partial = Some(s.data.to_vec()),
                    SubchunkKind::Middle => partial.as_mut().unwrap().extend_from_slice(s.data),
                    SubchunkKind::Last => {
                        let mut c = partial.take().unwrap();
                        c.extend_from_slice(s.data);
                        chunks.push((c, flags));
                    }
                    _ => {}
                }
            }
        }
        chunks
    }

    #[test]
    fn header_and_trailer_bits_match_flxdefs() {
        let mut b = [0u8; 4];
        BlockHeader {
            elink: 0x123,
            sequence: 5,
        }
        .encode(&mut b);
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 0x123 | (5 << 11));
        assert_eq!(&b[2..4], &[0xCD, 0xAB]);
        let t = SubchunkTrailer {
            kind: SubchunkKind::Both,
            length: 40,
            crc_error: true,
            error: false,
            truncated: true,
        };
        assert_eq!(t.to_u16(), 0x6000 | 0x1000 | 0x0400 | 40);
        // Null trailers carry no payload whatever their length bits say.
        assert_eq!(SubchunkTrailer::from_u16(0x03FF).length, 0);
    }

    #[test]
    fn forty_byte_chunks_fill_24_per_block_then_split() {
        let mut blocks = Vec::new();
        let mut packer = BlockPacker::new(7);
        for i in 0..25u8 {
            packer.push(&[i; 40], ChunkFlags::default(), |b| blocks.push(b.to_vec()));
        }
        // 24 x 42 = 1008 bytes: the 25th chunk starts in the first block (10 bytes of it).
        assert_eq!(blocks.len(), 1);
        let block = Block::parse(&blocks[0]).unwrap();
        let mut index = SubchunkIndex::default();
        block.index(&mut index).unwrap();
        let kinds: Vec<_> = block.subchunks(&index).map(|s| s.trailer.kind).collect();
        assert_eq!(kinds.len(), 25);
        assert_eq!(kinds[24], SubchunkKind::First);
        packer.flush(|b| blocks.push(b.to_vec()));
        assert_eq!(Block::parse(&blocks[1]).unwrap().header.sequence, 1);
        let chunks = unpack(&blocks);
        assert_eq!(chunks.len(), 25);
        assert_eq!(chunks[24].0, vec![24u8; 40]);
    }

    #[test]
    fn corrupt_length_is_a_typed_error() {
        let mut b = vec![0u8; BLOCK_SIZE];
        BlockHeader {
            elink: 1,
            sequence: 0,
        }
        .encode(&mut b);
        let t = SubchunkTrailer {
            kind: SubchunkKind::Both,
            length: 1023,
            crc_error: false,
            error: false,
            truncated: false,
        };
        b[BLOCK_SIZE - 2..].copy_from_slice(&t.to_u16().to_le_bytes());
        let mut index = SubchunkIndex::default();
        assert!(matches!(
            Block::parse(&b).unwrap().index(&mut index),
            Err(FormatError::Inconsistent { .. })
        ));
        assert!(matches!(
            Block::parse(&b[..100]),
            Err(FormatError::Truncated { .. })
        ));
        b[2] = 0;
        assert!(matches!(
            Block::parse(&b),
            Err(FormatError::BadMagic { .. })
        ));
    }

    proptest! {
        #[test]
        fn trailer_round_trip(length in 0u16..1024, kind in 1u16..6, c in any::<bool>(), e in any::<bool>(), t in any::<bool>()) {
            let trailer = SubchunkTrailer { kind: SubchunkKind::from_bits(kind), length, crc_error: c, error: e, truncated: t };
            prop_assert_eq!(SubchunkTrailer::from_u16(trailer.to_u16()), trailer);
        }

        #[test]
        fn packed_chunks_unpack_unchanged(
            chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..3000), any::<bool>(), any::<bool>()), 0..40),
            elink in 0u16..=MAX_ELINK,
        ) {
            let mut blocks = Vec::new();
            let mut packer = BlockPacker::new(elink);
            for (c, truncated, crc_error) in &chunks {
                packer.push(c, ChunkFlags { truncated: *truncated, crc_error: *crc_error }, |b| blocks.push(b.to_vec()));
            }
            packer.flush(|b| blocks.push(b.to_vec()));
            for (i, b) in blocks.iter().enumerate() {
                let h = Block::parse(b).unwrap().header;
                prop_assert_eq!(h, BlockHeader { elink, sequence: (i % 32) as u8 });
            }
            let got = unpack(&blocks);
            let want: Vec<_> = chunks.iter().map(|(c, t, e)| (c.clone(), ChunkFlags { truncated: *t, crc_error: *e })).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn chunks_filled_in_place_make_the_blocks_pushed_chunks_make(
            chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..1500), any::<bool>(), any::<bool>()), 0..60),
            elink in 0u16..=MAX_ELINK,
        ) {
            let (mut pushed, mut in_place) = (Vec::new(), Vec::new());
            let (mut a, mut b) = (BlockPacker::new(elink), BlockPacker::new(elink));
            let mut spill = Vec::new();
            for (c, truncated, crc_error) in &chunks {
                let flags = ChunkFlags { truncated: *truncated, crc_error: *crc_error };
                a.push(c, flags, |x| pushed.push(x.to_vec()));
                b.push_in_place(c.len(), flags, |dst| dst.copy_from_slice(c), &mut spill, |x| in_place.push(x.to_vec()));
            }
            a.flush(|x| pushed.push(x.to_vec()));
            b.flush(|x| in_place.push(x.to_vec()));
            prop_assert_eq!(in_place, pushed);
        }

        #[test]
        fn ttc_records_round_trip_and_garbage_is_an_error(l1_id in any::<u32>(), bcid in 0u16..0x1000, tt in any::<u8>(), junk in proptest::collection::vec(any::<u8>(), 0..20)) {
            let r = TtcRecord { l1_id, bcid, trigger_type: tt };
            prop_assert_eq!(TtcRecord::decode(&r.encode()), Ok(r));
            // Any other length is refused; 8 bytes of garbage are read or refused, never panic.
            if junk.len() != TtcRecord::SIZE {
                prop_assert!(TtcRecord::decode(&junk).is_err());
            } else if let Ok(got) = TtcRecord::decode(&junk) {
                prop_assert_eq!(got.encode().to_vec(), junk);
            }
        }

        #[test]
        fn index_never_panics(mut b in proptest::collection::vec(any::<u8>(), BLOCK_SIZE..=BLOCK_SIZE)) {
            b[2..4].copy_from_slice(&BLOCK_MARKER.to_le_bytes());
            if let Ok(block) = Block::parse(&b) {
                let mut index = SubchunkIndex::default();
                if block.index(&mut index).is_ok() {
                    let total: usize = block.subchunks(&index).map(|s| s.trailer.footprint()).sum();
                    prop_assert_eq!(total, BLOCK_SIZE - BLOCK_HEADER_SIZE);
                }
            }
        }
    }
}
