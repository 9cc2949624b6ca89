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

/// Issue #22: one file attribute of the wrong type, or missing, hid every record and the
/// message did not name it.
#[test]
fn a_bad_or_missing_attribute_is_named_and_the_records_still_read() {
    let path = written_file("attributes", 3);
    {
        let file = hdf5::File::open_rw(&path).unwrap();
        file.delete_attr("run_number").unwrap();
        let text: hdf5::types::VarLenUnicode = "twelve".parse().unwrap();
        file.new_attr::<hdf5::types::VarLenUnicode>()
            .create("run_number")
            .and_then(|a| a.write_scalar(&text))
            .unwrap();
        file.delete_attr("application_name").unwrap();
    }
    let report = inspect(&path, None).unwrap();
    assert_eq!(report.records.len(), 3);
    assert_eq!(report.problems.len(), 0);
    let named: Vec<(&str, &str, &str)> = report
        .attributes
        .problems
        .iter()
        .map(|p| (p.name, p.expected, p.found.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            (
                "run_number",
                "unsigned 32-bit integer",
                r#"string "twelve""#
            ),
            ("application_name", "string", "missing"),
        ]
    );
    assert_eq!(report.bad_items(), 2);
    assert_eq!(report.attributes.run_number, None);
    assert_eq!(report.attributes.file_index, Some(0));
    let text = render(&report);
    assert!(
        text.contains("BAD attribute run_number: expected unsigned 32-bit integer"),
        "{text}"
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Issue #22: `swdaq display` refused a whole record because one fragment's content was
/// garbage (its frames' timestamps stretched the picture past drawing).
#[test]
fn the_display_draws_the_good_fragments_and_names_the_garbage_one() {
    let path = written_file("display-garbage", 2);
    let reader = RecordFileReader::open(&path).unwrap();
    let ids = reader.record_ids().unwrap();
    let good = display_file(
        &path,
        ids[1].trigger_number,
        &path.with_extension("good.png"),
        &DisplayOptions::default(),
    )
    .unwrap()
    .0;
    drop(reader);
    // The fragment's header kept, its payload garbage: it parses, its frames' timestamps
    // are nonsense.
    let name = swdaq_store::sample::garble_wibeth_payload(&path, &ids[1].group).unwrap();
    let png = path.with_extension("png");
    let (summary, left_out) = display_file(
        &path,
        ids[1].trigger_number,
        &png,
        &DisplayOptions::default(),
    )
    .unwrap();
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert_eq!(left_out[0].dataset, name);
    assert!(
        left_out[0].reason.contains("from the trigger"),
        "{left_out:?}"
    );
    let channels = |s: &swdaq_store::display::DisplaySummary| -> usize {
        s.panels.iter().map(|p| p.channels).sum()
    };
    assert_eq!(channels(&summary), channels(&good) - 64);
    assert!(png.exists());
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
