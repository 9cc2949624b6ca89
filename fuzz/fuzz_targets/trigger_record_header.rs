#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::TriggerRecordHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = TriggerRecordHeader::decode(data) {
        assert_eq!(TriggerRecordHeader::decode(&h.to_bytes()), Ok(h));
    }
});
