#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::frd::{FrdEventHeader, FrdFile, FrdFileHeader};

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
});
