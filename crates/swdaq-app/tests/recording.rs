//! Raw bursts in `swdaq run`: a trigger type records every link's latency buffer and the data
//! time after it; the files hold exactly the emulator's frames, and `swdaq run` replays them
//! as a `file` source.

use std::collections::HashMap;
use std::path::Path;
use swdaq_app::models::chain::config::RecordingSection;
use swdaq_app::models::chain::config::{RunConfig, SourceKind};
use swdaq_app::models::chain::inputs::Feed;
use swdaq_app::models::chain::inputs::emulate;
use swdaq_app::models::chain::system::{RunReport, run_chain};
use swdaq_app::runtime::outcome::StopReason;
use swdaq_app::runtime::steering::BurstReason;
use swdaq_app::runtime::stop::StopRequest;
use swdaq_format::rawfile::RawFileReader;
use swdaq_format::{FrameFormat, SourceId};
use swdaq_readout::replay::ReplaySource;
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_trigger::config::PeriodicConfig;

const FORMAT: FrameFormat = FrameFormat::WibEth;

fn config(dir: &Path) -> RunConfig {
    let mut c = RunConfig::default();
    c.run.duration_s = 2.0;
    c.run.output_dir = dir.join("records");
    c.run.metrics_addr = String::new();
    c.emulator.links = 2;
    c.emulator.template_s = 0.05;
    c.readout.buffer_s = 0.5;
    c.storage.enabled = false;
    // A periodic decision every 0.2 s; each asks for a burst of 0.4 s after it, so the one
    // after it finds a burst in progress and is refused.
    c.trigger.periodic = PeriodicConfig {
        enabled: true,
        rate_hz: 5.0,
        prescale: 1,
    };
    c.recording = RecordingSection {
        enabled: true,
        directory: dir.join("bursts"),
        seconds_after: 0.4,
        max_concurrent: 1,
        on_trigger_types: vec!["periodic".into()],
    };
    c
}

fn run(c: &RunConfig) -> RunReport {
    run_chain(c, &StopRequest::default(), &()).expect("the run starts and ends cleanly")
}

/// The frames the emulator gives each link, by timestamp.
fn emulator_frames(c: &RunConfig, frames_per_link: u64) -> Vec<HashMap<u64, Vec<u8>>> {
    let links: Vec<u32> = (0..c.emulator.links).collect();
    emulate(&c.emulator, FORMAT, &links)
        .unwrap()
        .into_values()
        .map(|link| {
            let Feed::Replay { template, .. } = link.feed else {
                panic!("the emulator replays a template")
            };
            let mut source = ReplaySource::new(template, None, None);
            let mut slot = vec![0u8; FORMAT.frame_size()];
            (0..frames_per_link)
                .map(|_| {
                    let Poll::Frame(len) = source.next_frame(&mut slot).unwrap() else {
                        panic!("the replay never ends")
                    };
                    let ts = FORMAT.header(&slot[..len]).unwrap().timestamp;
                    (ts, slot[..len].to_vec())
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_burst_on_a_trigger_type_holds_the_emulators_frames_and_replays_as_a_file_source() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    let report = run(&c);
    assert!(
        report.links.iter().all(|l| l.dropped == 0),
        "{:?}",
        report.links
    );
    let recording = report.recording.expect("recording is on");
    assert!(
        recording.bursts.len() >= 2,
        "5 Hz for 2 s, bursts of 0.4 s: {recording:?}"
    );
    assert!(recording.refused >= 1, "{recording:?}");
    let most = report.links.iter().map(|l| l.frames).max().unwrap();
    let expected = emulator_frames(&c, most);
    let first = &recording.bursts[0];
    assert!(matches!(first.reason, BurstReason::Trigger { .. }));
    for burst in &recording.bursts {
        for l in &burst.links {
            let b = l.burst.as_ref().expect("every link recorded");
            let mut reader = RawFileReader::new(std::fs::File::open(&b.path).unwrap()).unwrap();
            let header = *reader.header();
            assert_eq!(header.source_id, SourceId::readout(l.link));
            let (mut frame, mut times) = (Vec::new(), Vec::new());
            while reader.next_frame(&mut frame).unwrap() {
                let ts = FORMAT.header(&frame).unwrap().timestamp;
                assert!(
                    expected[l.link as usize][&ts] == frame,
                    "burst {} link {}: the frame at {ts} differs from the emulator's",
                    burst.burst,
                    l.link
                );
                times.push(ts);
            }
            assert_eq!(times.len() as u64, b.counts.frames_written);
            assert_eq!(header.first_timestamp, times[0]);
            // Consecutive frames, but where the recorder lost some (a loaded machine can
            // starve it): the holes in the file and what it lost before its first frame (the
            // first gap, always named) are all it counted lost.
            let holes: u64 = times
                .windows(2)
                .map(|w| (w[1] - w[0]) / FORMAT.ticks_per_frame() - 1)
                .sum();
            let counts = &b.counts;
            let before_first: u64 = counts
                .gaps
                .iter()
                .filter(|g| g.after_timestamp.is_none())
                .map(|g| g.frames)
                .sum();
            assert_eq!(holes + before_first, counts.frames_lost, "{counts:?}");
            if !b.cut_short {
                let span = (times[times.len() - 1] - times[0]) as f64 / FORMAT.clock_hz();
                assert!(span >= c.recording.seconds_after, "{span} s recorded");
            }
        }
    }

    // The first burst, replayed at the real rate (as fast as it reads, the 0.5 s buffers
    // would pass before the requests come): every frame once, nothing out of order.
    let mut replay = config(dir.path());
    replay.run.duration_s = 30.0;
    replay.recording.enabled = false;
    replay.source.kind = SourceKind::File;
    replay.source.real_time = true;
    replay.source.directory = first.directory.clone();
    let again = run(&replay);
    assert_eq!(again.stop_reason, StopReason::AllLinksEnded);
    for (l, recorded) in again.links.iter().zip(&first.links) {
        let counts = &recorded.burst.as_ref().unwrap().counts;
        assert_eq!(
            l.frames, counts.frames_written,
            "link {}: every recorded frame replayed",
            l.source_id
        );
        assert_eq!(l.dropped, 0);
        // A gap in the file shows as missing frames in the replay, never as anything else.
        let before_first: u64 = counts
            .gaps
            .iter()
            .filter(|g| g.after_timestamp.is_none())
            .map(|g| g.frames)
            .sum();
        let in_file = counts.frames_lost - before_first;
        assert_eq!(l.checks.missing_frames, in_file);
        assert_eq!(l.checks.timestamp_jumps, 0);
        assert_eq!(l.error, None);
    }
    assert!(again.trigger.counts.issued > 0);
    let lost: u64 = first
        .links
        .iter()
        .map(|l| l.burst.as_ref().unwrap().counts.frames_lost)
        .sum();
    // Records over a gap are rightly incomplete; without one, every record is complete.
    assert!(
        lost > 0 || again.builder.counts.complete == again.trigger.counts.issued,
        "every record of the replay complete"
    );
}
