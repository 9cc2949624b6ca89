#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eformat_event::{EventLists, FullEvent, encode_event};

// Whatever parses re-encodes into an event with the same fields; its ROB walk and stream
// tags never panic.
fuzz_target!(|data: &[u8]| {
    if let Ok(e) = FullEvent::parse(data) {
        let status: Vec<u32> = e.status().collect();
        let (l1, l2, hlt) = (e.l1_trigger_info(), e.l2_trigger_info(), e.hlt_info());
        let tags: Vec<u32> = e
            .stream_tag_bytes()
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let lists = EventLists {
            l1_trigger_info: &l1,
            l2_trigger_info: &l2,
            hlt_info: &hlt,
            stream_tags: &tags,
        };
        let mut again = Vec::new();
        encode_event(&mut again, &e.header, &status, &lists, &[e.payload()]);
        let f = FullEvent::parse(&again).expect("a re-encoded event parses");
        assert_eq!(f.header, e.header);
        assert_eq!(f.status().collect::<Vec<_>>(), status);
        assert_eq!((f.l1_trigger_info(), f.hlt_info()), (l1, hlt));
        assert_eq!(f.stream_tag_bytes(), e.stream_tag_bytes());
        assert_eq!(f.payload(), e.payload());
        assert_eq!(f.missing_robs(), e.missing_robs());
        let _ = e.stream_tags();
        for rob in e.robs() {
            let _ = rob;
        }
    }
});
