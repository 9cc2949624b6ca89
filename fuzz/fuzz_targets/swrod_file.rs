#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_swrod::inspect::{inspect, render};

// `swdaq inspect` of a SW ROD run's file: any bytes give a report, never a panic, and every
// event it lists lies inside the file.
fuzz_target!(|data: &[u8]| {
    let report = inspect(data, Some(0));
    for e in &report.events {
        assert!(e.offset + swdaq_format::rawfile::RECORD_HEADER_SIZE + e.bytes <= data.len());
    }
    let _ = render(&report);
});
