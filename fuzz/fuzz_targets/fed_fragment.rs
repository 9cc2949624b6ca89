#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::fed::{FedFragment, FedHeader, FedTrailer, encode_fed_fragment};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = FedFragment::parse(data) {
        // A fragment whose CRC checks re-encodes to the same bytes.
        if f.crc_ok() {
            let mut out = Vec::new();
            encode_fed_fragment(&mut out, &f.header, &f.trailer, f.payload());
            assert_eq!(out, data);
        }
    }
    let mut rest = data;
    while let Ok((last, before)) = FedFragment::parse_last(rest) {
        assert!(before.len() < rest.len());
        let _ = last.crc_ok();
        rest = before;
    }
    let _ = FedHeader::parse(data);
    let _ = FedTrailer::parse(data);
});
