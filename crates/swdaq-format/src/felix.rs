//! FELIX to-host blocks, GBT mode and FULL mode: how a FELIX card delivers e-link chunks to
//! host memory. Layout as the FELIX software reads it: ftools `src/flxdefs.h` and
//! `src/FlxDataChecker.cpp` (the block walk) and `src/FlxTrailerFormat.h` (the two trailer
//! widths), as mirrored in github.com/jcfreeman2/ftools at commit 22fe8ccf ("carbon copy of
//! commit c326e788 from gitlab.cern.ch/atlas-tdaq-felix/ftools"). Nothing of that code is
//! copied; the bit positions below are facts of the format.
//!
//! A block is [`BlockLayout::block_size`] bytes, all from one e-link: a 4-byte header, then
//! subchunks, each its payload (padded to a multiple of the trailer's size) followed by its
//! trailer. A reader finds the subchunks by walking the trailers backwards from the end of
//! the block. A chunk larger than the room left in a block continues in the e-link's next
//! block (`First`, `Middle`..., `Last`); a chunk in one subchunk is `Both`. Room the card does
//! not fill is closed by one `Timeout` subchunk whose payload is padding.
//!
//! The two layouts ([`BlockLayout`]) differ only in block size, trailer width and the
//! header's marker; one walk and one packer serve both:
//!
//! | layout | block | trailer | length field | marker (header word 1) |
//! |--------|-------|---------|--------------|------------------------|
//! | GBT ([`BlockLayout::GBT`]) | 1 KiB | 16 bits | 10 bits | `0xABCD` |
//! | FULL ([`BlockLayout::full`]) | 1 to 64 KiB | 32 bits | 16 bits | `0xC0CE` \| (KiB - 1) << 8, or `0xABCE` |
//!
//! In the FELIX software the block size and trailer width are firmware properties (the
//! card's `BLOCKSIZE` and `CHUNK_TRAILER_32B` registers, `FlxReceiver.cpp`); `flxdefs.h`
//! names three markers: `0xABCD` (16-bit trailers), `0xABCE` (32-bit trailers, block size
//! known from the register) and the Phase-2 `0xC0CE` whose bits 8..14 carry the block size in
//! KiB minus one (as `fcheck` derives it). swdaq's FULL-mode packer writes the Phase-2 marker,
//! so a file of FULL-mode blocks says its own block size; the reader also takes `0xABCE`.
//! Which block size a FULL-mode firmware uses is not in those files: swdaq's default
//! (4 KiB, `swdaq_sim::felix`) is its own choice, configurable. In FULL mode each link is one
//! e-link (FELIX numbers it link << 6, e-group and e-path 0); swdaq's emulator numbers links
//! consecutively instead, so that 48 links fit the 11-bit e-link field of one card.
//!
//! Block header (two little-endian u16, the same in both layouts):
//!
//! | bits of word 0 | field |
//! |----------------|-------|
//! | 0..11          | e-link number (GBT link << 6 \| e-group << 3 \| e-path) |
//! | 11..16         | block sequence number, per e-link, modulo 32 |
//!
//! word 1: the layout's marker (table above).
//!
//! Subchunk trailer, GBT (little-endian u16):
//!
//! | bits   | field |
//! |--------|-------|
//! | 0..10  | payload length in bytes (without padding) |
//! | 10     | CRC error (the front end's CRC did not match) |
//! | 11     | error (the e-link reported an error) |
//! | 12     | truncated (the chunk exceeded the card's maximum and was cut) |
//! | 13..16 | type ([`SubchunkKind`]) |
//!
//! Subchunk trailer, FULL (little-endian u32):
//!
//! | bits   | field |
//! |--------|-------|
//! | 0..16  | payload length in bytes (without padding) |
//! | 16..25 | unused (written 0, ignored) |
//! | 25     | busy (the link asserted busy; read and written by swdaq as [`SubchunkTrailer::busy`]) |
//! | 26     | CRC error |
//! | 27     | error |
//! | 28     | truncated |
//! | 29..32 | type ([`SubchunkKind`]) |
//!
//! The L1 accepts themselves reach the host as [`TtcRecord`]s on the TTC-to-host e-link.

use crate::error::{FormatError, exact};
use crate::fragment::FragmentType;
use crate::le::{get_u16, get_u32, put_u16, put_u32};

/// The GBT-mode block size ([`BlockLayout::GBT`]).
pub const BLOCK_SIZE: usize = 1024;
/// The frame type of raw files holding FELIX blocks (one record per block): swdaq's own
/// code, outside DUNE's fragment types ("FLX").
pub const RAW_FILE_TYPE: FragmentType = FragmentType(0x0046_4C58);
pub const BLOCK_HEADER_SIZE: usize = 4;
/// The GBT-mode marker (16-bit trailers).
pub const BLOCK_MARKER: u16 = 0xABCD;
/// The marker of blocks with 32-bit trailers whose size the reader knows from elsewhere.
pub const BLOCK_MARKER_32B: u16 = 0xABCE;
/// The Phase-2 marker: 32-bit trailers, block size in KiB minus one in bits 8..14.
pub const BLOCK_MARKER_PHASE2: u16 = 0xC0CE;
const PHASE2_MARKER_MASK: u16 = 0xC0FF;
/// The GBT-mode trailer size.
pub const TRAILER_SIZE: usize = 2;
/// The FULL-mode trailer size.
pub const TRAILER_SIZE_32B: usize = 4;
/// The largest FULL-mode block, in KiB (6 bits of size in the Phase-2 marker).
pub const MAX_BLOCK_KIB: u16 = 64;
/// Largest e-link number (11 bits).
pub const MAX_ELINK: u16 = 0x07FF;
/// Block sequence numbers count modulo this (5 bits).
pub const SEQUENCE_MODULO: u8 = 32;
/// Most subchunks a GBT block can hold (empty payloads, trailers only).
pub const MAX_SUBCHUNKS: usize = (BLOCK_SIZE - BLOCK_HEADER_SIZE) / TRAILER_SIZE;

/// Where a subchunk trailer's fields lie: one decoder serves both widths. Bit positions of
/// the 16-bit (GBT) and 32-bit (FULL mode) trailers as ftools `src/FlxTrailerFormat.h` (mirror
/// jcfreeman2/ftools at 22fe8ccf) defines them.
struct TrailerBits {
    length_mask: u32,
    crc_error: u32,
    error: u32,
    truncated: u32,
    kind_shift: u32,
}

const GBT_TRAILER: TrailerBits = TrailerBits {
    length_mask: 0x03FF,
    crc_error: 1 << 10,
    error: 1 << 11,
    truncated: 1 << 12,
    kind_shift: 13,
};
const FULL_TRAILER: TrailerBits = TrailerBits {
    length_mask: 0x0000_FFFF,
    crc_error: 1 << 26,
    error: 1 << 27,
    truncated: 1 << 28,
    kind_shift: 29,
};
const BUSY_BIT_32B: u32 = 1 << 25;

/// The width of a layout's subchunk trailers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrailerWidth {
    /// GBT mode: 16 bits, 10-bit lengths.
    Bits16,
    /// FULL mode: 32 bits, 16-bit lengths.
    Bits32,
}

/// How a card's blocks are laid out: GBT mode or FULL mode (see the module comment). A
/// small value, passed to the packer, the block view and the decoder; everything else about
/// the walk is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockLayout {
    block_size: u32,
    trailer: TrailerWidth,
}

impl BlockLayout {
    /// GBT mode: 1 KiB blocks, 16-bit trailers, marker `0xABCD`.
    pub const GBT: Self = Self {
        block_size: BLOCK_SIZE as u32,
        trailer: TrailerWidth::Bits16,
    };

    /// FULL mode: `block_kib` KiB blocks (1 to [`MAX_BLOCK_KIB`]), 32-bit trailers.
    pub fn full(block_kib: u16) -> Result<Self, FormatError> {
        if !(1..=MAX_BLOCK_KIB).contains(&block_kib) {
            return Err(FormatError::Inconsistent {
                what: "FELIX FULL-mode block layout",
                field: "block_kib",
                value: u64::from(block_kib),
            });
        }
        Ok(Self {
            block_size: u32::from(block_kib) * 1024,
            trailer: TrailerWidth::Bits32,
        })
    }

    #[inline(always)]
    pub fn block_size(self) -> usize {
        self.block_size as usize
    }

    #[inline(always)]
    pub fn trailer(self) -> TrailerWidth {
        self.trailer
    }

    pub fn is_full_mode(self) -> bool {
        self.trailer == TrailerWidth::Bits32
    }

    #[inline(always)]
    pub fn trailer_size(self) -> usize {
        match self.trailer {
            TrailerWidth::Bits16 => TRAILER_SIZE,
            TrailerWidth::Bits32 => TRAILER_SIZE_32B,
        }
    }

    /// Most subchunks a block can hold (empty payloads, trailers only).
    pub fn max_subchunks(self) -> usize {
        (self.block_size() - BLOCK_HEADER_SIZE) / self.trailer_size()
    }

    /// The marker this layout's packer writes.
    pub fn marker(self) -> u16 {
        match self.trailer {
            TrailerWidth::Bits16 => BLOCK_MARKER,
            TrailerWidth::Bits32 => {
                BLOCK_MARKER_PHASE2 | ((self.block_size / 1024 - 1) as u16) << 8
            }
        }
    }

    /// Whether `marker` marks a block of this layout.
    #[inline(always)]
    fn accepts(self, marker: u16) -> bool {
        match self.trailer {
            TrailerWidth::Bits16 => marker == BLOCK_MARKER,
            TrailerWidth::Bits32 => marker == self.marker() || marker == BLOCK_MARKER_32B,
        }
    }

    /// The layout a block's marker announces, if it says its own block size (GBT and
    /// Phase-2 markers; `0xABCE` does not).
    pub fn from_marker(marker: u16) -> Option<Self> {
        if marker == BLOCK_MARKER {
            Some(Self::GBT)
        } else if marker & PHASE2_MARKER_MASK == BLOCK_MARKER_PHASE2 {
            Self::full(((marker >> 8) & 0x3F) + 1).ok()
        } else {
            None
        }
    }

    /// Payload length rounded up to the trailer alignment.
    #[inline(always)]
    pub fn padded(self, len: usize) -> usize {
        let a = self.trailer_size() - 1;
        (len + a) & !a
    }

    /// The largest payload one subchunk's length field holds.
    pub fn max_subchunk_length(self) -> usize {
        match self.trailer {
            TrailerWidth::Bits16 => GBT_TRAILER.length_mask as usize,
            TrailerWidth::Bits32 => FULL_TRAILER.length_mask as usize,
        }
    }

    #[inline(always)]
    fn put_trailer_word(self, block: &mut [u8], at: usize, word: u32) {
        match self.trailer {
            TrailerWidth::Bits16 => put_u16(block, at, word as u16),
            TrailerWidth::Bits32 => put_u32(block, at, word),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    pub elink: u16,
    pub sequence: u8,
}

impl BlockHeader {
    /// Writes a GBT-mode header.
    pub fn encode(&self, out: &mut [u8]) {
        self.encode_as(BlockLayout::GBT, out);
    }

    /// Writes the header with `layout`'s marker.
    pub fn encode_as(&self, layout: BlockLayout, out: &mut [u8]) {
        let word = (self.elink & MAX_ELINK) | (u16::from(self.sequence % SEQUENCE_MODULO) << 11);
        put_u16(out, 0, word);
        put_u16(out, 2, layout.marker());
    }

    /// Reads a GBT-mode header.
    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        Self::decode_as(BlockLayout::GBT, b)
    }

    /// Reads a header whose marker must be one of `layout`'s.
    #[inline]
    pub fn decode_as(layout: BlockLayout, b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "FELIX block header";
        crate::error::need(WHAT, b, BLOCK_HEADER_SIZE)?;
        let marker = get_u16(b, 2);
        if !layout.accepts(marker) {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: u32::from(layout.marker()),
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
    #[inline(always)]
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
    /// Payload bytes, without the padding to the trailer's alignment.
    pub length: u16,
    pub crc_error: bool,
    pub error: bool,
    pub truncated: bool,
}

impl SubchunkTrailer {
    /// The GBT-mode (16-bit) trailer word.
    pub fn to_u16(self) -> u16 {
        self.to_bits(&GBT_TRAILER) as u16
    }

    /// Every 16-bit value is a trailer; null and out-of-band trailers have no payload
    /// whatever their length bits say (as the FELIX software reads them).
    #[inline(always)]
    pub fn from_u16(word: u16) -> Self {
        Self::from_bits(u32::from(word), &GBT_TRAILER)
    }

    /// The FULL-mode (32-bit) trailer word; the busy bit is not set (see [`Self::busy`]).
    pub fn to_u32(self) -> u32 {
        self.to_bits(&FULL_TRAILER)
    }

    /// Every 32-bit value is a trailer, read as [`Self::from_u16`] reads 16-bit ones.
    #[inline(always)]
    pub fn from_u32(word: u32) -> Self {
        Self::from_bits(word, &FULL_TRAILER)
    }

    fn to_bits(self, bits: &TrailerBits) -> u32 {
        (u32::from(self.length) & bits.length_mask)
            | if self.crc_error { bits.crc_error } else { 0 }
            | if self.error { bits.error } else { 0 }
            | if self.truncated { bits.truncated } else { 0 }
            | ((self.kind as u32) << bits.kind_shift)
    }

    #[inline(always)]
    fn from_bits(word: u32, bits: &TrailerBits) -> Self {
        let kind = SubchunkKind::from_bits((word >> bits.kind_shift) as u16);
        let filler = matches!(kind, SubchunkKind::Null | SubchunkKind::OutOfBand);
        Self {
            kind,
            length: if filler {
                0
            } else {
                (word & bits.length_mask) as u16
            },
            crc_error: !filler && word & bits.crc_error != 0,
            error: !filler && word & bits.error != 0,
            truncated: !filler && word & bits.truncated != 0,
        }
    }

    /// Whether a FULL-mode trailer word has its busy bit (25) set: the FELIX software counts
    /// it; a trailer read with [`Self::from_u32`] drops it, so the SW ROD ignores it.
    pub fn busy(word: u32) -> bool {
        word & BUSY_BIT_32B != 0
    }

    /// The trailer word in `layout`'s width.
    #[inline(always)]
    pub fn to_word(self, layout: BlockLayout) -> u32 {
        match layout.trailer {
            TrailerWidth::Bits16 => u32::from(self.to_u16()),
            TrailerWidth::Bits32 => self.to_u32(),
        }
    }

    /// Reads a trailer word of `layout`'s width.
    #[inline(always)]
    pub fn from_word(layout: BlockLayout, word: u32) -> Self {
        match layout.trailer {
            TrailerWidth::Bits16 => Self::from_u16(word as u16),
            TrailerWidth::Bits32 => Self::from_u32(word),
        }
    }

    /// Bytes the GBT-mode subchunk takes in the block: padded payload plus trailer.
    pub fn footprint(self) -> usize {
        self.footprint_in(BlockLayout::GBT)
    }

    /// Bytes the subchunk takes in a block of `layout`: padded payload plus trailer.
    #[inline(always)]
    pub fn footprint_in(self, layout: BlockLayout) -> usize {
        layout.padded(usize::from(self.length)) + layout.trailer_size()
    }
}

const EMPTY_TRAILER: SubchunkTrailer = SubchunkTrailer {
    kind: SubchunkKind::Null,
    length: 0,
    crc_error: false,
    error: false,
    truncated: false,
};

/// Payload length rounded up to the GBT trailer alignment.
#[inline(always)]
pub fn padded(len: usize) -> usize {
    BlockLayout::GBT.padded(len)
}

/// One subchunk of a block: its trailer and its payload, where it lies in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subchunk<'a> {
    pub trailer: SubchunkTrailer,
    pub data: &'a [u8],
}

/// Positions of a block's subchunks, filled by [`Block::index`]: sized once for the largest
/// block it has indexed (the GBT block's 510 entries by default), so decoding allocates
/// nothing per block.
pub struct SubchunkIndex {
    /// (payload start, trailer), last subchunk of the block first.
    entries: Vec<(u32, SubchunkTrailer)>,
    len: usize,
}

impl Default for SubchunkIndex {
    fn default() -> Self {
        Self::for_layout(BlockLayout::GBT)
    }
}

impl SubchunkIndex {
    /// An index with room for any block of `layout`.
    pub fn for_layout(layout: BlockLayout) -> Self {
        Self {
            entries: vec![(0, EMPTY_TRAILER); layout.max_subchunks()],
            len: 0,
        }
    }

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
    layout: BlockLayout,
    bytes: &'a [u8],
}

impl<'a> Block<'a> {
    /// Views exactly [`BLOCK_SIZE`] bytes as a GBT-mode block (checks the marker).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        Self::parse_as(BlockLayout::GBT, bytes)
    }

    /// Views exactly `layout.block_size()` bytes as a block of `layout` (checks the marker).
    #[inline]
    pub fn parse_as(layout: BlockLayout, bytes: &'a [u8]) -> Result<Self, FormatError> {
        if bytes.len() != layout.block_size() {
            crate::error::need("FELIX block", bytes, layout.block_size())?;
            return Err(FormatError::Inconsistent {
                what: "FELIX block",
                field: "length",
                value: bytes.len() as u64,
            });
        }
        Ok(Self {
            header: BlockHeader::decode_as(layout, bytes)?,
            layout,
            bytes,
        })
    }

    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// Finds the subchunks by walking the trailers from the end of the block. A length that
    /// reaches into the header is an `Inconsistent` error (the block is corrupt).
    #[inline]
    pub fn index(&self, index: &mut SubchunkIndex) -> Result<(), FormatError> {
        let layout = self.layout;
        if index.entries.len() < layout.max_subchunks() {
            // Once per decoder and layout, not per block.
            index
                .entries
                .resize(layout.max_subchunks(), (0, EMPTY_TRAILER));
        }
        // One walk, compiled once per trailer width: the width is a constant inside it.
        match layout.trailer {
            TrailerWidth::Bits16 => self.walk::<TRAILER_SIZE>(index),
            TrailerWidth::Bits32 => self.walk::<TRAILER_SIZE_32B>(index),
        }
    }

    #[inline(always)]
    fn walk<const T: usize>(&self, index: &mut SubchunkIndex) -> Result<(), FormatError> {
        index.len = 0;
        let bytes = self.bytes;
        let mut end = bytes.len();
        while end > BLOCK_HEADER_SIZE {
            let trailer = if T == TRAILER_SIZE {
                SubchunkTrailer::from_u16(get_u16(bytes, end - T))
            } else {
                SubchunkTrailer::from_u32(get_u32(bytes, end - T))
            };
            let footprint = ((usize::from(trailer.length) + T - 1) & !(T - 1)) + T;
            if footprint > end - BLOCK_HEADER_SIZE {
                index.len = 0;
                return Err(FormatError::Inconsistent {
                    what: "FELIX subchunk",
                    field: "length",
                    value: u64::from(trailer.length),
                });
            }
            end -= footprint;
            // At most max_subchunks entries: each takes at least T bytes after the header.
            index.entries[index.len] = (end as u32, trailer);
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
            .map(move |&(start, trailer)| {
                let start = start as usize;
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
/// when the next subchunk would not fit. Full blocks go to `emit`. One packer serves both
/// layouts; its block buffer is allocated once.
pub struct BlockPacker {
    elink: u16,
    sequence: u8,
    layout: BlockLayout,
    block: Box<[u8]>,
    /// Where the next subchunk's payload goes.
    fill: usize,
}

impl BlockPacker {
    /// A GBT-mode packer.
    pub fn new(elink: u16) -> Self {
        Self::starting_at(elink, 0)
    }

    /// A GBT-mode packer whose first block carries sequence number `sequence`.
    pub fn starting_at(elink: u16, sequence: u8) -> Self {
        Self::with_layout(BlockLayout::GBT, elink, sequence)
    }

    /// A packer of `layout`'s blocks whose first block carries sequence number `sequence`.
    pub fn with_layout(layout: BlockLayout, elink: u16, sequence: u8) -> Self {
        Self {
            elink: elink & MAX_ELINK,
            sequence: sequence % SEQUENCE_MODULO,
            layout,
            block: vec![0; layout.block_size()].into_boxed_slice(),
            fill: BLOCK_HEADER_SIZE,
        }
    }

    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// The sequence number the next emitted block will carry.
    pub fn next_sequence(&self) -> u8 {
        self.sequence
    }

    /// Skips sequence numbers (a lost block, for fault injection).
    pub fn skip_sequence(&mut self, n: u8) {
        self.sequence = (self.sequence + n) % SEQUENCE_MODULO;
    }

    /// Payload room left once a subchunk's trailer is in, kept aligned; at least one trailer
    /// size because a block with less room is flushed.
    #[inline(always)]
    fn room(&self) -> usize {
        let t = self.layout.trailer_size();
        (self.layout.block_size() - self.fill - t) & !(t - 1)
    }

    #[inline(always)]
    fn flush_if_full(&mut self, emit: &mut impl FnMut(&[u8])) {
        if self.layout.block_size() - self.fill < 2 * self.layout.trailer_size() {
            self.flush(emit);
        }
    }

    /// Appends one chunk, emitting every block it fills.
    pub fn push(&mut self, chunk: &[u8], flags: ChunkFlags, mut emit: impl FnMut(&[u8])) {
        let mut rest = chunk;
        let mut first = true;
        loop {
            let room = self.room();
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
            self.flush_if_full(&mut emit);
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
        if len > self.room() {
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
        self.flush_if_full(&mut emit);
    }

    /// Closes the current block (if it holds anything) with a `Timeout` filler and emits it.
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        if self.fill == BLOCK_HEADER_SIZE {
            return;
        }
        let size = self.layout.block_size();
        let t = self.layout.trailer_size();
        let free = size - self.fill;
        if free > 0 {
            let pad = free - t;
            self.block[self.fill..self.fill + pad].fill(0);
            let trailer = SubchunkTrailer {
                kind: SubchunkKind::Timeout,
                length: pad as u16,
                crc_error: false,
                error: false,
                truncated: false,
            };
            self.layout
                .put_trailer_word(&mut self.block, size - t, trailer.to_word(self.layout));
        }
        BlockHeader {
            elink: self.elink,
            sequence: self.sequence,
        }
        .encode_as(self.layout, &mut self.block);
        emit(&self.block);
        self.sequence = (self.sequence + 1) % SEQUENCE_MODULO;
        self.fill = BLOCK_HEADER_SIZE;
    }

    fn put(&mut self, payload: &[u8], trailer: SubchunkTrailer) {
        let at = self.fill;
        self.block[at..at + payload.len()].copy_from_slice(payload);
        self.seal(payload.len(), trailer);
    }

    /// Pads the `len` payload bytes just written at `fill` and puts `trailer` after them.
    #[inline]
    fn seal(&mut self, len: usize, trailer: SubchunkTrailer) {
        let at = self.fill;
        let end = at + self.layout.padded(len);
        self.block[at + len..end].fill(0);
        self.layout
            .put_trailer_word(&mut self.block, end, trailer.to_word(self.layout));
        self.fill = end + self.layout.trailer_size();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unpack(blocks: &[Vec<u8>]) -> Vec<(Vec<u8>, ChunkFlags)> {
        unpack_as(BlockLayout::GBT, blocks)
    }

    fn unpack_as(layout: BlockLayout, blocks: &[Vec<u8>]) -> Vec<(Vec<u8>, ChunkFlags)> {
        let mut chunks = Vec::new();
        let mut partial: Option<Vec<u8>> = None;
        let mut index = SubchunkIndex::default();
        for b in blocks {
            let block = Block::parse_as(layout, b).unwrap();
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

    #[test]
    fn full_mode_header_and_trailer_bits_match_flxdefs() {
        let layout = BlockLayout::full(4).unwrap();
        assert_eq!(layout.block_size(), 4096);
        assert_eq!(layout.trailer_size(), 4);
        let mut b = [0u8; 4];
        BlockHeader {
            elink: 0x2C0,
            sequence: 31,
        }
        .encode_as(layout, &mut b);
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 0x2C0 | (31 << 11));
        // Phase-2 marker: 0xC0CE with (4 - 1) in bits 8..14.
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), 0xC3CE);
        assert_eq!(BlockLayout::from_marker(0xC3CE), Some(layout));
        assert_eq!(BlockLayout::from_marker(0xFFCE), BlockLayout::full(64).ok());
        assert_eq!(
            BlockLayout::from_marker(BLOCK_MARKER),
            Some(BlockLayout::GBT)
        );
        assert_eq!(BlockLayout::from_marker(BLOCK_MARKER_32B), None);
        // 0xABCE (32-bit trailers, size known elsewhere) reads; a Phase-2 marker of another
        // size or the GBT marker does not.
        b[2..4].copy_from_slice(&BLOCK_MARKER_32B.to_le_bytes());
        assert!(BlockHeader::decode_as(layout, &b).is_ok());
        for wrong in [0xC1CEu16, BLOCK_MARKER] {
            b[2..4].copy_from_slice(&wrong.to_le_bytes());
            assert!(matches!(
                BlockHeader::decode_as(layout, &b),
                Err(FormatError::BadMagic { .. })
            ));
        }
        let t = SubchunkTrailer {
            kind: SubchunkKind::Last,
            length: 0xBEEF,
            crc_error: true,
            error: true,
            truncated: true,
        };
        assert_eq!(
            t.to_u32(),
            0x4000_0000 | 0x1000_0000 | 0x0800_0000 | 0x0400_0000 | 0xBEEF
        );
        // The busy bit and bits 16..25 do not change what the trailer says.
        assert_eq!(SubchunkTrailer::from_u32(t.to_u32() | 0x03FF_0000), t);
        assert!(SubchunkTrailer::busy(1 << 25));
        // Null and out-of-band trailers carry no payload.
        assert_eq!(SubchunkTrailer::from_u32(0xE000_FFFF).length, 0);
        assert!(BlockLayout::full(0).is_err() && BlockLayout::full(65).is_err());
    }

    #[test]
    fn a_5_kb_full_mode_chunk_spans_two_4_kib_blocks() {
        let layout = BlockLayout::full(4).unwrap();
        let mut packer = BlockPacker::with_layout(layout, 3, 0);
        let chunk: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut blocks = Vec::new();
        packer.push(&chunk, ChunkFlags::default(), |b| blocks.push(b.to_vec()));
        packer.flush(|b| blocks.push(b.to_vec()));
        assert_eq!(blocks.len(), 2);
        assert!(blocks.iter().all(|b| b.len() == 4096));
        let mut index = SubchunkIndex::default();
        let first = Block::parse_as(layout, &blocks[0]).unwrap();
        first.index(&mut index).unwrap();
        let subs: Vec<_> = first.subchunks(&index).collect();
        // 4096 - 4 (header) - 4 (trailer) = 4088 bytes of the chunk in the first block.
        assert_eq!(subs.len(), 1);
        assert_eq!(subs[0].trailer.kind, SubchunkKind::First);
        assert_eq!(subs[0].data.len(), 4088);
        // A GBT reader refuses FULL-mode blocks.
        assert!(Block::parse(&blocks[0]).is_err());
        assert_eq!(
            unpack_as(layout, &blocks),
            vec![(chunk, ChunkFlags::default())]
        );
    }

    proptest! {
        #[test]
        fn full_mode_trailer_round_trip(length in any::<u16>(), kind in 1u16..6, c in any::<bool>(), e in any::<bool>(), t in any::<bool>()) {
            let trailer = SubchunkTrailer { kind: SubchunkKind::from_bits(kind), length, crc_error: c, error: e, truncated: t };
            prop_assert_eq!(SubchunkTrailer::from_u32(trailer.to_u32()), trailer);
        }

        #[test]
        fn full_mode_chunks_unpack_unchanged_across_blocks(
            chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..12000), any::<bool>(), any::<bool>()), 0..12),
            elink in 0u16..=MAX_ELINK,
            kib in 1u16..=8,
        ) {
            let layout = BlockLayout::full(kib).unwrap();
            let (mut pushed, mut in_place) = (Vec::new(), Vec::new());
            let mut a = BlockPacker::with_layout(layout, elink, 0);
            let mut b = BlockPacker::with_layout(layout, elink, 0);
            let mut spill = Vec::new();
            for (c, truncated, crc_error) in &chunks {
                let flags = ChunkFlags { truncated: *truncated, crc_error: *crc_error };
                a.push(c, flags, |x| pushed.push(x.to_vec()));
                b.push_in_place(c.len(), flags, |dst| dst.copy_from_slice(c), &mut spill, |x| in_place.push(x.to_vec()));
            }
            a.flush(|x| pushed.push(x.to_vec()));
            b.flush(|x| in_place.push(x.to_vec()));
            prop_assert_eq!(&in_place, &pushed);
            for (i, blk) in pushed.iter().enumerate() {
                prop_assert_eq!(blk.len(), layout.block_size());
                let h = Block::parse_as(layout, blk).unwrap().header;
                prop_assert_eq!(h, BlockHeader { elink, sequence: (i % 32) as u8 });
            }
            let want: Vec<_> = chunks.iter().map(|(c, t, e)| (c.clone(), ChunkFlags { truncated: *t, crc_error: *e })).collect();
            prop_assert_eq!(unpack_as(layout, &pushed), want);
        }

        #[test]
        fn full_mode_index_never_panics(mut b in proptest::collection::vec(any::<u8>(), 2048..=2048), abce in any::<bool>()) {
            let layout = BlockLayout::full(2).unwrap();
            let marker = if abce { BLOCK_MARKER_32B } else { layout.marker() };
            b[2..4].copy_from_slice(&marker.to_le_bytes());
            let block = Block::parse_as(layout, &b).unwrap();
            let mut index = SubchunkIndex::default();
            if block.index(&mut index).is_ok() {
                let total: usize = block.subchunks(&index).map(|s| s.trailer.footprint_in(layout)).sum();
                prop_assert_eq!(total, layout.block_size() - BLOCK_HEADER_SIZE);
            }
        }

        #[test]
        fn any_bytes_as_any_layout_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..9000), kib in 1u16..=8) {
            let mut index = SubchunkIndex::default();
            for layout in [BlockLayout::GBT, BlockLayout::full(kib).unwrap()] {
                for blk in bytes.chunks(layout.block_size()) {
                    if let Ok(block) = Block::parse_as(layout, blk) {
                        let _ = block.index(&mut index).map(|()| block.subchunks(&index).count());
                    }
                }
            }
        }

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
