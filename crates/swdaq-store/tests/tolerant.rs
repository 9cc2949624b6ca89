//! A file with one garbage fragment still lists every good record and fragment, and names
//! the bad one with why.

use std::path::PathBuf;
use swdaq_store::display::{DisplayOptions, display_file};
use swdaq_store::inspect::{inspect, render};
use swdaq_store::layout::{RAW_DATA_GROUP, RECORD_HEADER_DATASET};
use swdaq_store::sample::track_record;
use swdaq_store::{RecordFileReader, RecordFileWriter, StoreConfig};

fn written_file(name: &str, records: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swdaq-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: dir,
        min_free_bytes: 0,
        ..Default::default()
    })
    .unwrap();
    for trigger in 1..=records {
        writer.write(&track_record(trigger).record).unwrap();
    }
    writer.close().unwrap();
    writer.closed_files()[0].clone()
}

/// Overwrites the first fragment dataset of `group` with bytes that are not a fragment;
/// returns the dataset's name.
fn garble_first_fragment(path: &PathBuf, group: &str) -> String {
    let file = hdf5::File::open_rw(path).unwrap();
    let raw = file.group(&format!("{group}/{RAW_DATA_GROUP}")).unwrap();
    let name = raw
        .member_names()
        .unwrap()
        .into_iter()
        .find(|n| !n.ends_with(RECORD_HEADER_DATASET))
        .unwrap();
    let dataset = raw.dataset(&name).unwrap();
    let garbage = vec![0x5a_i8; dataset.size()];
    dataset.write_raw(&garbage).unwrap();
    name
}

#[test]
fn one_garbage_fragment_is_named_and_the_rest_is_listed() {
    let path = written_file("tolerant", 3);
    let reader = RecordFileReader::open(&path).unwrap();
    let ids = reader.record_ids().unwrap();
    let fragments_per_record = reader.read_headers(&ids[1]).unwrap().fragments.len();
    drop(reader);
    let bad = garble_first_fragment(&path, &ids[1].group);

    let report = inspect(&path, None).unwrap();
    assert_eq!(report.records.len(), 3);
    assert_eq!(report.records[1].fragments.len(), fragments_per_record - 1);
    assert_eq!(report.records[2].fragments.len(), fragments_per_record);
    assert_eq!(report.problems.len(), 1);
    let problem = &report.problems[0];
    assert_eq!(problem.record, ids[1].group);
    assert_eq!(problem.fragment.as_deref(), Some(bad.as_str()));
    assert!(problem.reason.contains("bad magic"), "{}", problem.reason);
    let text = render(&report);
    assert!(
        text.contains(&format!("BAD {} fragment {bad}", ids[1].group)),
        "{text}"
    );

    // Decoding the damaged record reports the fragment once and shows the good ones.
    let one = inspect(&path, Some(ids[1].trigger_number)).unwrap();
    assert_eq!(one.problems.len(), 1);
    assert_eq!(one.records[0].fragments.len(), fragments_per_record - 1);

    // The display draws the record without it and says which fragment it left out.
    let png = path.with_extension("png");
    let (_, left_out) = display_file(
        &path,
        ids[1].trigger_number,
        &png,
        &DisplayOptions::default(),
    )
    .unwrap();
    assert_eq!(left_out.len(), 1);
    assert_eq!(left_out[0].dataset, bad);
    assert!(png.exists());
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
