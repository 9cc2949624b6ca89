#![no_main]
//! Two FEDs' raw files with arbitrary record bytes (truncated records, garbage, any L1 ids)
//! read through their links into super-fragments: never a panic, and every fragment placed
//! ends as good or in one failure counter.
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use std::time::{Duration, Instant};
use swdaq_evb::pause::TriggerClock;
use swdaq_evb::producer::{FedSource, Producer};
use swdaq_format::SourceId;
use swdaq_format::fed::FED_RAW_FILE_TYPE;
use swdaq_format::rawfile::RawFileHeader;
use swdaq_readout::source::FileSource;

const FRAME_SIZE: u32 = 128;

fn source(fed: u16, records: &[u8]) -> FedSource {
    let header = RawFileHeader {
        frame_type: FED_RAW_FILE_TYPE,
        frame_size: FRAME_SIZE,
        source_id: SourceId::readout(u32::from(fed)),
        run_number: 1,
        first_timestamp: 0,
        created_unix_ns: 0,
    };
    let mut file = header.to_bytes().to_vec();
    file.extend_from_slice(records);
    FedSource {
        fed,
        source: Box::new(FileSource::new(Cursor::new(file)).expect("valid header")),
        max_fragment: FRAME_SIZE as usize,
    }
}

fuzz_target!(|data: &[u8]| {
    let half = data.len() / 2;
    let sources = vec![source(1, &data[..half]), source(2, &data[half..])];
    let mut producer = Producer::from_sources(
        0,
        sources,
        64,
        Duration::ZERO,
        1,
        TriggerClock::new(Instant::now()),
    )
    .unwrap();
    let mut events = 0u64;
    // Every record takes 8 bytes at least, so a few thousand rounds exhaust any input.
    for _ in 0..8192 {
        if producer.exhausted() {
            break;
        }
        if producer.not_due_for().is_none() {
            producer.take();
            events += 1;
        }
    }
    for c in producer.fed_counts() {
        assert!(c.good + c.failures.iter().sum::<u64>() >= events);
    }
});
