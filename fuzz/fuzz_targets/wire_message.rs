#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_net::wire::{decode, encode};

// Whatever a peer sends: a message or an error, never a panic; a message that decodes
// encodes back to the same message.
fuzz_target!(|data: &[u8]| {
    if let Ok(d) = decode(data) {
        let again = decode(&encode(d.sender, &d.message, d.frames_after)).expect("re-encoded");
        assert_eq!(again, d);
    }
});
