//! The whole chain end to end (`swdaq run`'s engine), checked against what the emulator
//! produced: one record per decision, each fragment exactly its window's frames; a stopped
//! link; storage that fills up; raw files (as `swdaq gen` writes them) as the source, in both
//! frame formats, and bad files refused by name.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use swdaq_app::models::chain::config::{RunConfig, SourceFormat, SourceKind, StopLink};
use swdaq_app::models::chain::inputs::emulate;
use swdaq_app::models::chain::inputs::{Feed, SourceLabel};
use swdaq_app::models::chain::system::{RunReport, run_chain};
use swdaq_app::runtime::outcome::StopReason;
use swdaq_app::runtime::stop::StopRequest;
use swdaq_dataflow::StorageFailurePolicy;
use swdaq_format::fragment::fragment_error;
use swdaq_format::rawfile::{RawFileHeader, RawFileWriter, link_path};
use swdaq_format::roi::RoiPayload;
use swdaq_format::trigger_record::record_status;
use swdaq_format::wibeth::WibEthFrame;
use swdaq_format::{
    Fragment, FragmentType, FrameFormat, SourceId, TriggerPrimitive, TriggerRecord,
};
use swdaq_readout::replay::ReplaySource;
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_store::RecordFileReader;
use swdaq_trigger::config::PeriodicConfig;

fn config(dir: &Path, seconds: f64) -> RunConfig {
    let mut c = RunConfig::default();
    c.run.duration_s = seconds;
    c.run.output_dir = dir.to_path_buf();
    c.run.metrics_addr = String::new();
    c.run.status_interval_s = 0.5;
    c.emulator.links = 2;
    c.emulator.template_s = 0.05;
    c.readout.buffer_s = 1.0;
    // A fixed 20 Hz on top of the self-trigger, so every run has decisions to check.
    c.trigger.periodic = PeriodicConfig {
        enabled: true,
        rate_hz: 20.0,
        prescale: 1,
    };
    c
}

/// The runs take data in real time on a 2-core machine: one at a time, or they starve each
/// other and the checks would measure the test harness, not the chain.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(c: &RunConfig) -> RunReport {
    let _running = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    run_chain(c, &StopRequest::default(), &()).expect("the run starts and ends cleanly")
}

fn read_records(dir: &Path) -> Vec<TriggerRecord> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files
            .iter()
            .all(|f| f.extension().is_some_and(|e| e == "hdf5")),
        "only closed HDF5 files are left: {files:?}"
    );
    let mut records = Vec::new();
    for f in files {
        let reader = RecordFileReader::open(&f).unwrap();
        for r in reader.records().unwrap() {
            records.push(r.unwrap());
        }
    }
    records.sort_by_key(|r| r.header.trigger_number);
    records
}

/// Every frame each link delivers, by timestamp, replayed the way the emulator source does.
fn emulator_frames(c: &RunConfig, frames_per_link: usize) -> Vec<HashMap<u64, Vec<u8>>> {
    let links: Vec<u32> = (0..c.emulator.links).collect();
    emulate(&c.emulator, FrameFormat::WibEth, &links)
        .unwrap()
        .into_values()
        .map(|link| {
            let Feed::Replay { template, .. } = link.feed else {
                panic!("the emulator replays a template")
            };
            let mut source = ReplaySource::new(template, None, None);
            let mut slot = vec![0u8; FrameFormat::WibEth.frame_size()];
            let mut by_time = HashMap::new();
            for _ in 0..frames_per_link {
                let Poll::Frame(len) = source.next_frame(&mut slot).unwrap() else {
                    panic!("the replay never ends")
                };
                let ts = FrameFormat::WibEth.header(&slot[..len]).unwrap().timestamp;
                by_time.insert(ts, slot[..len].to_vec());
            }
            by_time
        })
        .collect()
}

/// Checks that every record is complete, and each raw fragment holds exactly the frames of
/// `expected` (per link, by timestamp) that overlap its window, in time order; returns how
/// many TPs the records carry.
fn check_records(
    records: &[TriggerRecord],
    format: FrameFormat,
    expected: &[HashMap<u64, Vec<u8>>],
    links: usize,
) -> usize {
    let mut tps_in_records = 0;
    for record in records {
        assert_eq!(record.header.status_bits, 0);
        assert_eq!(
            record.fragments.len(),
            2 * links,
            "raw data and TPs of every link"
        );
        for (request, bytes) in record.header.components.iter().zip(&record.fragments) {
            let fragment = Fragment::parse(bytes).unwrap();
            assert_eq!(fragment.header.element_id, request.component);
            assert_eq!(fragment.header.error_bits, 0);
            let link = request.component.id as usize;
            let (begin, end) = (request.window_begin, request.window_end);
            if fragment.header.fragment_type == FragmentType::TRIGGER_PRIMITIVE {
                let tps = TriggerPrimitive::decode_all(fragment.payload).unwrap();
                assert!(tps.iter().all(|tp| (begin..end).contains(&tp.time_start)));
                assert!(tps.is_sorted_by_key(|tp| tp.time_start));
                tps_in_records += tps.len();
                continue;
            }
            assert_eq!(fragment.header.fragment_type, format.fragment_type());
            // Exactly the frames that overlap [begin, end), in time order.
            let mut times: Vec<u64> = expected[link]
                .keys()
                .copied()
                .filter(|&ts| ts + format.ticks_per_frame() > begin && ts < end)
                .collect();
            times.sort_unstable();
            assert!(!times.is_empty());
            let want: Vec<&[u8]> = times
                .iter()
                .map(|ts| expected[link][ts].as_slice())
                .collect();
            let got: Vec<&[u8]> = fragment.payload.chunks(format.frame_size()).collect();
            assert_eq!(
                got.len(),
                want.len(),
                "record {}",
                record.header.trigger_number
            );
            assert!(
                got == want,
                "record {} link {link}: frames differ",
                record.header.trigger_number
            );
        }
    }
    tps_in_records
}

#[test]
fn every_decision_gives_one_record_holding_exactly_its_windows_frames() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), 2.0);
    let report = run(&c);
    assert_eq!(report.stop_reason, StopReason::Duration);
    assert!(report.links.iter().all(|l| l.dropped == 0 && l.frames > 0));
    let records = read_records(dir.path());
    let issued = report.trigger.counts.issued;
    assert!(issued >= 30, "20 Hz periodic for 2 s and more: {issued}");
    let numbers: Vec<u64> = records.iter().map(|r| r.header.trigger_number).collect();
    assert_eq!(
        numbers,
        (1..=issued).collect::<Vec<_>>(),
        "one record per decision"
    );
    assert_eq!(report.builder.counts.complete, issued);
    assert_eq!(report.server.roi, Default::default(), "ROI readout is off");
    assert!(report.roi_coverage.is_none());

    let most_frames = report.links.iter().map(|l| l.frames).max().unwrap() as usize;
    let expected = emulator_frames(&c, most_frames);
    let tps_in_records = check_records(&records, FrameFormat::WibEth, &expected, 2);
    assert!(tps_in_records > 0, "the records carry the links' TPs");

    // Hit finding is scored over every pass of the 0.05 s template, not only the first.
    let first_pass: u64 = emulate(&c.emulator, FrameFormat::WibEth, &[0, 1])
        .unwrap()
        .values()
        .map(|l| {
            let strong = |p: &&swdaq_sim::TruePulse| {
                let c = p.channel as usize;
                l.collection[c] && p.peak_adc / l.sigma[c] >= 5.0
            };
            l.truth.as_ref().unwrap().iter().filter(strong).count() as u64
        })
        .sum();
    assert!(first_pass > 0);
    let score = report.hit_finding.expect("the emulator's truth");
    assert!(
        score.pulses_5_sigma >= 20 * first_pass,
        "2 s of 0.05 s passes: {} pulses scored, {first_pass} per pass",
        score.pulses_5_sigma
    );
    assert!(score.efficiency_5_sigma() > 0.9, "{score:?}");
}

/// ROI readout on: every raw fragment is an ROI fragment whose samples are exactly the
/// emulator's at those channels and times, whose full-window size is exactly what the
/// window's frames weigh, and the summary adds up the same bytes.
#[test]
fn roi_readout_stores_the_emulators_samples_in_regions_and_reports_the_reduction() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 2.0);
    c.readout.roi.enabled = true;
    let report = run(&c);
    assert_eq!(report.stop_reason, StopReason::Duration);
    let records = read_records(dir.path());
    let issued = report.trigger.counts.issued;
    assert_eq!(records.len() as u64, issued);
    assert_eq!(report.builder.counts.complete, issued);

    let most_frames = report.links.iter().map(|l| l.frames).max().unwrap() as usize;
    let expected = emulator_frames(&c, most_frames);
    let inputs = emulate(&c.emulator, FrameFormat::WibEth, &[0, 1]).unwrap();
    let step = FrameFormat::WibEth.ticks_per_frame();
    let tick = FrameFormat::WibEth.ticks_per_sample();
    let (mut bytes, mut full, mut regions, mut samples_checked) = (0u64, 0u64, 0, 0u64);
    for record in &records {
        for (request, fragment_bytes) in record.header.components.iter().zip(&record.fragments) {
            let fragment = Fragment::parse(fragment_bytes).unwrap();
            if fragment.header.fragment_type == FragmentType::TRIGGER_PRIMITIVE {
                continue;
            }
            assert_eq!(fragment.header.fragment_type, FragmentType::ROI);
            assert_eq!(fragment.header.error_bits, 0);
            let link = request.component.id as usize;
            let frames = &expected[link];
            let (begin, end) = (request.window_begin, request.window_end);
            let in_window = frames
                .keys()
                .filter(|&&ts| ts + step > begin && ts < end)
                .count();
            let roi = RoiPayload::parse(fragment.payload).unwrap();
            assert_eq!(
                roi.full_window_bytes,
                (72 + in_window * FrameFormat::WibEth.frame_size()) as u64,
                "the full window is counted exactly"
            );
            bytes += fragment_bytes.len() as u64;
            full += roi.full_window_bytes;
            let ids = &inputs[&link].channel_ids;
            for region in roi.regions() {
                regions += 1;
                assert!(region.first_timestamp + tick > begin);
                assert!(region.end_timestamp(tick) <= end + tick);
                for (row, id) in region.channel_ids().enumerate() {
                    let channel = ids.iter().position(|&c| c == id).unwrap();
                    assert_eq!(id / 16, region.channel_group);
                    for s in 0..region.samples {
                        let t = region.first_timestamp + s as u64 * tick;
                        let frame_ts = frames
                            .keys()
                            .copied()
                            .find(|&ts| ts <= t && t < ts + step)
                            .unwrap();
                        let frame = WibEthFrame::parse(&frames[&frame_ts]).unwrap();
                        let sample = ((t - frame_ts) / tick) as usize;
                        assert_eq!(
                            region.adc(row, s),
                            frame.adc(sample, channel),
                            "link {link} channel {id} at {t}"
                        );
                        samples_checked += 1;
                    }
                }
            }
        }
    }
    assert!(regions > 0 && samples_checked > 0);
    let roi = report.server.roi;
    assert_eq!(
        (roi.bytes, roi.full_window_bytes),
        (bytes, full),
        "the summary counts the stored bytes"
    );
    assert_eq!(roi.fragments, 2 * issued);
    assert_eq!(roi.tps_cut, 0);
    assert!(
        bytes * 4 < full,
        "regions are a fraction of the windows: {bytes} of {full}"
    );
    // A pulse hit finding finds has a TP over its peak; its region reaches 50 samples beyond
    // the TP's blocks, more than the pulse's rise and fall scored here, so the coverage
    // is at least the hit-finding efficiency (> 0.9 in the test above) less pulses cut by
    // the window's edge.
    let coverage = report.roi_coverage.expect("the emulator's truth");
    assert!(coverage.pulses_5_sigma >= 20, "{coverage:?}");
    assert!(coverage.fraction() > 0.9, "{coverage:?}");
}

#[test]
fn a_stopped_link_makes_its_records_incomplete_naming_it_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 2.5);
    c.emulator.stop_links.push(StopLink {
        link: 1,
        after_s: 0.5,
    });
    c.readout.request_timeout_ms = 100;
    c.dataflow.record_timeout_ms = 500;
    let report = run(&c);
    assert_eq!(report.stop_reason, StopReason::Duration);
    assert!(report.links[1].ended_early && !report.links[0].ended_early);
    let stopped = SourceId::readout(1);
    let counts = &report.builder.counts;
    let flagged = counts.lacking_by_source.get(&stopped).copied().unwrap_or(0)
        + counts.missing_by_source.get(&stopped).copied().unwrap_or(0);
    assert!(
        flagged >= 20,
        "records after the stop name link 1: {flagged}"
    );
    assert!(!counts.lacking_by_source.contains_key(&SourceId::readout(0)));
    let records = read_records(dir.path());
    assert_eq!(records.len() as u64, report.trigger.counts.issued);
    let incomplete: Vec<&TriggerRecord> = records
        .iter()
        .filter(|r| r.header.status_bits & record_status::INCOMPLETE != 0)
        .collect();
    assert_eq!(incomplete.len() as u64, flagged);
    for r in incomplete {
        let link1 = Fragment::parse(&r.fragments[1]).unwrap();
        assert_eq!(link1.header.element_id, stopped);
        let absent = fragment_error::DATA_NOT_FOUND | fragment_error::INCOMPLETE;
        assert_ne!(link1.header.error_bits & absent, 0);
        let link0 = Fragment::parse(&r.fragments[0]).unwrap();
        assert_eq!(link0.header.error_bits, 0, "the running link is untouched");
    }
}

/// A run whose storage has room for about 10 MB of records (a record here is ~1.3 MB), on
/// RAM-backed storage where other processes do not eat the space.
fn run_until_the_disk_fills(seconds: f64, on_failure: StorageFailurePolicy) -> RunReport {
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let mut c = config(base.path(), seconds);
    c.storage.max_records_per_file = 3;
    c.storage.on_failure = on_failure;
    let free_mb = fs4::available_space(base.path()).unwrap() >> 20;
    c.storage.min_free_mb = free_mb.saturating_sub(10);
    let report = run(&c);
    let storage = report.storage.as_ref().unwrap();
    let error = storage.error.as_deref().unwrap_or_default();
    assert!(error.contains("space"), "{error}");
    assert!(storage.records_not_written > 0);
    let records = read_records(base.path());
    assert_eq!(records.len() as u64, storage.records_written);
    assert_eq!(
        storage.records_written + storage.records_not_written + report.builder.not_stored,
        report.trigger.counts.issued,
        "every decision is accounted for"
    );
    report
}

#[test]
fn storage_that_fills_up_sheds_records_by_policy_and_the_run_goes_on() {
    let report = run_until_the_disk_fills(3.0, StorageFailurePolicy::Shed);
    assert_eq!(report.stop_reason, StopReason::Duration);
    assert!(report.links.iter().all(|l| l.dropped == 0));
}

#[test]
fn storage_that_fills_up_stops_the_run_cleanly_and_what_was_written_stays_readable() {
    let report = run_until_the_disk_fills(30.0, StorageFailurePolicy::Stop);
    assert!(
        matches!(report.stop_reason, StopReason::StorageFailed(_)),
        "{:?}",
        report.stop_reason
    );
    assert!(report.seconds < 20.0, "the run stopped at the failure");
}

/// Writes `seconds` of every link's emulated data to raw files in `dir`, as `swdaq gen`
/// does, and its truth to `dir/truth_pulses.csv`; returns each link's frames by timestamp.
fn write_raw_files(
    c: &RunConfig,
    format: FrameFormat,
    dir: &Path,
    seconds: f64,
) -> Vec<HashMap<u64, Vec<u8>>> {
    let detector = swdaq_sim::Detector::new(c.emulator.sim.clone()).unwrap();
    let frames = (seconds * format.frame_rate_hz()).ceil() as u64;
    let mut pulses = Vec::new();
    let mut expected = Vec::new();
    for link in 0..c.emulator.links {
        let header = RawFileHeader {
            frame_type: format.fragment_type(),
            frame_size: format.frame_size() as u32,
            source_id: SourceId::readout(link),
            run_number: 1,
            first_timestamp: 0,
            created_unix_ns: 0,
        };
        let file = std::fs::File::create(link_path(dir, link)).unwrap();
        let mut writer = RawFileWriter::new(std::io::BufWriter::new(file), &header).unwrap();
        let mut sim = detector.link(link, format, 0);
        let mut frame = vec![0u8; format.frame_size()];
        let mut by_time = HashMap::new();
        for _ in 0..frames {
            let info = sim.next_frame(&mut frame);
            writer.write_frame(&frame[..info.len]).unwrap();
            by_time.insert(info.timestamp, frame[..info.len].to_vec());
        }
        writer.finish().unwrap();
        pulses.extend(sim.drain_truth());
        expected.push(by_time);
    }
    swdaq_sim::truth::write_csv(&dir.join("truth_pulses.csv"), &pulses).unwrap();
    expected
}

/// A run reading `dir`'s raw files once, in real time, scored against their truth.
fn file_config(dir: &Path, format: FrameFormat) -> RunConfig {
    let mut c = config(&dir.join("records"), 30.0);
    c.source.kind = SourceKind::File;
    c.source.format = match format {
        FrameFormat::WibEth => SourceFormat::Wibeth,
        FrameFormat::ProtoWib => SourceFormat::Protowib,
        FrameFormat::Board(_) => panic!("the emulator writes TPC files only"),
    };
    c.source.directory = dir.to_path_buf();
    c.source.truth = dir.join("truth_pulses.csv");
    c
}

/// `seconds` of data: a ProtoDUNE WIB link is 2 M frames/s, so its files are kept short.
fn replaying_raw_files_gives_records_of_exactly_their_frames(format: FrameFormat, seconds: f64) {
    let dir = tempfile::tempdir().unwrap();
    let c = file_config(dir.path(), format);
    let expected = write_raw_files(&c, format, dir.path(), seconds);
    let report = run(&c);
    assert_eq!(report.stop_reason, StopReason::AllLinksEnded);
    for (link, l) in report.links.iter().enumerate() {
        assert_eq!(
            l.frames,
            expected[link].len() as u64,
            "every frame read once"
        );
        assert_eq!(l.dropped, 0);
        assert_eq!(l.error, None);
        assert_eq!(
            l.source,
            SourceLabel::File(link_path(dir.path(), link as u32))
        );
    }
    let records = read_records(&dir.path().join("records"));
    assert!(records.len() >= 5, "{} records", records.len());
    assert_eq!(records.len() as u64, report.trigger.counts.issued);
    check_records(&records, format, &expected, 2);
    let score = report
        .hit_finding
        .expect("the files' truth scores hit finding");
    assert!(score.pulses_5_sigma > 0);
    assert!(
        score.efficiency_5_sigma() > 0.5,
        "hit finding works on the replayed data: {score:?}"
    );
}

#[test]
fn replaying_wibeth_raw_files_gives_records_of_exactly_their_frames() {
    replaying_raw_files_gives_records_of_exactly_their_frames(FrameFormat::WibEth, 1.0);
}

#[test]
fn replaying_protodune_wib_raw_files_gives_records_of_exactly_their_frames() {
    replaying_raw_files_gives_records_of_exactly_their_frames(FrameFormat::ProtoWib, 0.3);
}

#[test]
fn bad_raw_files_are_refused_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let c = file_config(dir.path(), FrameFormat::WibEth);
    let error = |c: &RunConfig| {
        let e = run_chain(c, &StopRequest::default(), &()).expect_err("refused");
        format!("{e:#}")
    };
    let e = error(&c);
    assert!(
        e.contains("source.directory") && e.contains("link0.swraw"),
        "{e}"
    );
    write_raw_files(&c, FrameFormat::WibEth, dir.path(), 0.01);
    // The other format than the files hold.
    let mut protowib = c.clone();
    protowib.source.format = SourceFormat::Protowib;
    let e = error(&protowib);
    assert!(e.contains("source.format"), "{e}");
    // A file cut mid-frame.
    let path = link_path(dir.path(), 1);
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 100).unwrap();
    let e = error(&c);
    assert!(e.contains("link1.swraw"), "{e}");
    // Not a raw file at all.
    std::fs::write(&path, b"garbage").unwrap();
    let e = error(&c);
    assert!(
        e.contains("link1.swraw") && e.contains("not a swdaq raw file"),
        "{e}"
    );
    // A truth file that is not one.
    write_raw_files(&c, FrameFormat::WibEth, dir.path(), 0.01);
    std::fs::write(dir.path().join("truth_pulses.csv"), b"x,y\n1").unwrap();
    let e = error(&c);
    assert!(e.contains("source.truth"), "{e}");
}
