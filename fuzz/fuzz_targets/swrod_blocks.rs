#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eformat::RobFragment;
use swdaq_swrod::{Aggregator, Allocation, BlockDecoder, PowerOfTwoIndex, RobConfig};

// Arbitrary bytes as a DMA buffer of FELIX blocks, through decoding and aggregation: no
// panic, and every fragment built parses.
fuzz_target!(|data: &[u8]| {
    let rob = RobConfig {
        elinks: (0..8).collect(),
        ring_slots: 16,
        timeout_fragments: 4,
        ..RobConfig::default()
    };
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let Ok(mut aggregator) = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Heap) else {
        return;
    };
    let mut out = |f: swdaq_swrod::BuiltFragment| {
        assert!(RobFragment::parse(f.bytes()).is_ok());
    };
    decoder.decode_blocks(data, |e, chunk, trailer| {
        aggregator.add_chunk(e, chunk, trailer, &mut out)
    });
    aggregator.flush(&mut out);
});
