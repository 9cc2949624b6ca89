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
        .map(|p| (p.name.as_ref(), p.expected, p.found.as_str()))
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

/// A file as hdf5libs v2.8.0 (`HDF5RawDataFile.cpp` of `DUNE-DAQ/hdf5libs` tag v2.8.0,
/// 1de7a465784e45ec19a82eb392035937d157a13c) writes it, not as swdaq's writer does: layout
/// version 5, timestamps as decimal strings of milliseconds, 6-digit record numbers, one record
/// holding its header and the first fragment of `record`.
fn hdf5libs_v2_file(path: &std::path::Path, record: &swdaq_format::TriggerRecord) {
    use hdf5::types::VarLenUnicode;
    let file = hdf5::File::create(path).unwrap();
    let text = |loc: &hdf5::Location, name: &str, value: &str| {
        let value: VarLenUnicode = value.parse().unwrap();
        loc.new_attr::<VarLenUnicode>()
            .create(name)
            .and_then(|a| a.write_scalar(&value))
            .unwrap();
    };
    let bytes = |group: &hdf5::Group, name: &str, data: &[u8]| {
        group
            .new_dataset::<i8>()
            .shape((data.len(), 1))
            .create(name)
            .and_then(|d| d.write_raw(bytemuck::cast_slice::<u8, i8>(data)))
            .unwrap();
    };
    file.new_attr::<u32>()
        .create("run_number")
        .and_then(|a| a.write_scalar(&7u32))
        .unwrap();
    file.new_attr::<u64>()
        .create("file_index")
        .and_then(|a| a.write_scalar(&0u64))
        .unwrap();
    text(&file, "creation_timestamp", "1711630000000");
    text(&file, "application_name", "dataflow0");
    text(
        &file,
        "filelayout_params",
        r#"{"digits_for_record_number":6,"digits_for_sequence_number":4,"path_param_list":[],"raw_data_group_name":"RawData","record_header_dataset_name":"TriggerRecordHeader","record_name_prefix":"TriggerRecord","view_group_name":"Views"}"#,
    );
    file.new_attr::<u32>()
        .create("filelayout_version")
        .and_then(|a| a.write_scalar(&5u32))
        .unwrap();
    text(
        &file,
        "source_id_geo_id_map",
        r#"{"map_entries":[{"geoids":[3],"id":0,"subsys":1}]}"#,
    );
    text(&file, "record_type", "TriggerRecord");
    let group = file.create_group("TriggerRecord000001.0000").unwrap();
    let raw = group.create_group("RawData").unwrap();
    bytes(
        &raw,
        "TR_Builder_0x00000000_TriggerRecordHeader",
        &record.header.to_bytes(),
    );
    bytes(
        &raw,
        "Detector_Readout_0x00000000_WIBEth",
        &record.fragments[0],
    );
    text(&group, "record_header_source_id", r#"{"id":0,"subsys":4}"#);
    text(
        &group,
        "source_id_path_map",
        r#"{"map_entries":[{"id":0,"path":"/TriggerRecord000001.0000/RawData/TR_Builder_0x00000000_TriggerRecordHeader","subsys":4},{"id":0,"path":"/TriggerRecord000001.0000/RawData/Detector_Readout_0x00000000_WIBEth","subsys":1}]}"#,
    );
    text(
        &group,
        "fragment_type_source_id_map",
        r#"{"map_entries":[{"fragment_type":12,"sourceids":[{"id":0,"subsys":1}]}]}"#,
    );
    text(
        &group,
        "subdetector_source_id_map",
        r#"{"map_entries":[{"sourceids":[{"id":0,"subsys":1}],"subdetector":3}]}"#,
    );
    file.new_attr::<u64>()
        .create("recorded_size")
        .and_then(|a| a.write_scalar(&123u64))
        .unwrap();
    text(&file, "closing_timestamp", "1711630001500");
}

/// Issue #23: hdf5libs v2.x wrote its timestamps as strings; such a file was refused.
#[test]
fn an_hdf5libs_v2_file_with_string_timestamps_reads() {
    let dir = std::env::temp_dir().join(format!("swdaq-store-v2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("np04hd_raw_run000007_0000_dataflow0_datawriter_0_20240328T123640.hdf5");
    let sample = track_record(1).record;
    hdf5libs_v2_file(&path, &sample);

    let report = inspect(&path, None).unwrap();
    let a = &report.attributes;
    assert_eq!(a.problems, []);
    assert_eq!(
        (a.creation_timestamp, a.closing_timestamp, a.run_number),
        (Some(1_711_630_000_000), Some(1_711_630_001_500), Some(7))
    );
    assert_eq!(a.filelayout_version, Some(5));
    assert_eq!(report.problems.len(), 0);
    let reader = RecordFileReader::open(&path).unwrap();
    let ids = reader.record_ids().unwrap();
    assert_eq!(ids.len(), 1);
    let record = reader.read_record(&ids[0]).unwrap();
    assert_eq!(record.header, sample.header);
    assert_eq!(record.fragments, sample.fragments[..1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue #23: an attribute hdf5libs opens a file without is no problem when absent; a
/// required one absent is one line naming it.
#[test]
fn optional_attributes_may_be_absent_and_a_missing_required_one_is_one_line() {
    let path = written_file("optional", 2);
    {
        let file = hdf5::File::open_rw(&path).unwrap();
        for name in [
            "recorded_size",
            "record_type",
            "filelayout_version",
            "filelayout_params",
            "source_id_geo_id_map",
        ] {
            file.delete_attr(name).unwrap();
        }
        let group = file.group("TriggerRecord00001.0000").unwrap();
        for name in [
            "record_header_source_id",
            "source_id_path_map",
            "fragment_type_source_id_map",
            "subdetector_source_id_map",
        ] {
            group.delete_attr(name).unwrap();
        }
    }
    let report = inspect(&path, None).unwrap();
    assert_eq!(report.attributes.problems, []);
    assert_eq!((report.records.len(), report.bad_items()), (2, 0));
    assert_eq!(report.attributes.record_type, None);

    hdf5::File::open_rw(&path)
        .unwrap()
        .delete_attr("run_number")
        .unwrap();
    let report = inspect(&path, None).unwrap();
    assert_eq!((report.records.len(), report.bad_items()), (2, 1));
    let text = render(&report);
    let bad: Vec<&str> = text.lines().filter(|l| l.starts_with("BAD")).collect();
    assert_eq!(
        bad,
        ["BAD attribute run_number: expected unsigned 32-bit integer, found missing"]
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
