#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::FragmentType;
use swdaq_format::adc_matrix::{adc_matrix, adc_matrix_of_frames};

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
    let whole = adc_matrix(fragment_type, payload);
    if let Some(Ok(m)) = &whole {
        assert_eq!(m.values.len(), m.channels * m.samples);
        assert_eq!(m.timestamps.len(), m.samples);
    }
    // The same bytes as frames apart, cut at the frame size: the same matrix or error.
    let size = match fragment_type {
        FragmentType::WIBETH => swdaq_format::wibeth::FRAME_SIZE,
        _ => swdaq_format::protowib::FRAME_SIZE,
    };
    let frames: Vec<&[u8]> = payload.chunks(size).collect();
    let apart = adc_matrix_of_frames(fragment_type, &frames);
    if payload.len().is_multiple_of(size) {
        assert_eq!(whole, apart);
    }
});
