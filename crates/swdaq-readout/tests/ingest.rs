//! Ingest from a raw file through checks into the latency buffer, then requests against it.

use swdaq_format::FrameFormat;
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::rawfile::{RawFileHeader, RawFileWriter};
use swdaq_format::wibeth::{self, WibEthFrame, WibEthHeader};
use swdaq_format::{Fragment, FragmentType, SourceId};
use swdaq_readout::link::{Ingest, LinkShared};
use swdaq_readout::request::{DataRequest, Lookup, RequestPolicy, RequestStatus, lookup};
use swdaq_readout::ring::SlotMeta;
use swdaq_readout::source::FileSource;

const STEP: u64 = 2048;

enum Item {
    Good(u64),
    BadHeader(u64),
    Truncated(u64),
}

fn raw_file(items: &[Item]) -> Vec<u8> {
    let header = RawFileHeader {
        frame_type: FragmentType::WIBETH,
        frame_size: wibeth::FRAME_SIZE as u32,
        source_id: SourceId::readout(1),
        run_number: 1,
        first_timestamp: 0,
        created_unix_ns: 0,
    };
    let mut w = RawFileWriter::new(Vec::new(), &header).unwrap();
    let mut buf = vec![0u8; wibeth::FRAME_SIZE];
    for item in items {
        let (n, wib, len) = match *item {
            Item::Good(n) => (n, WibEthHeader::healthy(), wibeth::FRAME_SIZE),
            Item::BadHeader(n) => (
                n,
                WibEthHeader {
                    lol: 1,
                    ..WibEthHeader::healthy()
                },
                wibeth::FRAME_SIZE,
            ),
            Item::Truncated(n) => (n, WibEthHeader::healthy(), 1000),
        };
        let daq = DaqEthHeader {
            timestamp: n * STEP,
            seq_id: (n % 4096) as u16,
            ..Default::default()
        };
        wibeth::encode(&daq, &wib, &[[n as u16 & 0x3fff; 64]; 64], &mut buf);
        w.write_frame(&buf[..len]).unwrap();
    }
    w.finish().unwrap()
}

struct Timestamps(Vec<u64>);
impl swdaq_readout::link::FrameObserver for Timestamps {
    fn observe(&mut self, meta: &SlotMeta, frame: &[u8]) {
        assert_eq!(
            WibEthFrame::parse(frame).unwrap().timestamp(),
            meta.timestamp
        );
        self.0.push(meta.timestamp);
    }
}

#[test]
fn faults_are_counted_exactly_and_good_data_is_kept() {
    let mut items: Vec<Item> = (0..100).map(Item::Good).collect();
    items.retain(|i| !matches!(i, Item::Good(40..=42))); // 3 missing
    items.insert(10, Item::Truncated(10)); // a truncated copy arriving before frame 10
    items[20] = Item::BadHeader(19);
    let file = raw_file(&items);
    let link = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.01).unwrap();
    let mut ingest = Ingest::new(
        &link,
        FileSource::new(&file[..]).unwrap(),
        Timestamps(vec![]),
    )
    .unwrap();
    ingest.run(|| true).unwrap();
    let c = ingest.checker.counts;
    assert_eq!((c.missing_frames, c.bad_size, c.header_errors), (3, 1, 1));
    assert_eq!((c.timestamp_jumps, c.sequence_errors), (0, 0));
    assert_eq!(ingest.counts.frames, 97);
    assert_eq!(ingest.counts.dropped, 0);
    assert_eq!(
        ingest.observer().0.len(),
        97,
        "the observer saw every buffered frame once"
    );

    let request = |begin: u64, end: u64| DataRequest {
        trigger_number: 1,
        trigger_timestamp: begin,
        run_number: 1,
        sequence_number: 0,
        source: link.source_id,
        window_begin: begin,
        window_end: end,
        destination: 0,
    };
    let mut reader = link.buffer.reader().unwrap();
    let mut ask = |begin: u64, end: u64| {
        let errors = link.errors_overlapping(begin, end);
        let policy = RequestPolicy {
            max_window_ticks: 1 << 20,
        };
        match reader
            .with_view(link.buffer.oldest_readable(), |v| {
                lookup(v, link.format, &request(begin, end), policy, &errors, false)
            })
            .unwrap()
        {
            Lookup::Answered { fragment, status } => (
                Fragment::parse(&fragment).unwrap().header.error_bits,
                status,
            ),
            Lookup::NotYet => panic!("all data is in"),
        }
    };
    use swdaq_format::fragment::fragment_error as fe;
    assert_eq!(ask(50 * STEP, 60 * STEP), (0, RequestStatus::Complete));
    assert_eq!(
        ask(38 * STEP, 45 * STEP),
        (fe::INCOMPLETE | fe::DATA_ERROR, RequestStatus::Partial)
    );
    assert_eq!(
        ask(19 * STEP, 20 * STEP),
        (fe::DATA_ERROR, RequestStatus::Complete)
    );
}

#[test]
fn a_garbage_link_leaves_a_good_link_untouched() {
    let good_file = raw_file(&(0..200).map(Item::Good).collect::<Vec<_>>());
    let mut garbage = raw_file(&[]);
    for i in 0..300u32 {
        // Records of random sizes and random bytes.
        let len = (i * 7919) % wibeth::FRAME_SIZE as u32;
        garbage.extend_from_slice(&len.to_le_bytes());
        garbage.extend_from_slice(&[0; 4]);
        garbage.extend((0..len).map(|b| (b * i) as u8));
    }
    let good = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.01).unwrap();
    let bad = LinkShared::new(SourceId::readout(2), FrameFormat::WibEth, 0.01).unwrap();
    let (good_seen, bad_result) = std::thread::scope(|s| {
        let g = s.spawn(|| {
            let mut i = Ingest::new(
                &good,
                FileSource::new(&good_file[..]).unwrap(),
                Timestamps(vec![]),
            )
            .unwrap();
            i.run(|| true).unwrap();
            (i.observer().0.clone(), i.checker.counts)
        });
        let b = s.spawn(|| {
            let mut i = Ingest::new(&bad, FileSource::new(&garbage[..]).unwrap(), ()).unwrap();
            i.run(|| true).map(|_| i.checker.counts)
        });
        (g.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(good_seen.0, (0..200).map(|n| n * STEP).collect::<Vec<_>>());
    assert_eq!(good_seen.1.frames_ok, 200);
    let bad_counts = bad_result.expect("garbage is counted, not an error");
    assert!(bad_counts.bad_size > 0);
}
