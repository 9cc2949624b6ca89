//! FEROL blocks: how CMS's FEROL card carries FED fragments to a readout unit over TCP. A
//! fragment is cut into blocks of at most [`FEROL_BLOCK_SIZE`] bytes, each a 16-byte FEROL
//! header and up to [`FEROL_MAX_PAYLOAD`] bytes of the fragment (whole 64-bit words); the
//! blocks of one fragment follow each other, and one TCP stream may carry the fragments of
//! several FEDs one after the other.
//!
//! Sources (read, not copied):
//! - mommsen/evb at 15803ee11d08091ba5d806dac45e32225f0ffcd7 (2018-12-17):
//!   `src/common/readoutunit/FedFragment.cc` (`FedFragment::parse` walks FEROL header, FED
//!   header, payload, trailer across socket buffers; `checkFerolHeader` checks the signature,
//!   the event number of every block after the first against the first's, and the FED id;
//!   `checkFedHeader` compares the FED header's level-1 id and source id with the FEROL
//!   header's), `include/evb/Constants.h` (`FEROL_BLOCK_SIZE` = 4096),
//!   `src/common/dummyFEROL/FragmentGenerator.cc` (blocks of `FEROL_BLOCK_SIZE` minus the
//!   header, packet numbers from 0, first and last flags, FED id and event number taken from
//!   the FED header) and `include/evb/readoutunit/FerolConnectionManager.h` (the readout unit
//!   accepts the FEROLs' connections: FEROLs are the TCP clients).
//! - The header itself, `interface/shared/ferol_header.h`, belongs to XDAQ and is not in that
//!   repository; its bit positions here are as elaird/hcalraw reads them (`decode.py`
//!   `MOLheader` at 91e24bc58425ae2f36cc16f9080c2b5999fc47d6, whose callers swap each header
//!   word's bytes first, and `cpp/mol.cpp` at 22957f6876b14fbb36f577d1032d7236610d0099, whose
//!   signature mask on the unswapped word is "GZ"): each header word big-endian on the wire
//!   (the first two bytes are "GZ"), the FED's own words after it as the FED wrote them
//!   (little-endian here, as [`crate::fed`]). hcalraw reads the event number's low 24 bits,
//!   all a FED header's level-1 id holds; wider event numbers are not read here.
//!
//! Word 0 (big-endian):
//!
//! | bits   | field |
//! |--------|-------|
//! | 48..64 | signature (= 0x475A) |
//! | 32..43 | packet (block) number within the fragment, from 0 (11 bits) |
//! | 31     | first block of the fragment |
//! | 30     | last block of the fragment |
//! | 0..10  | payload length in 64-bit words (10 bits) |
//!
//! Word 1 (big-endian):
//!
//! | bits   | field |
//! |--------|-------|
//! | 32..44 | FED id (12 bits) |
//! | 0..24  | event number, the FED header's level-1 id (24 bits) |
//!
//! Bits not listed are written zero and read past.
//!
//! [`FerolDeframer`] turns a byte stream (any split into reads) into whole FED fragments,
//! and every corruption a header can show into one [`FerolProblem`] for the FED it concerns;
//! after a problem it skips to the next block that can start a fragment of the stream's
//! FEDs, so garbage costs the fragments it touches and never stalls the stream. A fragment
//! whose first block is itself corrupt, met while skipping (two corrupt fragments back to
//! back), is part of the same loss and not counted again.

use crate::error::{FormatError, need};
use crate::fed::{FED_L1_ID_MASK, FED_WORD, FedHeader};
use std::io;

pub const FEROL_HEADER_SIZE: usize = 16;
/// A FEROL block, header included, is at most this long.
pub const FEROL_BLOCK_SIZE: usize = 4096;
/// The most fragment bytes one block carries.
pub const FEROL_MAX_PAYLOAD: usize = FEROL_BLOCK_SIZE - FEROL_HEADER_SIZE;
pub const FEROL_SIGNATURE: u16 = 0x475A;
/// Packet numbers are 11 bits: a fragment has at most this many blocks.
pub const FEROL_MAX_PACKETS: usize = 1 << 11;
/// The payload length field (10 bits of 64-bit words) holds at most this many bytes.
pub const FEROL_LENGTH_FIELD_MAX: usize = ((1 << 10) - 1) * FED_WORD;

/// One FEROL header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FerolHeader {
    /// Block number within its fragment, from 0 (11 bits).
    pub packet: u16,
    pub first: bool,
    pub last: bool,
    /// Payload bytes that follow the header: a whole number of words, at most
    /// [`FEROL_LENGTH_FIELD_MAX`] (a valid block: 8 to [`FEROL_MAX_PAYLOAD`]).
    pub payload_bytes: usize,
    /// FED id, 12 bits.
    pub fed_id: u16,
    /// Event number (the FED's level-1 id), 24 bits.
    pub event: u32,
}

fn field(word: u64, shift: u32, width: u32) -> u64 {
    (word >> shift) & ((1u64 << width) - 1)
}

impl FerolHeader {
    const WHAT: &'static str = "FEROL header";

    /// Reads the first 16 bytes of `bytes`; the signature must be FEROL's.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FEROL_HEADER_SIZE)?;
        let word = |at: usize| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&bytes[at..at + 8]);
            u64::from_be_bytes(raw)
        };
        let (w0, w1) = (word(0), word(8));
        let signature = field(w0, 48, 16) as u16;
        if signature != FEROL_SIGNATURE {
            return Err(FormatError::BadMagic {
                what: Self::WHAT,
                expected: FEROL_SIGNATURE.into(),
                got: signature.into(),
            });
        }
        Ok(Self {
            packet: field(w0, 32, 11) as u16,
            first: field(w0, 31, 1) == 1,
            last: field(w0, 30, 1) == 1,
            payload_bytes: field(w0, 0, 10) as usize * FED_WORD,
            fed_id: field(w1, 32, 12) as u16,
            event: field(w1, 0, 24) as u32,
        })
    }

    /// The header's 16 bytes (fields wider than theirs are cut to width; the payload length
    /// to whole words).
    pub fn to_bytes(&self) -> [u8; FEROL_HEADER_SIZE] {
        let w0 = (u64::from(FEROL_SIGNATURE) << 48)
            | ((u64::from(self.packet) & 0x7FF) << 32)
            | (u64::from(self.first) << 31)
            | (u64::from(self.last) << 30)
            | ((self.payload_bytes / FED_WORD) as u64 & 0x3FF);
        let w1 = ((u64::from(self.fed_id) & 0xFFF) << 32) | (u64::from(self.event) & 0xFF_FFFF);
        let mut out = [0u8; FEROL_HEADER_SIZE];
        out[..8].copy_from_slice(&w0.to_be_bytes());
        out[8..].copy_from_slice(&w1.to_be_bytes());
        out
    }

    /// A block that can start a fragment of one of `feds`: what a deframer resynchronises on.
    fn starts_fragment_of(&self, feds: &[u16]) -> bool {
        self.first
            && self.packet == 0
            && plausible_length(self.payload_bytes)
            && feds.contains(&self.fed_id)
    }
}

fn plausible_length(bytes: usize) -> bool {
    (FED_WORD..=FEROL_MAX_PAYLOAD).contains(&bytes)
}

/// Number of blocks a fragment of `len` bytes takes.
pub fn ferol_blocks(len: usize) -> usize {
    len.div_ceil(FEROL_MAX_PAYLOAD).max(1)
}

/// Bytes a fragment of `len` bytes takes as FEROL blocks.
pub fn ferol_framed_len(len: usize) -> usize {
    len + ferol_blocks(len) * FEROL_HEADER_SIZE
}

/// Appends `fragment` (a FED fragment, whole words) to `out` as FEROL blocks of FED `fed_id`
/// and event `event`, as a FEROL frames it; `edit` may change each block's header (fault
/// injection) before it is written. A fragment too long for the packet number field, or
/// not whole words, is refused.
pub fn encode_ferol_blocks(
    fragment: &[u8],
    fed_id: u16,
    event: u32,
    out: &mut Vec<u8>,
    mut edit: impl FnMut(usize, &mut FerolHeader),
) -> Result<(), FormatError> {
    let blocks = ferol_blocks(fragment.len());
    if fragment.is_empty() || !fragment.len().is_multiple_of(FED_WORD) || blocks > FEROL_MAX_PACKETS
    {
        return Err(FormatError::Inconsistent {
            what: "FEROL blocks",
            field: "fragment length",
            value: fragment.len() as u64,
        });
    }
    out.reserve(ferol_framed_len(fragment.len()));
    for (packet, chunk) in fragment.chunks(FEROL_MAX_PAYLOAD).enumerate() {
        let mut header = FerolHeader {
            packet: packet as u16,
            first: packet == 0,
            last: packet + 1 == blocks,
            payload_bytes: chunk.len(),
            fed_id,
            event: event & FED_L1_ID_MASK,
        };
        edit(packet, &mut header);
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(chunk);
    }
    Ok(())
}

/// A corruption a FEROL header can show; each costs the fragment it is found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FerolProblem {
    /// Not FEROL's signature where a header must be.
    Signature,
    /// A FED id not the stream's, not its fragment's (a later block), or not the FED
    /// header's (the first block).
    FedId,
    /// A later block's event number not the first's, or the first's not the FED header's
    /// level-1 id.
    EventNumber,
    /// A packet number out of order: a first block not numbered 0, a later block not the
    /// next, a later block with no fragment open, a fragment left without its last block.
    PacketOrder,
    /// A payload length no block has (0, or beyond a block), or a fragment longer than the
    /// receiver takes.
    Length,
}

impl FerolProblem {
    pub const ALL: [Self; 5] = [
        Self::Signature,
        Self::FedId,
        Self::EventNumber,
        Self::PacketOrder,
        Self::Length,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Signature => "signature",
            Self::FedId => "fed_id",
            Self::EventNumber => "event_number",
            Self::PacketOrder => "packet_order",
            Self::Length => "length",
        }
    }
}

/// What a [`FerolDeframer`] hands on.
#[derive(Debug, PartialEq, Eq)]
pub enum FerolItem<'a> {
    /// A whole fragment of FED `fed`, its blocks' payloads joined.
    Fragment {
        fed: u16,
        event: u32,
        bytes: &'a [u8],
    },
    /// A corruption, charged to FED `fed` (one of the stream's).
    Problem { fed: u16, problem: FerolProblem },
}

#[derive(Debug, Clone, Copy)]
struct Open {
    fed: u16,
    event: u32,
    next_packet: u16,
}

/// Bytes one read asks for: a few blocks of every FED of a busy stream.
const READ_CHUNK: usize = 256 << 10;

/// One TCP stream's FEROL blocks into FED fragments. Feed it bytes as they come
/// ([`Self::push`] or [`Self::read_from`]); it keeps what does not yet make a whole block.
///
/// A problem is charged to the fragment's FED: the open fragment's, else the one the block's
/// own FED header names when that is one of the stream's, else the stream's first FED.
#[derive(Debug)]
pub struct FerolDeframer {
    feds: Vec<u16>,
    max_fragment: usize,
    /// Received bytes `start..end` are not yet consumed; the storage past `end` is reused
    /// (allocated and zeroed once, never per read).
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    open: Option<Open>,
    assembling: Vec<u8>,
    /// After a problem: skipping to the next block that can start a fragment.
    resync: bool,
}

impl FerolDeframer {
    /// A stream carrying FEDs `feds` (at least one), fragments of at most `max_fragment`
    /// bytes.
    pub fn new(feds: Vec<u16>, max_fragment: usize) -> Self {
        assert!(!feds.is_empty(), "a FEROL stream carries at least one FED");
        Self {
            feds,
            max_fragment,
            buffer: Vec::new(),
            start: 0,
            end: 0,
            open: None,
            assembling: Vec::new(),
            resync: false,
        }
    }

    pub fn feds(&self) -> &[u16] {
        &self.feds
    }

    /// True while part of a block or fragment is held: the stream stopped mid-fragment.
    pub fn partial(&self) -> bool {
        self.open.is_some() || self.end > self.start
    }

    /// Forgets everything held (a new connection starts with a fresh block); true when part
    /// of a fragment was lost.
    pub fn reset(&mut self) -> bool {
        let lost = self.partial();
        self.start = 0;
        self.end = 0;
        self.open = None;
        self.assembling.clear();
        self.resync = false;
        lost
    }

    /// Appends received bytes and hands on what they complete.
    pub fn push(&mut self, bytes: &[u8], out: impl FnMut(FerolItem<'_>)) {
        self.make_room(bytes.len());
        self.buffer[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
        self.process(out);
    }

    /// One `read` from `reader` straight into the deframer's buffer, then what it completes
    /// handed on. Returns the read's result (0: the peer closed).
    pub fn read_from(
        &mut self,
        reader: &mut impl io::Read,
        out: impl FnMut(FerolItem<'_>),
    ) -> io::Result<usize> {
        self.make_room(READ_CHUNK / 4);
        let read = reader.read(&mut self.buffer[self.end..]);
        if let Ok(n) = read
            && n > 0
        {
            self.end += n;
            self.process(out);
        }
        read
    }

    /// At least `room` bytes free past `end`: the unconsumed bytes moved to the front (at
    /// most a block's worth once processed), the storage grown only when that is not enough.
    fn make_room(&mut self, room: usize) {
        if self.buffer.len() - self.end >= room {
            return;
        }
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buffer.len() - self.end < room {
            let size = (self.end + room).max(READ_CHUNK).max(self.buffer.len() * 2);
            self.buffer.resize(size, 0);
        }
    }

    /// The FED a problem at block `at` (its bytes from there) is charged to.
    fn charge(&self, at: &[u8]) -> u16 {
        if let Some(open) = self.open {
            return open.fed;
        }
        at.get(FEROL_HEADER_SIZE..)
            .and_then(|b| FedHeader::parse(b).ok())
            .map(|h| h.source_id)
            .filter(|id| self.feds.contains(id))
            .unwrap_or(self.feds[0])
    }

    fn fail(&mut self, fed: u16, problem: FerolProblem, out: &mut impl FnMut(FerolItem<'_>)) {
        out(FerolItem::Problem { fed, problem });
        self.open = None;
        self.assembling.clear();
        self.resync = true;
        // Past this header's first word: the scan goes on word by word.
        self.start += FED_WORD;
    }

    fn process(&mut self, mut out: impl FnMut(FerolItem<'_>)) {
        loop {
            let rest = &self.buffer[self.start..self.end];
            if rest.len() < FEROL_HEADER_SIZE {
                break;
            }
            if self.resync {
                // Headers lie on word boundaries; a payload word that passes for a header
                // that starts a fragment of this stream's FEDs is odds of about 2^-40.
                let found = (0..=rest.len() - FEROL_HEADER_SIZE)
                    .step_by(FED_WORD)
                    .find(|&at| {
                        FerolHeader::parse(&rest[at..])
                            .is_ok_and(|h| h.starts_fragment_of(&self.feds))
                    });
                match found {
                    Some(at) => {
                        self.start += at;
                        self.resync = false;
                    }
                    None => {
                        let scanned =
                            (rest.len() - FEROL_HEADER_SIZE) / FED_WORD * FED_WORD + FED_WORD;
                        self.start += scanned;
                        break;
                    }
                }
                continue;
            }
            let header = match FerolHeader::parse(rest) {
                Ok(h) => h,
                Err(_) => {
                    let fed = self.charge(rest);
                    self.fail(fed, FerolProblem::Signature, &mut out);
                    continue;
                }
            };
            if !plausible_length(header.payload_bytes) {
                let fed = self.charge(rest);
                self.fail(fed, FerolProblem::Length, &mut out);
                continue;
            }
            let block = FEROL_HEADER_SIZE + header.payload_bytes;
            if rest.len() < block {
                break;
            }
            let payload = &rest[FEROL_HEADER_SIZE..block];
            if header.first {
                if let Some(open) = self.open.take() {
                    // The fragment before never had its last block.
                    out(FerolItem::Problem {
                        fed: open.fed,
                        problem: FerolProblem::PacketOrder,
                    });
                    self.assembling.clear();
                }
                let fed_header = FedHeader::parse(payload).ok();
                let charged = self.charge(rest);
                if header.packet != 0 {
                    let fed = if self.feds.contains(&header.fed_id) {
                        header.fed_id
                    } else {
                        charged
                    };
                    self.fail(fed, FerolProblem::PacketOrder, &mut out);
                    continue;
                }
                let on_stream = self.feds.contains(&header.fed_id);
                if !on_stream || fed_header.is_some_and(|h| h.source_id != header.fed_id) {
                    self.fail(charged, FerolProblem::FedId, &mut out);
                    continue;
                }
                if fed_header.is_some_and(|h| h.l1_id != header.event) {
                    self.fail(header.fed_id, FerolProblem::EventNumber, &mut out);
                    continue;
                }
                self.open = Some(Open {
                    fed: header.fed_id,
                    event: header.event,
                    next_packet: 1,
                });
            } else {
                let Some(open) = self.open else {
                    let fed = if self.feds.contains(&header.fed_id) {
                        header.fed_id
                    } else {
                        self.feds[0]
                    };
                    self.fail(fed, FerolProblem::PacketOrder, &mut out);
                    continue;
                };
                let problem = if header.fed_id != open.fed {
                    Some(FerolProblem::FedId)
                } else if header.event != open.event {
                    Some(FerolProblem::EventNumber)
                } else if header.packet != open.next_packet {
                    Some(FerolProblem::PacketOrder)
                } else {
                    None
                };
                if let Some(problem) = problem {
                    self.fail(open.fed, problem, &mut out);
                    continue;
                }
                self.open = Some(Open {
                    next_packet: open.next_packet.wrapping_add(1),
                    ..open
                });
            }
            let Some(open) = self.open else {
                unreachable!("opened above")
            };
            if self.assembling.len() + payload.len() > self.max_fragment {
                self.fail(open.fed, FerolProblem::Length, &mut out);
                continue;
            }
            self.assembling.extend_from_slice(payload);
            self.start += block;
            if header.last {
                self.open = None;
                out(FerolItem::Fragment {
                    fed: open.fed,
                    event: open.event,
                    bytes: &self.assembling,
                });
                self.assembling.clear();
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::{FedTrailer, encode_fed_fragment};
    use proptest::prelude::*;

    /// A fragment handed on: FED, event, bytes.
    type Whole = (u16, u32, Vec<u8>);

    fn fragment(fed: u16, event: u32, payload_words: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..payload_words * 8)
            .map(|i| (i * 7 + fed as usize) as u8)
            .collect();
        let header = FedHeader {
            l1_id: event,
            source_id: fed,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_fed_fragment(&mut out, &header, &FedTrailer::default(), &payload);
        out
    }

    fn collect(
        deframer: &mut FerolDeframer,
        bytes: &[u8],
        split: usize,
    ) -> (Vec<Whole>, Vec<(u16, FerolProblem)>) {
        let (mut fragments, mut problems) = (Vec::new(), Vec::new());
        for chunk in bytes.chunks(split.max(1)) {
            deframer.push(chunk, |item| match item {
                FerolItem::Fragment { fed, event, bytes } => {
                    fragments.push((fed, event, bytes.to_vec()))
                }
                FerolItem::Problem { fed, problem } => problems.push((fed, problem)),
            });
        }
        (fragments, problems)
    }

    #[test]
    fn header_round_trips_and_reads_gz_first() {
        let h = FerolHeader {
            packet: 3,
            first: false,
            last: true,
            payload_bytes: 4080,
            fed_id: 0xABC,
            event: 0x12_3456,
        };
        let bytes = h.to_bytes();
        assert_eq!(&bytes[..2], b"GZ");
        assert_eq!(FerolHeader::parse(&bytes).unwrap(), h);
        let mut bad = bytes;
        bad[0] = 0;
        assert!(matches!(
            FerolHeader::parse(&bad),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(matches!(
            FerolHeader::parse(&bytes[..15]),
            Err(FormatError::Truncated { .. })
        ));
    }

    #[test]
    fn a_large_fragment_spans_blocks_and_comes_back_whole() {
        let frag = fragment(5, 77, 2000); // 16 KB: five blocks
        let mut stream = Vec::new();
        encode_ferol_blocks(&frag, 5, 77, &mut stream, |_, _| {}).unwrap();
        assert_eq!(stream.len(), ferol_framed_len(frag.len()));
        assert_eq!(ferol_blocks(frag.len()), 4);
        for split in [1, 7, 100, 4096, 1 << 20] {
            let mut d = FerolDeframer::new(vec![5], 1 << 20);
            let (fragments, problems) = collect(&mut d, &stream, split);
            assert_eq!(problems, vec![]);
            assert_eq!(fragments, vec![(5, 77, frag.clone())]);
            assert!(!d.partial());
        }
    }

    /// Each corruption, in any block of a fragment of several FEDs' stream, is counted once
    /// for the right FED and costs only its fragment.
    #[test]
    fn every_corruption_is_counted_once_for_its_fed() {
        type Edit = fn(usize, &mut FerolHeader);
        let cases: [(FerolProblem, Edit); 5] = [
            (FerolProblem::PacketOrder, |k, h| h.packet = k as u16 + 1),
            (FerolProblem::FedId, |_, h| h.fed_id ^= 0x800),
            (FerolProblem::EventNumber, |_, h| h.event ^= 1),
            (FerolProblem::Length, |_, h| {
                h.payload_bytes = FEROL_LENGTH_FIELD_MAX
            }),
            (FerolProblem::Signature, |_, _| {}),
        ];
        for (problem, edit) in cases {
            for block in 0..3 {
                let mut stream = Vec::new();
                let mut want = Vec::new();
                for event in 1..=3u32 {
                    for fed in [10u16, 11, 12] {
                        let frag = fragment(fed, event, 1100); // three blocks
                        let hit = event == 2 && fed == 11;
                        let at = stream.len();
                        encode_ferol_blocks(&frag, fed, event, &mut stream, |k, h| {
                            if hit && k == block {
                                edit(k, h)
                            }
                        })
                        .unwrap();
                        if hit && problem == FerolProblem::Signature {
                            let offset = at + block * FEROL_BLOCK_SIZE;
                            stream[offset] = b'X';
                        }
                        if !hit {
                            want.push((fed, event, frag));
                        }
                    }
                }
                let mut d = FerolDeframer::new(vec![10, 11, 12], 1 << 16);
                let (fragments, problems) = collect(&mut d, &stream, 1000);
                assert_eq!(
                    problems,
                    vec![(11, problem)],
                    "{problem:?} in block {block}"
                );
                assert_eq!(fragments, want, "{problem:?} in block {block}");
            }
        }
    }

    #[test]
    fn a_fragment_over_the_limit_is_a_length_problem_and_the_next_comes_through() {
        let mut stream = Vec::new();
        let big = fragment(1, 1, 1000);
        let small = fragment(1, 2, 10);
        encode_ferol_blocks(&big, 1, 1, &mut stream, |_, _| {}).unwrap();
        encode_ferol_blocks(&small, 1, 2, &mut stream, |_, _| {}).unwrap();
        let mut d = FerolDeframer::new(vec![1], 4096);
        let (fragments, problems) = collect(&mut d, &stream, 512);
        assert_eq!(problems, vec![(1, FerolProblem::Length)]);
        assert_eq!(fragments, vec![(1, 2, small)]);
    }

    #[test]
    fn a_cut_stream_is_partial_until_reset() {
        let mut stream = Vec::new();
        encode_ferol_blocks(&fragment(3, 9, 600), 3, 9, &mut stream, |_, _| {}).unwrap();
        let mut d = FerolDeframer::new(vec![3], 1 << 16);
        let (fragments, _) = collect(&mut d, &stream[..3000], 5000);
        assert!(fragments.is_empty() && d.partial());
        assert!(d.reset());
        assert!(!d.partial() && !d.reset());
    }

    proptest! {
        /// Any fragments of any FEDs, framed and read in any split, come back whole.
        #[test]
        fn framing_round_trips(
            words in proptest::collection::vec((0u16..3, 2usize..1500), 1..12),
            split in 1usize..9000,
        ) {
            let mut stream = Vec::new();
            let mut want = Vec::new();
            for (i, (fed, w)) in words.iter().enumerate() {
                let frag = fragment(*fed, i as u32, *w - 2);
                encode_ferol_blocks(&frag, *fed, i as u32, &mut stream, |_, _| {}).unwrap();
                want.push((*fed, i as u32, frag));
            }
            let mut d = FerolDeframer::new(vec![0, 1, 2], 1 << 16);
            let (fragments, problems) = collect(&mut d, &stream, split);
            prop_assert!(problems.is_empty());
            prop_assert_eq!(fragments, want);
        }

        /// Any bytes: never a panic, and every fragment handed on fits the limit.
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..20_000), split in 1usize..5000) {
            let _ = FerolHeader::parse(&bytes);
            let mut d = FerolDeframer::new(vec![0, 1], 8192);
            for chunk in bytes.chunks(split) {
                d.push(chunk, |item| {
                    if let FerolItem::Fragment { bytes, .. } = item {
                        assert!(bytes.len() <= 8192);
                    }
                });
            }
        }

        /// Garbage in the middle costs a bounded number of problems, and the fragments after
        /// it come through. Garbage holding the FEROL signature forges a block header, which
        /// may take the next fragment's bytes as its payload: no framing can tell, so such
        /// garbage is not drawn.
        #[test]
        fn garbage_is_skipped(garbage in proptest::collection::vec(any::<u8>(), 1..3000)) {
            let signature = FEROL_SIGNATURE.to_be_bytes();
            prop_assume!(!garbage.windows(2).any(|w| w == signature));
            let before = fragment(0, 1, 300);
            let after = fragment(1, 2, 300);
            let mut stream = Vec::new();
            encode_ferol_blocks(&before, 0, 1, &mut stream, |_, _| {}).unwrap();
            let words = garbage.len() / 8 * 8;
            stream.extend_from_slice(&garbage[..words]);
            encode_ferol_blocks(&after, 1, 2, &mut stream, |_, _| {}).unwrap();
            let mut d = FerolDeframer::new(vec![0, 1], 1 << 16);
            let (fragments, _) = collect(&mut d, &stream, 777);
            prop_assert_eq!(fragments.first(), Some(&(0, 1, before)));
            prop_assert_eq!(fragments.last(), Some(&(1, 2, after)));
        }
    }
}
