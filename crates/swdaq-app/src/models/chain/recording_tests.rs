//! Tests of `recording`.

use super::*;
use swdaq_format::{FrameFormat, SourceId};

fn decision(number: u64, trigger_type: u64) -> TriggerDecision {
    TriggerDecision {
        trigger_number: number,
        timestamp: 0,
        trigger_type,
        candidates: 1,
        windows: Vec::new(),
    }
}

#[test]
fn bad_recording_keys_are_named() {
    let mut c = RunConfig::default();
    c.recording.on_trigger_types = vec!["supernova".into()];
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("recording.on_trigger_types") && e.contains("supernova"),
        "{e}"
    );
    let mut c = RunConfig::default();
    c.recording.max_concurrent = 0;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("recording.max_concurrent"), "{e}");
    let mut c = RunConfig::default();
    c.recording.seconds_after = f64::NAN;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("recording.seconds_after"), "{e}");
    assert!(RecordingSection::default().validate(true).is_ok());
    let topology_trigger = RecordingSection {
        on_trigger_types: vec!["track".into()],
        ..Default::default()
    };
    assert!(topology_trigger.validate(true).is_err());
    assert!(topology_trigger.validate(false).is_ok());
}

#[test]
fn a_configured_trigger_type_starts_a_burst_and_one_in_progress_refuses_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = RunConfig::default();
    c.run.number = 7;
    c.recording = RecordingSection {
        enabled: true,
        directory: dir.path().to_path_buf(),
        seconds_after: 1.0,
        max_concurrent: 1,
        on_trigger_types: vec!["periodic".into()],
    };
    let link = LinkShared::new(SourceId::readout(3), FrameFormat::WibEth, 0.01).unwrap();
    let recordings = Recordings::start(&c, vec![(3, Arc::new(link))], &Registry::new())
        .unwrap()
        .unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let tap = RecordOnTrigger::new(tx, Some(&recordings));
    use trigger_type::{PERIODIC, RANDOM, TRACK};
    for (number, bits) in [(1, RANDOM), (2, PERIODIC | TRACK), (3, PERIODIC)] {
        tap.send(decision(number, bits)).unwrap();
    }
    assert_eq!(
        rx.try_iter().count(),
        3,
        "every decision goes on to the builder"
    );
    assert!(matches!(
        recordings.record(1.0, BurstReason::Command),
        Err(RecordError::Busy(1))
    ));
    assert!(matches!(
        recordings.record(0.0, BurstReason::Command),
        Err(RecordError::BadSeconds(_))
    ));
    // No frame ever comes: the end of the run cuts the burst short.
    let report = recordings.finish();
    assert_eq!(report.refused, 2);
    let [burst] = &report.bursts[..] else {
        panic!("one burst: {report:?}")
    };
    assert_eq!(
        burst.reason,
        BurstReason::Trigger {
            number: 2,
            types: vec!["periodic".into()]
        }
    );
    assert_eq!(burst.directory, dir.path().join("run000007_burst001"));
    let link = &burst.links[0];
    let recorded = link.burst.as_ref().expect("the link's file");
    assert!(recorded.cut_short);
    assert_eq!(recorded.path, link_path(&burst.directory, 3));
    assert!(recorded.path.exists());
    assert!(
        report.summary().contains("1 bursts"),
        "{}",
        report.summary()
    );
}

#[test]
fn the_shipped_recording_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    for name in ["recording.toml", "recording-8-links.toml"] {
        let c = RunConfig::load(&dir.join(name)).unwrap();
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(c.recording.enabled, "{name}");
    }
}

#[test]
fn without_recording_no_burst_is_asked_for() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let tap = RecordOnTrigger::new(tx, None);
    tap.send(decision(1, u64::MAX)).unwrap();
    assert_eq!(rx.try_iter().count(), 1);
    assert!(
        Recordings::start(&RunConfig::default(), Vec::new(), &Registry::new())
            .unwrap()
            .is_none()
    );
}
