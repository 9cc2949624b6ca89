#![no_main]
//! Reading `/proc/self/mountinfo` never panics, and every mount it finds holds a path under
//! its own mount point.
use libfuzzer_sys::fuzz_target;
use swdaq_evb::ramdisk::{mount_of, parse_mountinfo};

fuzz_target!(|data: &[u8]| {
    let mounts = parse_mountinfo(&String::from_utf8_lossy(data));
    for m in &mounts {
        assert!(mount_of(&mounts, &m.point.join("x")).is_some());
        let _ = m.small_page_tmpfs();
    }
});
