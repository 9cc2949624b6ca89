#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_app::models::{
    chain::wire::ChainMessage, evb::wire::EvbMessage, swrod::wire::SwrodMessage,
};
use swdaq_net::wire::{WireMessage, decode, encode};

// Whatever a peer sends, read as every model's message and the framework's: a message or an
// error, never a panic; a message that decodes encodes to bytes that decode and encode to the
// same bytes. Bytes, not `==`: a float field may hold NaN, which the trigger refuses when
// applied but which never equals itself.
fuzz_target!(|data: &[u8]| {
    round_trip::<swdaq_net::Framework>(data);
    round_trip::<ChainMessage>(data);
    round_trip::<EvbMessage>(data);
    round_trip::<SwrodMessage>(data);
});

fn round_trip<M: WireMessage>(data: &[u8]) {
    if let Ok(d) = decode::<M>(data) {
        let bytes = encode(d.sender, &d.message, d.frames_after);
        let again = decode::<M>(&bytes).expect("re-encoded");
        assert_eq!(
            encode(again.sender, &again.message, again.frames_after),
            bytes
        );
    }
}
