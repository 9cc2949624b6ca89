#![no_main]
//! A FEROL stream of any bytes, split into reads where the first byte says: never a panic,
//! every fragment within the limit and of one of the stream's FEDs, and a header that parses
//! re-encodes to the same fields.
use libfuzzer_sys::fuzz_target;
use swdaq_format::ferol::{FerolDeframer, FerolHeader, FerolItem};

const MAX_FRAGMENT: usize = 16 << 10;

fuzz_target!(|data: &[u8]| {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    if let Ok(header) = FerolHeader::parse(stream) {
        assert_eq!(FerolHeader::parse(&header.to_bytes()), Ok(header));
    }
    let feds = [0u16, 1, 2];
    let mut deframer = FerolDeframer::new(feds.to_vec(), MAX_FRAGMENT);
    for chunk in stream.chunks(usize::from(split) * 16 + 1) {
        deframer.push(chunk, |item| match item {
            FerolItem::Fragment { fed, bytes, .. } => {
                assert!(feds.contains(&fed));
                assert!(bytes.len() <= MAX_FRAGMENT);
            }
            FerolItem::Problem { fed, .. } => assert!(feds.contains(&fed)),
        });
    }
    let _ = deframer.reset();
    assert!(!deframer.partial());
});
