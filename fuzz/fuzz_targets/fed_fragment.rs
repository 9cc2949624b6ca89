#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::fed::{FedFragment, FedHeader, FedTrailer, encode_fed_fragment, fed_fragments};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = FedFragment::parse(data) {
        // A fragment whose CRC checks re-encodes to the same bytes.
        if f.crc_ok() {
            let mut out = Vec::new();
            encode_fed_fragment(&mut out, &f.header, &f.trailer, f.payload());
            assert_eq!(out, data);
        }
    }
    // The backwards walk: fragments back to back from the end, each inside the data.
    let mut end = data.len();
    for (offset, fragment) in fed_fragments(data).map_while(Result::ok) {
        assert_eq!(offset + fragment.bytes.len(), end);
        let _ = fragment.crc_ok();
        end = offset;
    }
    let _ = FedHeader::parse(data);
    let _ = FedTrailer::parse(data);
});
