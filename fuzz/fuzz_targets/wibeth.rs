#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::wibeth::{NUM_CHANNELS, SAMPLES_PER_FRAME, WibEthFrame};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = WibEthFrame::parse(data) {
        let _ = (frame.daq_header(), frame.wib_header(), frame.wib_header().has_error());
        let mut adcs = [[0u16; NUM_CHANNELS]; SAMPLES_PER_FRAME];
        frame.unpack(&mut adcs);
    }
});
