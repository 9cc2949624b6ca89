#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_swrod::inspect::{inspect, render};

// `swdaq inspect` of an EventStorage file: any bytes give a report, never a panic, and every
// event it lists lies inside the file.
fuzz_target!(|data: &[u8]| {
    let name = "data_test.00000001.physics_Main.daq.RAW._lb0001._SFO-1._0001.data";
    let report = inspect(data, name, Some(0));
    for e in &report.events {
        assert!(e.offset + 16 + e.bytes <= data.len());
    }
    let _ = render(&report);
});
