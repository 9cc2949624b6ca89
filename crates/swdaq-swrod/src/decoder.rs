//! Block decoding: a readout thread turns the FELIX blocks of a ROB's e-links into whole
//! chunks, in GBT mode or FULL mode (the decoder's [`BlockLayout`]: block size and trailer
//! width; the walk is the same). A chunk that lies in one block is handed on where it lies (zero-copy); a chunk
//! spanning blocks is gathered in its e-link's reassembly buffer. Block sequence numbers are
//! checked per e-link; a gap drops a chunk in progress (its middle may be in the lost block).

use swdaq_format::felix::{
    Block, BlockLayout, MAX_ELINK, SEQUENCE_MODULO, SubchunkIndex, SubchunkKind, SubchunkTrailer,
};

/// What the decoder saw, counted per call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DecoderCounts {
    pub blocks: u64,
    pub chunks: u64,
    /// Blocks that are not blocks (bad marker or another layout's, a length other than the
    /// layout's block size, trailer lengths that do not add up).
    pub corrupt_blocks: u64,
    /// Blocks of e-links that do not belong to this ROB.
    pub foreign_blocks: u64,
    pub sequence_gaps: u64,
    /// Chunks begun but not finished (or finished but not begun): dropped.
    pub broken_chunks: u64,
}

const NOT_IN_ROB: u16 = u16::MAX;

/// Blocks come from memory the card wrote (not from this core's cache), and the trailer walk
/// is a chain of dependent loads from the end of the block: without prefetching, decoding
/// waited on memory for most of its time (measured: `swdaq bench swrod`, BENCHMARKS.md).
const PREFETCH_BLOCKS_AHEAD: usize = 4;

struct ElinkState {
    next_sequence: Option<u8>,
    partial: Vec<u8>,
    in_chunk: bool,
}

pub struct BlockDecoder {
    layout: BlockLayout,
    /// E-link number -> index in the ROB.
    rob_index: Vec<u16>,
    elinks: Vec<ElinkState>,
    index: Box<SubchunkIndex>,
    pub counts: DecoderCounts,
}

impl BlockDecoder {
    /// A GBT-mode decoder for the e-links `elinks` (numbers, in ROB order; at most
    /// `u16::MAX - 1`).
    pub fn new(elinks: &[u16]) -> Self {
        Self::with_layout(BlockLayout::GBT, elinks)
    }

    /// A decoder of `layout`'s blocks (GBT or FULL mode) for the e-links `elinks`.
    pub fn with_layout(layout: BlockLayout, elinks: &[u16]) -> Self {
        let mut rob_index = vec![NOT_IN_ROB; usize::from(MAX_ELINK) + 1];
        for (i, &e) in elinks.iter().enumerate() {
            rob_index[usize::from(e & MAX_ELINK)] = i as u16;
        }
        Self {
            rob_index,
            elinks: elinks
                .iter()
                .map(|_| ElinkState {
                    next_sequence: None,
                    partial: Vec::new(),
                    in_chunk: false,
                })
                .collect(),
            index: Box::new(SubchunkIndex::for_layout(layout)),
            layout,
            counts: DecoderCounts::default(),
        }
    }

    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// Forgets block sequence numbers and chunks in progress (a new run); counts are kept.
    pub fn restart(&mut self) {
        for state in &mut self.elinks {
            state.next_sequence = None;
            state.in_chunk = false;
        }
    }

    /// Decodes consecutive blocks (a DMA buffer's worth), calling `sink(e-link index in the
    /// ROB, chunk, trailer of its last subchunk)` for every whole chunk in arrival order.
    pub fn decode_blocks(
        &mut self,
        blocks: &[u8],
        mut sink: impl FnMut(usize, &[u8], SubchunkTrailer),
    ) {
        let size = self.layout.block_size();
        for (i, block) in blocks.chunks(size).enumerate() {
            if let Some(ahead) = blocks.get((i + PREFETCH_BLOCKS_AHEAD) * size..) {
                crate::prefetch::lines(ahead, size);
            }
            self.decode(block, &mut sink);
        }
    }

    /// Decodes one block.
    #[inline]
    pub fn decode(&mut self, bytes: &[u8], sink: &mut impl FnMut(usize, &[u8], SubchunkTrailer)) {
        self.counts.blocks += 1;
        let block = match Block::parse_as(self.layout, bytes) {
            Ok(b) => b,
            Err(_) => {
                self.counts.corrupt_blocks += 1;
                return;
            }
        };
        let e = self.rob_index[usize::from(block.header.elink)];
        if e == NOT_IN_ROB {
            self.counts.foreign_blocks += 1;
            return;
        }
        let e = usize::from(e);
        if block.index(&mut self.index).is_err() {
            self.counts.corrupt_blocks += 1;
            return;
        }
        let state = &mut self.elinks[e];
        let seq = block.header.sequence;
        if state.next_sequence.is_some_and(|want| want != seq) {
            self.counts.sequence_gaps += 1;
            if state.in_chunk {
                state.in_chunk = false;
                self.counts.broken_chunks += 1;
            }
        }
        state.next_sequence = Some((seq + 1) % SEQUENCE_MODULO);
        for sub in block.subchunks(&self.index) {
            let t = sub.trailer;
            match t.kind {
                SubchunkKind::Both => {
                    if state.in_chunk {
                        state.in_chunk = false;
                        self.counts.broken_chunks += 1;
                    }
                    self.counts.chunks += 1;
                    sink(e, sub.data, t);
                }
                SubchunkKind::First => {
                    if state.in_chunk {
                        self.counts.broken_chunks += 1;
                    }
                    state.partial.clear();
                    state.partial.extend_from_slice(sub.data);
                    state.in_chunk = true;
                }
                SubchunkKind::Middle | SubchunkKind::Last => {
                    if !state.in_chunk {
                        self.counts.broken_chunks += 1;
                        continue;
                    }
                    state.partial.extend_from_slice(sub.data);
                    if t.kind == SubchunkKind::Last {
                        state.in_chunk = false;
                        self.counts.chunks += 1;
                        sink(e, &state.partial, t);
                    }
                }
                SubchunkKind::Null
                | SubchunkKind::Timeout
                | SubchunkKind::Undefined
                | SubchunkKind::OutOfBand => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use swdaq_format::felix::{BlockPacker, ChunkFlags};

    fn pack(elink: u16, chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut p = BlockPacker::new(elink);
        for c in chunks {
            p.push(c, ChunkFlags::default(), |b| out.extend_from_slice(b));
        }
        p.flush(|b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn a_lost_block_is_one_gap_and_drops_the_chunk_it_split() {
        let chunks: Vec<Vec<u8>> = (0..60u8).map(|i| vec![i; 40]).collect();
        let blocks = pack(5, &chunks);
        const BLOCK_SIZE: usize = swdaq_format::felix::BLOCK_SIZE;
        assert_eq!(blocks.len() / BLOCK_SIZE, 3);
        let mut d = BlockDecoder::new(&[9, 5]);
        let mut got = Vec::new();
        let mut sink = |e: usize, c: &[u8], _| got.push((e, c[0]));
        d.decode(&blocks[..BLOCK_SIZE], &mut sink);
        d.decode(&blocks[2 * BLOCK_SIZE..], &mut sink);
        assert_eq!(d.counts.sequence_gaps, 1);
        // Block 0 ends inside chunk 24, block 2 begins inside a chunk: both are dropped.
        assert_eq!(d.counts.broken_chunks, 2);
        assert!(got.iter().all(|&(e, _)| e == 1));
        assert_eq!(got.len() as u64, d.counts.chunks);
        assert_eq!(&got[..2], &[(1, 0), (1, 1)]);
    }

    #[test]
    fn foreign_and_corrupt_blocks_are_counted() {
        let blocks = pack(7, &[vec![1; 40]]);
        let mut d = BlockDecoder::new(&[1, 2]);
        d.decode_blocks(&blocks, |_, _, _| panic!("no chunk expected"));
        let mut bad = blocks.clone();
        bad[3] = 0;
        d.decode_blocks(&bad, |_, _, _| panic!("no chunk expected"));
        d.decode_blocks(&blocks[..100], |_, _, _| panic!("no chunk expected"));
        assert_eq!(d.counts.foreign_blocks, 1);
        assert_eq!(d.counts.corrupt_blocks, 2);
    }

    fn pack_as(layout: BlockLayout, elink: u16, chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut p = BlockPacker::with_layout(layout, elink, 0);
        for c in chunks {
            p.push(c, ChunkFlags::default(), |b| out.extend_from_slice(b));
        }
        p.flush(|b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn full_mode_chunks_spanning_blocks_are_gathered_and_a_lost_block_breaks_one() {
        let layout = BlockLayout::full(4).unwrap();
        let chunks: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 5000]).collect();
        let blocks = pack_as(layout, 40, &chunks);
        let n = blocks.len() / 4096;
        assert_eq!(n, 8, "30000 bytes of chunks and trailers in 4 KiB blocks");
        let mut d = BlockDecoder::with_layout(layout, &[40, 41]);
        let mut got = Vec::new();
        d.decode_blocks(&blocks, |e, c, _| got.push((e, c.to_vec())));
        assert_eq!(
            got,
            chunks.iter().map(|c| (0, c.clone())).collect::<Vec<_>>()
        );
        // Lose the third block: the chunk it carried the middle of is dropped, and the one it
        // began (if any) too; the rest come out whole.
        let mut d = BlockDecoder::with_layout(layout, &[40]);
        let mut got = Vec::new();
        d.decode_blocks(&blocks[..2 * 4096], |_, c, _| got.push(c[0]));
        d.decode_blocks(&blocks[3 * 4096..], |_, c, _| got.push(c[0]));
        assert_eq!(d.counts.sequence_gaps, 1);
        assert!(d.counts.broken_chunks >= 1);
        assert_eq!(got.len() as u64, d.counts.chunks);
        assert!(got.len() >= 4 && got.windows(2).all(|w| w[0] < w[1]));
        // A GBT decoder reads FULL-mode blocks as corrupt, and the other way round.
        let mut gbt = BlockDecoder::new(&[40]);
        gbt.decode_blocks(&blocks[..4096], |_, _, _| panic!("no chunk expected"));
        assert_eq!(gbt.counts.corrupt_blocks, 4);
        let mut full = BlockDecoder::with_layout(layout, &[40]);
        full.decode_blocks(&pack(40, &[vec![1; 40]]), |_, _, _| {
            panic!("no chunk expected")
        });
        assert_eq!(full.counts.corrupt_blocks, 1);
    }

    proptest! {
        #[test]
        fn full_mode_chunks_come_out_as_they_went_in(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..9000), 0..12),
            kib in 1u16..=4,
        ) {
            let layout = BlockLayout::full(kib).unwrap();
            let blocks = pack_as(layout, 7, &chunks);
            let mut d = BlockDecoder::with_layout(layout, &[7]);
            let mut got = Vec::new();
            d.decode_blocks(&blocks, |_, c, _| got.push(c.to_vec()));
            prop_assert_eq!(got, chunks);
            prop_assert_eq!(d.counts.broken_chunks + d.counts.sequence_gaps + d.counts.corrupt_blocks, 0);
        }

        #[test]
        fn full_mode_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..10000), kib in 1u16..=2) {
            let mut d = BlockDecoder::with_layout(BlockLayout::full(kib).unwrap(), &[0, 1, 2, 3]);
            d.decode_blocks(&bytes, |_, _, _| {});
            prop_assert_eq!(d.counts.blocks as usize, bytes.len().div_ceil(kib as usize * 1024));
        }

        #[test]
        fn chunks_come_out_as_they_went_in(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2500), 0..30)) {
            let blocks = pack(300, &chunks);
            let mut d = BlockDecoder::new(&[300]);
            let mut got = Vec::new();
            d.decode_blocks(&blocks, |_, c, _| got.push(c.to_vec()));
            prop_assert_eq!(got, chunks);
            prop_assert_eq!(d.counts.broken_chunks + d.counts.sequence_gaps + d.counts.corrupt_blocks, 0);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let mut d = BlockDecoder::new(&[0, 1, 2, 3]);
            d.decode_blocks(&bytes, |_, _, _| {});
        }
    }
}
