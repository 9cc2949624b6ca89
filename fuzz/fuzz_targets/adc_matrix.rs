#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::FragmentType;
use swdaq_format::adc_matrix::adc_matrix;

// The first byte picks the fragment type, the rest is the payload.
fuzz_target!(|data: &[u8]| {
    let Some((&kind, payload)) = data.split_first() else {
        return;
    };
    let fragment_type = match kind % 3 {
        0 => FragmentType::WIBETH,
        1 => FragmentType::PROTO_WIB,
        _ => FragmentType::TRIGGER_PRIMITIVE,
    };
    if let Some(Ok(m)) = adc_matrix(fragment_type, payload) {
        assert_eq!(m.values.len(), m.channels * m.samples);
        assert_eq!(m.timestamps.len(), m.samples);
    }
});
