#![no_main]
// FULL-mode blocks (32-bit trailers, 1 to 64 KiB): the first byte picks the block size,
// the rest is cut into blocks of it. Parsing and the trailer walk never panic, and a walk
// that succeeds accounts for every byte after the header.
use libfuzzer_sys::fuzz_target;
use swdaq_format::felix::{BLOCK_HEADER_SIZE, Block, BlockLayout, SubchunkIndex};

fuzz_target!(|data: &[u8]| {
    let Some((&kib, rest)) = data.split_first() else {
        return;
    };
    // Small blocks mostly (the fuzzer's inputs are short), every size sometimes.
    let kib = if kib < 192 { u16::from(kib % 4) + 1 } else { u16::from(kib % 64) + 1 };
    let layout = BlockLayout::full(kib).expect("1..=64 KiB");
    let mut index = SubchunkIndex::default();
    for bytes in rest.chunks(layout.block_size()) {
        if let Ok(block) = Block::parse_as(layout, bytes) {
            if block.index(&mut index).is_ok() {
                let used: usize = block.subchunks(&index).map(|s| s.trailer.footprint_in(layout)).sum();
                assert_eq!(used, layout.block_size() - BLOCK_HEADER_SIZE);
            }
        }
    }
});
