#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::rawfile::RawFileReader;
use swdaq_readout::raw_inspect::{inspect_raw, render};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = RawFileReader::new(data) {
        let mut frame = Vec::new();
        while let Ok(true) = reader.next_frame(&mut frame) {}
    }
    // `swdaq inspect` of a raw file: its frames through the continuity checks.
    if let Ok(report) = inspect_raw(data) {
        let _ = render(&report);
    }
});
