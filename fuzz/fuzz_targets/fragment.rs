#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::Fragment;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Fragment::parse(data) {
        assert_eq!(Fragment::assemble(f.header, [f.payload]), data);
    }
});
