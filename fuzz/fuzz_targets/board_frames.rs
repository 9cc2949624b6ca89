#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::board_frame::{BoardFrame, frame_size, frames};

// Any bytes walk as board frames or end with an error; every frame read lies inside the
// bytes, one after another, and reads back the same when parsed alone.
fuzz_target!(|data: &[u8]| {
    let mut next = 0;
    for frame in frames(data) {
        let Ok((at, frame)) = frame else { break };
        assert_eq!(at, next);
        next = at + frame_size(frame.payload.len());
        assert!(next <= data.len());
        assert_eq!(BoardFrame::parse(&data[at..next]), Ok(frame));
    }
});
