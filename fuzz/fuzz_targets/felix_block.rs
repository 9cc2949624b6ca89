#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::felix::{BLOCK_HEADER_SIZE, BLOCK_SIZE, Block, SubchunkIndex};

fuzz_target!(|data: &[u8]| {
    let mut index = SubchunkIndex::default();
    for bytes in data.chunks(BLOCK_SIZE) {
        if let Ok(block) = Block::parse(bytes) {
            if block.index(&mut index).is_ok() {
                let used: usize = block.subchunks(&index).map(|s| s.trailer.footprint()).sum();
                assert_eq!(used, BLOCK_SIZE - BLOCK_HEADER_SIZE);
            }
        }
    }
});
