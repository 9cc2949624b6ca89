//! Records written then read back are byte-identical; files roll over, are renamed on
//! close, and a full or unusable output directory is one clear error.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use swdaq_format::{
    ComponentRequest, Fragment, FragmentHeader, FragmentType, SourceId, Subsystem, TriggerRecord,
    TriggerRecordHeader,
};
use swdaq_store::reader::fragment_key;
use swdaq_store::{RecordFileReader, RecordFileWriter, StoreConfig, StoreError};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swdaq-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        directory: dir.to_path_buf(),
        min_free_bytes: 0,
        ..Default::default()
    }
}

fn record(trigger: u64, payloads: &[(u32, Vec<u8>)]) -> TriggerRecord {
    let fragments = payloads
        .iter()
        .map(|(source, payload)| {
            let header = FragmentHeader {
                size: 0,
                trigger_number: trigger,
                trigger_timestamp: trigger * 1000,
                window_begin: trigger * 1000 - 10,
                window_end: trigger * 1000 + 10,
                run_number: 1,
                error_bits: 0,
                fragment_type: FragmentType::WIBETH,
                sequence_number: 0,
                detector_id: 3,
                element_id: SourceId::readout(*source),
            };
            Fragment::assemble(header, [&payload[..]])
        })
        .collect();
    let components = payloads
        .iter()
        .map(|(s, _)| ComponentRequest {
            component: SourceId::readout(*s),
            window_begin: trigger * 1000 - 10,
            window_end: trigger * 1000 + 10,
        })
        .collect();
    TriggerRecord {
        header: TriggerRecordHeader {
            trigger_number: trigger,
            trigger_timestamp: trigger * 1000,
            run_number: 1,
            status_bits: 0,
            trigger_type: 1,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
            components,
        },
        fragments,
    }
}

fn read_all(path: &Path) -> Vec<TriggerRecord> {
    let r = RecordFileReader::open(path).unwrap();
    r.records().unwrap().map(Result::unwrap).collect()
}

prop_compose! {
    /// A fragment from one of a few sources and types, with arbitrary header fields.
    fn arb_fragment()(subsystem in 1u16..4, id in 0u32..4, kind in prop::sample::select(vec![1u32, 6, 12, 99]),
                      words in any::<[u64; 4]>(), small in any::<(u32, u32, u16)>(),
                      payload in prop::collection::vec(any::<u8>(), 0..3000)) -> Vec<u8> {
        let header = FragmentHeader {
            size: 0,
            trigger_number: words[0],
            trigger_timestamp: words[1],
            window_begin: words[2],
            window_end: words[3],
            run_number: small.0,
            error_bits: small.1,
            fragment_type: FragmentType(kind),
            sequence_number: small.2,
            detector_id: 3,
            element_id: SourceId::new(Subsystem(subsystem), id),
        };
        Fragment::assemble(header, [&payload[..]])
    }
}

prop_compose! {
    fn arb_record()(sequence in 0u16..3, words in any::<[u64; 2]>(), small in any::<(u32, u32)>(),
                    components in prop::collection::vec((0u32..100, any::<u64>(), any::<u64>()), 0..5),
                    fragments in prop::collection::vec(arb_fragment(), 0..6)) -> TriggerRecord {
        // One fragment per source and type, as record building produces (they name datasets).
        let mut fragments: Vec<Vec<u8>> = fragments;
        fragments.sort_by_key(|f| fragment_key(&Fragment::parse(f).unwrap().header));
        fragments.dedup_by_key(|f| fragment_key(&Fragment::parse(f).unwrap().header));
        TriggerRecord {
            header: TriggerRecordHeader {
                trigger_number: 0,
                trigger_timestamp: words[0],
                run_number: small.0,
                status_bits: small.1,
                trigger_type: words[1],
                sequence_number: sequence,
                max_sequence_number: 2,
                element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
                components: components
                    .into_iter()
                    .map(|(id, window_begin, window_end)| ComponentRequest {
                        component: SourceId::readout(id),
                        window_begin,
                        window_end,
                    })
                    .collect(),
            },
            fragments,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn records_round_trip_byte_for_byte(mut records in prop::collection::vec(arb_record(), 1..6)) {
        let dir = temp_dir("prop");
        let mut w = RecordFileWriter::new(config(&dir)).unwrap();
        for (i, r) in records.iter_mut().enumerate() {
            // Trigger numbers past 99999 widen the name: order must still be numeric.
            r.header.trigger_number = [7, 99_999, 100_000, 3, 12, 1_000_001][i];
            w.write(r).unwrap();
        }
        w.close().unwrap();
        let files = w.closed_files().to_vec();
        prop_assert_eq!(files.len(), 1);
        records.sort_by_key(|r| (r.header.trigger_number, r.header.sequence_number));
        prop_assert_eq!(&read_all(&files[0]), &records);
        // Reading headers only gives the same headers as reading the records whole.
        let reader = RecordFileReader::open(&files[0]).unwrap();
        for (id, r) in reader.record_ids().unwrap().iter().zip(&records) {
            let headers = reader.read_headers(id).unwrap();
            prop_assert_eq!(&headers.header, &r.header);
            let whole: Vec<_> = r.fragments().map(|f| f.unwrap().header).collect();
            prop_assert_eq!(headers.fragments, whole);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn files_roll_over_and_are_renamed_when_closed() {
    let dir = temp_dir("rollover");
    let mut w = RecordFileWriter::new(StoreConfig {
        max_records_per_file: 3,
        ..config(&dir)
    })
    .unwrap();
    for t in 1..=7 {
        w.write(&record(t, &[(1, vec![t as u8; 100])])).unwrap();
        let writing: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".writing"))
            .collect();
        assert_eq!(writing.len(), 1, "exactly one file is open");
    }
    w.close().unwrap();
    let files = w.closed_files().to_vec();
    assert_eq!(files.len(), 3);
    let counts: Vec<usize> = files.iter().map(|f| read_all(f).len()).collect();
    assert_eq!(counts, vec![3, 3, 1]);
    let a = RecordFileReader::open(&files[1]).unwrap().attributes();
    assert_eq!(
        (
            a.run_number,
            a.file_index,
            a.record_type.as_deref(),
            a.application_name.as_deref()
        ),
        (Some(1), Some(1), Some("TriggerRecord"), Some("swdaq"))
    );
    assert_eq!(a.problems, []);
    assert!(a.closing_timestamp.is_some() && a.recorded_size.unwrap() > 300);
    assert!(files[0].ends_with("swdaq_run000001_0000.hdf5"));
    let names: Vec<String> = RecordFileReader::open(&files[0])
        .unwrap()
        .record_ids()
        .unwrap()
        .into_iter()
        .map(|id| id.group)
        .collect();
    assert_eq!(
        names,
        vec![
            "TriggerRecord00001.0000",
            "TriggerRecord00002.0000",
            "TriggerRecord00003.0000"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_full_disk_is_one_clear_error_and_closed_files_stay_valid() {
    let dir = temp_dir("full");
    let mut w = RecordFileWriter::new(StoreConfig {
        max_records_per_file: 1,
        ..config(&dir)
    })
    .unwrap();
    w.write(&record(1, &[(1, vec![1; 10])])).unwrap();
    w.write(&record(2, &[(1, vec![2; 10])])).unwrap();
    drop(w);
    // Now demand more free space than any disk has.
    let mut w = RecordFileWriter::new(StoreConfig {
        min_free_bytes: u64::MAX / 2,
        file_prefix: "second".into(),
        ..config(&dir)
    })
    .unwrap();
    let err = w.write(&record(3, &[(1, vec![3; 10])])).unwrap_err();
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err}");
    assert!(err.to_string().contains("not enough free space"));
    let files: Vec<PathBuf> = (0..2)
        .map(|i| dir.join(format!("swdaq_run000001_000{i}.hdf5")))
        .collect();
    for (i, f) in files.iter().enumerate() {
        assert_eq!(read_all(f)[0].header.trigger_number, i as u64 + 1);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unusable_output_directory_is_one_clear_error() {
    let dir = temp_dir("notadir");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let err = RecordFileWriter::new(config(&file.join("sub")))
        .err()
        .expect("cannot create a directory inside a file");
    assert!(
        err.to_string()
            .contains("cannot create the output directory"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn truncated_or_foreign_files_are_errors_not_panics() {
    let dir = temp_dir("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.hdf5");
    std::fs::write(&junk, vec![0u8; 1000]).unwrap();
    assert!(matches!(
        RecordFileReader::open(&junk),
        Err(StoreError::Hdf5 { .. })
    ));
    let mut w = RecordFileWriter::new(config(&dir)).unwrap();
    w.write(&record(1, &[(1, vec![1; 5000])])).unwrap();
    w.close().unwrap();
    let good = w.closed_files()[0].clone();
    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.join("cut.hdf5");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let result =
        RecordFileReader::open(&cut).and_then(|r| r.records()?.collect::<Result<Vec<_>, _>>());
    assert!(result.is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory the writer cannot create files in: read-only by its mode for an ordinary user;
/// root ignores modes, so for root a sysfs directory, which refuses new files to everyone.
fn read_only_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::File::create(dir.join("probe")).is_ok() {
        PathBuf::from("/sys/kernel")
    } else {
        dir.to_path_buf()
    }
}

#[test]
fn a_read_only_directory_is_one_clear_error_and_closed_files_stay_valid() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("readonly");
    let mut w = RecordFileWriter::new(StoreConfig {
        max_records_per_file: 1,
        ..config(&dir)
    })
    .unwrap();
    w.write(&record(1, &[(1, vec![1; 100])])).unwrap();
    w.close().unwrap();
    let closed = w.closed_files()[0].clone();
    let target = read_only_dir(&dir);
    let mut w = RecordFileWriter::new(config(&target)).unwrap();
    let err = w.write(&record(2, &[(1, vec![2; 100])])).unwrap_err();
    let text = err.to_string();
    match err {
        StoreError::Io { .. } => assert!(
            text.starts_with("cannot create") && text.contains("Permission denied"),
            "{text}"
        ),
        // sysfs reports no free blocks: the space check refuses first.
        StoreError::NoSpace { .. } => assert!(text.contains("/sys/kernel"), "{text}"),
        other => panic!("not one clear error: {other}"),
    }
    drop(w);
    assert_eq!(read_all(&closed)[0].header.trigger_number, 1);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_refused_record_leaves_nothing_behind() {
    let dir = temp_dir("refused");
    let mut w = RecordFileWriter::new(config(&dir)).unwrap();
    let first = record(1, &[(1, vec![1; 100])]);
    w.write(&first).unwrap();
    let err = w.write(&record(1, &[(2, vec![2; 100])])).unwrap_err();
    assert!(err.is_record_error(), "{err}");
    assert!(
        err.to_string()
            .contains("TriggerRecord00001.0000 is already in the file")
    );
    // Two fragments with the same source and type cannot both be stored.
    let err = w
        .write(&record(2, &[(1, vec![3; 100]), (1, vec![4; 100])]))
        .unwrap_err();
    assert!(matches!(err, StoreError::Hdf5 { .. }), "{err}");
    let mut bad = record(3, &[(1, vec![5; 100])]);
    bad.fragments[0][0] ^= 0xff;
    assert!(matches!(w.write(&bad), Err(StoreError::Format { .. })));
    let last = record(4, &[(1, vec![6; 100])]);
    w.write(&last).unwrap();
    w.close().unwrap();
    assert_eq!(read_all(&w.closed_files()[0]), vec![first, last]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue #23: a closed file holds every file and record-group attribute hdf5libs writes, each
/// of hdf5libs' type, and its maps name every dataset of every record.
#[test]
fn the_file_holds_hdf5libs_attributes_and_maps() {
    use hdf5::types::{IntSize, TypeDescriptor, VarLenUnicode};
    use serde_json::{Value, json};
    use swdaq_store::sample::{LINKS, track_record};

    let dir = temp_dir("hdf5libs-attributes");
    let mut w = RecordFileWriter::new(config(&dir)).unwrap();
    for t in 1..=2 {
        w.write(&track_record(t).record).unwrap();
    }
    w.close().unwrap();
    let file = hdf5::File::open(&w.closed_files()[0]).unwrap();
    let kind = |loc: &hdf5::Location, name: &str| {
        loc.attr(name)
            .and_then(|a| a.dtype())
            .and_then(|t| t.to_descriptor())
            .unwrap()
    };
    let json_of = |loc: &hdf5::Location, name: &str| -> Value {
        let text = loc.attr(name).unwrap().read_scalar::<VarLenUnicode>();
        serde_json::from_str(text.unwrap().as_str()).unwrap()
    };
    let (u32_, u64_, text) = (
        TypeDescriptor::Unsigned(IntSize::U4),
        TypeDescriptor::Unsigned(IntSize::U8),
        TypeDescriptor::VarLenUnicode,
    );
    let expected = [
        ("application_name", text.clone()),
        ("closing_timestamp", u64_.clone()),
        ("creation_timestamp", u64_.clone()),
        ("file_index", u64_.clone()),
        ("filelayout_params", text.clone()),
        ("filelayout_version", u32_.clone()),
        ("record_type", text.clone()),
        ("recorded_size", u64_),
        ("run_number", u32_),
        ("source_id_geo_id_map", text.clone()),
    ];
    let mut names = file.attr_names().unwrap();
    names.sort();
    assert_eq!(names, expected.each_ref().map(|(n, _)| *n));
    for (name, t) in &expected {
        assert_eq!(&kind(&file, name), t, "{name}");
    }
    // Each link's geo id from its frames: stream = link, detector 3 (HD TPC).
    let geo: Vec<Value> = (0..LINKS)
        .map(|l| json!({"subsys": 1, "id": l, "geoids": [u64::from(l) << 48 | 3]}))
        .collect();
    assert_eq!(
        json_of(&file, "source_id_geo_id_map"),
        json!({ "map_entries": geo })
    );

    for group in ["TriggerRecord00001.0000", "TriggerRecord00002.0000"] {
        let g = file.group(group).unwrap();
        let mut names = g.attr_names().unwrap();
        names.sort();
        assert_eq!(
            names,
            [
                "fragment_type_source_id_map",
                "record_header_source_id",
                "source_id_path_map",
                "subdetector_source_id_map"
            ]
        );
        for name in &names {
            assert_eq!(kind(&g, name), text, "{group} {name}");
        }
        assert_eq!(
            json_of(&g, "record_header_source_id"),
            json!({"subsys": 4, "id": 0})
        );
        let paths: Vec<String> = json_of(&g, "source_id_path_map")["map_entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_string())
            .collect();
        let mut datasets: Vec<String> = g
            .group("RawData")
            .unwrap()
            .member_names()
            .unwrap()
            .into_iter()
            .map(|n| format!("/{group}/RawData/{n}"))
            .collect();
        datasets.sort();
        let mut listed = paths.clone();
        listed.sort();
        assert_eq!(listed, datasets, "every dataset in the map, once");
        let readout: Vec<Value> = (0..LINKS).map(|l| json!({"subsys": 1, "id": l})).collect();
        let trigger = json!([{"subsys": 3, "id": 0}]);
        assert_eq!(
            json_of(&g, "fragment_type_source_id_map"),
            json!({"map_entries": [
                {"fragment_type": FragmentType::TRIGGER_PRIMITIVE.0, "sourceids": trigger},
                {"fragment_type": FragmentType::WIBETH.0, "sourceids": readout},
            ]})
        );
        let mut all = readout.clone();
        all.extend(trigger.as_array().unwrap().iter().cloned());
        assert_eq!(
            json_of(&g, "subdetector_source_id_map"),
            json!({"map_entries": [{"subdetector": 3, "sourceids": all}]})
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
