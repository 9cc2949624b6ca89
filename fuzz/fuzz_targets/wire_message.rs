#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_net::wire::{WireMessage, decode, encode};

// Each model's messages from its own folder: these modules name only the data-path crates, so
// the fuzz build needs no swdaq-app (see Cargo.toml).
#[path = "../../crates/swdaq-app/src/models/chain/wire.rs"]
mod chain_wire;
#[path = "../../crates/swdaq-app/src/models/evb/wire.rs"]
mod evb_wire;
#[path = "../../crates/swdaq-app/src/models/swrod/wire.rs"]
mod swrod_wire;
#[path = "../../crates/swdaq-app/src/models/tally/wire.rs"]
mod tally_wire;
use chain_wire::ChainMessage;
use evb_wire::EvbMessage;
use swrod_wire::SwrodMessage;
use tally_wire::TallyMessage;

// Whatever a peer sends, read as every model's message and the framework's: a message or an
// error, never a panic; a message that decodes encodes to bytes that decode and encode to the
// same bytes. Bytes, not `==`: a float field may hold NaN, which the trigger refuses when
// applied but which never equals itself.
fuzz_target!(|data: &[u8]| {
    round_trip::<swdaq_net::Framework>(data);
    round_trip::<ChainMessage>(data);
    round_trip::<EvbMessage>(data);
    round_trip::<SwrodMessage>(data);
    round_trip::<TallyMessage>(data);
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
