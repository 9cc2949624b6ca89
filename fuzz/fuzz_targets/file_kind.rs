#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::file_kind::detect;

// Which reader `swdaq inspect` and `swdaq display` pick: any first bytes and name, a kind.
fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&n| usize::from(n).min(data.len()));
    let (name, head) = data.split_at(split);
    let detected = detect(head, &String::from_utf8_lossy(name));
    let _ = detected.describe();
});
