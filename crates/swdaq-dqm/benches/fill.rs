//! What online monitoring costs per trigger record: `cargo bench -p swdaq-dqm`. One record of
//! the default chain's shape (4 WIBEth links of 64 channels, 92 frames each: the trigger's
//! window of about 5 900 samples a channel) from the emulator with its default detector;
//! copying the same bytes is the yardstick (`fill_record` / `memcpy` is the ratio to quote).

use divan::black_box;
use swdaq_dqm::HistSet;
use swdaq_format::trigger_record::{TriggerRecord, TriggerRecordHeader};
use swdaq_format::{Fragment, FragmentHeader, FragmentType, SourceId, Subsystem};
use swdaq_sim::{Detector, FrameFormat, SimConfig};

const LINKS: u32 = 4;
const FRAMES_PER_LINK: usize = 92;

fn main() {
    divan::main();
}

fn record() -> TriggerRecord {
    let detector = Detector::new(SimConfig::default()).expect("the default detector");
    let fragments = (0..LINKS)
        .map(|link| {
            let mut sim = detector.link(link, FrameFormat::WibEth, 0);
            let mut payload = vec![0u8; FRAMES_PER_LINK * sim.frame_size()];
            for frame in payload.chunks_exact_mut(sim.frame_size()) {
                sim.next_frame(frame);
            }
            let header = FragmentHeader {
                size: 0,
                trigger_number: 1,
                trigger_timestamp: 0,
                window_begin: 0,
                window_end: 1,
                run_number: 1,
                error_bits: 0,
                fragment_type: FragmentType::WIBETH,
                sequence_number: 0,
                detector_id: 3,
                element_id: SourceId::readout(link),
            };
            Fragment::assemble(header, [&payload[..]])
        })
        .collect();
    TriggerRecord {
        header: TriggerRecordHeader {
            trigger_number: 1,
            trigger_timestamp: 0,
            run_number: 1,
            status_bits: 0,
            trigger_type: 1,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
            components: vec![],
        },
        fragments,
    }
}

/// The chain's histograms from one record, into a set that already holds them (as online).
#[divan::bench]
fn fill_record(b: divan::Bencher) {
    let record = record();
    let mut set = HistSet::default();
    swdaq_dqm::chain::fill_record(&mut set, &record);
    b.counter(divan::counter::BytesCount::new(record.size_bytes()))
        .bench_local(|| swdaq_dqm::chain::fill_record(&mut set, black_box(&record)));
}

/// Copying the record's fragments once.
#[divan::bench]
fn memcpy(b: divan::Bencher) {
    let record = record();
    let mut copies: Vec<Vec<u8>> = record.fragments.iter().map(|f| vec![0; f.len()]).collect();
    b.counter(divan::counter::BytesCount::new(record.size_bytes()))
        .bench_local(|| {
            for (to, from) in copies.iter_mut().zip(black_box(&record.fragments)) {
                to.copy_from_slice(from);
            }
        });
}
