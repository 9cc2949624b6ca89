#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eformat::{ChunkRecords, RobFragment};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = RobFragment::parse(data) {
        let status: Vec<u32> = f.status().collect();
        if f.rod_status().count() == 0 {
            assert_eq!(RobFragment::assemble(f.source_id, &status, &f.rod, f.data), data);
        }
        for record in ChunkRecords::new(f.data) {
            let _ = record;
        }
    }
});
