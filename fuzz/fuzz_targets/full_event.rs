#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eformat_event::{FullEvent, encode_event};

// Whatever parses re-encodes into an event with the same fields; its ROB walk never panics.
fuzz_target!(|data: &[u8]| {
    if let Ok(e) = FullEvent::parse(data) {
        let status: Vec<u32> = e.status().collect();
        let mut again = Vec::new();
        encode_event(&mut again, &e.header, &status, &[e.payload()]);
        let f = FullEvent::parse(&again).expect("a re-encoded event parses");
        assert_eq!(f.header, e.header);
        assert_eq!(f.status().collect::<Vec<_>>(), status);
        assert_eq!(f.payload(), e.payload());
        assert_eq!(f.missing_robs(), e.missing_robs());
        for rob in e.robs() {
            let _ = rob;
        }
    }
});
