#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::rawfile::RawFileReader;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = RawFileReader::new(data) {
        let mut frame = Vec::new();
        while let Ok(true) = reader.next_frame(&mut frame) {}
    }
});
