#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::eventstorage::{FileHead, Record, Records};

// An EventStorage head that parses writes back to the same bytes; the records after it tile
// the rest of the file exactly (every byte in one event, end record or named damaged span).
fuzz_target!(|data: &[u8]| {
    let body = match FileHead::parse(data) {
        Ok((head, len)) => {
            let again = head.to_bytes();
            let (back, back_len) = FileHead::parse(&again).expect("a written head parses");
            assert_eq!((back, back_len), (head, again.len()));
            len
        }
        Err(_) => 0,
    };
    let mut at = body;
    for r in Records::new(data, body) {
        let (offset, len) = match r {
            Record::Event { offset, data, .. } => (offset, 16 + data.len()),
            Record::End { offset, .. } => (offset, 40),
            Record::Damaged { offset, len, .. } => (offset, len),
        };
        assert_eq!(offset, at);
        at += len;
    }
    assert_eq!(at, data.len());
});
