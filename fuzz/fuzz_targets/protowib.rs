#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::protowib::{NUM_BLOCKS, NUM_CHANNELS, ProtoWibFrame};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = ProtoWibFrame::parse(data) {
        let _ = frame.wib_header();
        for block in 0..NUM_BLOCKS {
            let _ = frame.coldata_header(block);
        }
        let mut adcs = [0u16; NUM_CHANNELS];
        frame.unpack(&mut adcs);
    }
});
