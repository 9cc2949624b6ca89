#![no_main]
//! The filter-farm stand-in's check of a closed file against its `.jsn` never panics, and a
//! file it passes has no bad event.
use libfuzzer_sys::fuzz_target;
use swdaq_evb::farm::verify;

fuzz_target!(|data: &[u8]| {
    // The first byte is the length of the `.jsn` text that follows; the rest is the file.
    let Some((&jsn_len, rest)) = data.split_first() else {
        return;
    };
    let (jsn, raw) = rest.split_at((jsn_len as usize).min(rest.len()));
    let verdict = verify(raw, &String::from_utf8_lossy(jsn), 1, 1);
    if verdict.problem.is_none() {
        assert_eq!(verdict.bad, 0);
    }
});
