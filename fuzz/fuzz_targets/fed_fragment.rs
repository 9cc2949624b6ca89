#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::fed::{
    FED_HEADER_SIZE, FedFragment, FedHeader, FedTrailer, encode_fed_fragment, fed_fragments,
};
use swdaq_format::fed_detector::{DetectorWords, detector_payload};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = FedFragment::parse(data) {
        // A detector payload lies inside the fragment, after its two words.
        if let Ok(Some(detector)) = detector_payload(&f) {
            let start = detector.bytes.as_ptr() as usize - data.as_ptr() as usize;
            assert!(start + detector.bytes.len() <= data.len() - 8);
            assert_eq!(detector.bytes.len(), detector.words.payload_bytes);
        }
        // A fragment whose CRC checks re-encodes to the same fields and payload; to the same
        // bytes when its header and trailer words have no reserved bit set (CMS ignores them,
        // and so does the parser).
        if f.crc_ok() {
            let mut out = Vec::new();
            encode_fed_fragment(&mut out, &f.header, &f.trailer, f.payload());
            let again = FedFragment::parse(&out).expect("an encoded fragment parses");
            assert!(again.crc_ok());
            assert_eq!(again.header, f.header);
            assert_eq!(again.payload(), f.payload());
            let trailer_but_crc = FedTrailer { crc: f.trailer.crc, ..again.trailer };
            assert_eq!(trailer_but_crc, f.trailer);
            let words_as_parsed = out[..FED_HEADER_SIZE] == data[..FED_HEADER_SIZE]
                && again.trailer.to_word() == f.trailer.to_word();
            if words_as_parsed {
                assert_eq!(out, data);
            }
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
    let _ = DetectorWords::parse(data);
    let _ = FedTrailer::parse(data);
});
