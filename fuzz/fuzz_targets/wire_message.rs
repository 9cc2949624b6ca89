#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_net::wire::{decode, encode};

// Whatever a peer sends: a message or an error, never a panic; a message that decodes
// encodes to bytes that decode and encode to the same bytes. Bytes, not `==`: a float field
// may hold NaN, which the trigger refuses when applied but which never equals itself.
fuzz_target!(|data: &[u8]| {
    if let Ok(d) = decode(data) {
        let bytes = encode(d.sender, &d.message, d.frames_after);
        let again = decode(&bytes).expect("re-encoded");
        assert_eq!(encode(again.sender, &again.message, again.frames_after), bytes);
    }
});
