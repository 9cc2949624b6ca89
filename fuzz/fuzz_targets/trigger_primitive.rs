#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::TriggerPrimitive;

fuzz_target!(|data: &[u8]| {
    if let Ok(tps) = TriggerPrimitive::decode_all(data) {
        for tp in tps {
            assert_eq!(TriggerPrimitive::decode(&tp.to_bytes()), Ok(tp));
        }
    }
});
