#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_format::roi::RoiPayload;

// Any bytes parse or fail with an error; a parsed payload's regions all read in place.
fuzz_target!(|data: &[u8]| {
    if let Ok(p) = RoiPayload::parse(data) {
        let mut regions = 0;
        for r in p.regions() {
            assert_eq!(r.adc_bytes().len(), 2 * r.channels * r.samples);
            assert_eq!(r.channel_ids().count(), r.channels);
            regions += 1;
        }
        assert_eq!(regions, p.region_count);
    }
});
