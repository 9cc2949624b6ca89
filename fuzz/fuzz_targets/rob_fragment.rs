#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eformat::{ChunkRecords, RobFragment};

// Whatever parses rebuilds into a fragment that parses to the same fields.
fuzz_target!(|data: &[u8]| {
    if let Ok(f) = RobFragment::parse(data) {
        let status: Vec<u32> = f.status().collect();
        let rebuilt = RobFragment::assemble(f.source_id, &status, &f.rod, f.data);
        let g = RobFragment::parse(&rebuilt).expect("an assembled fragment parses");
        assert_eq!(g.source_id, f.source_id);
        assert_eq!(g.status().collect::<Vec<_>>(), status);
        assert_eq!(g.rod, f.rod);
        assert_eq!(g.data, f.data);
        for record in ChunkRecords::new(f.data) {
            let _ = record;
        }
    }
});
