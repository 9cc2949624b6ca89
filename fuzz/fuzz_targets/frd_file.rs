#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::frd::{FRD_FILE_HEADER_SIZE, FrdEventHeader, FrdFile, FrdFileHeader, FrdItem, FrdScan};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = FrdFileHeader::parse(data) {
        assert_eq!(FrdFileHeader::parse(&h.to_bytes()), Ok(h));
    }
    if let Ok(h) = FrdEventHeader::parse(data) {
        assert_eq!(FrdEventHeader::parse(&h.to_bytes()), Ok(h));
    }
    if let Ok(file) = FrdFile::parse(data) {
        for event in file.events().flatten() {
            let _ = event.crc_ok();
        }
    }
    // The tolerant walk tiles the file: each item starts where the previous one ended.
    let mut at = FRD_FILE_HEADER_SIZE.min(data.len());
    for item in FrdScan::new(data, FRD_FILE_HEADER_SIZE, None) {
        let (offset, len) = match item {
            FrdItem::Event { offset, event } => (offset, event.payload.len() + 24),
            FrdItem::Damaged { offset, len, .. } => (offset, len),
        };
        assert_eq!(offset, at);
        at += len;
    }
    assert_eq!(at, data.len().max(at));
    // `swdaq inspect` of an FRD file.
    let report = swdaq_evb::inspect::inspect(data, Some(1));
    let _ = swdaq_evb::inspect::render(&report);
});
