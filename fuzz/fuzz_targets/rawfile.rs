#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::rawfile::{RAW_HEADER_SIZE, RECORD_HEADER_SIZE, RawFileReader};
use swdaq_readout::raw_inspect::{render, walk_raw};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = RawFileReader::new(data) {
        let mut frame = Vec::new();
        while let Ok(true) = reader.next_frame(&mut frame) {}
    }
    // `swdaq inspect` of a raw file: its frames through the continuity checks, each record
    // handed over where it lies (the Python package's index).
    let mut end = RAW_HEADER_SIZE as u64;
    if let Ok(report) = walk_raw(data, |record| {
        assert_eq!(record.offset, end);
        end += (RECORD_HEADER_SIZE + record.frame.len()) as u64;
    }) {
        assert_eq!(report.bytes, end);
        assert!(report.flagged.len() as u64 <= report.flagged_frames);
        let _ = render(&report);
    }
});
