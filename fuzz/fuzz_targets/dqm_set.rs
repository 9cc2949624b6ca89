#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_dqm::{Check, HistSet, Quality, Test};

// A reference file is untrusted input: whatever it holds is refused with a reason or read as
// a set that judges against itself without a panic, never Bad.
fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(set) = HistSet::from_json(text) {
        for test in [Test::Chi2, Test::Kolmogorov] {
            let check = Check { test, min_probability: 0.01, min_entries: 1 };
            for (name, verdict) in set.judge(&set, &check) {
                assert!(verdict.quality != Quality::Bad, "{name}: {verdict:?}");
            }
        }
    }
});
