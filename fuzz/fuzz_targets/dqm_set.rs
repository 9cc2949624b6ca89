#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_dqm::{Axis, Check, Hist1, HistSet, Quality, Test, compare, compare_counts};

// A reference file is untrusted input: whatever it holds is refused with a reason or read as
// a set that judges against itself without a panic, never Bad. And any counts at all go
// through both kinds of comparison without a panic, a histogram never Bad against itself.
fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(set) = HistSet::from_json(text)
    {
        for test in [Test::Chi2, Test::Kolmogorov] {
            let check = Check { test, min_probability: 0.01, min_entries: 1 };
            for (name, verdict) in set.judge(&set, &check.into()) {
                assert!(verdict.quality != Quality::Bad, "{name}: {verdict:?}");
            }
        }
    }
    let Some((&events, counts)) = data.split_first() else { return };
    let half = counts.len() / 2;
    let hist = |bytes: &[u8]| {
        let mut h = Hist1::new("h", "h", Axis::new("x", "", 16, 0.0, 16.0)).unwrap();
        for (i, &b) in bytes.iter().enumerate() {
            for _ in 0..b {
                h.fill((i % 18) as f64 - 1.0);
            }
        }
        h
    };
    let (a, b) = (hist(&counts[..half]), hist(&counts[half..]));
    for test in [Test::Chi2, Test::Kolmogorov] {
        let check = Check { test, min_probability: 0.01, min_entries: 1 };
        let _ = compare(&a, &b, &check);
        if let Ok(v) = compare(&a, &a, &check) {
            assert!(v.quality != Quality::Bad, "{v:?}");
        }
        let _ = compare_counts(&a.clone().of_counts(), u64::from(events), &b.clone().of_counts(), 1000, &check);
        if let Ok(v) = compare_counts(&a.clone().of_counts(), 1000, &a.clone().of_counts(), 1000, &check) {
            assert!(v.quality != Quality::Bad, "{v:?}");
        }
    }
});
