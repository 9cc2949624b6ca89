//! Records written then read back are byte-identical; files roll over, are renamed on
//! close, and a full or unusable output directory is one clear error.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use swdaq_format::{
    ComponentRequest, Fragment, FragmentHeader, FragmentType, SourceId, Subsystem, TriggerRecord,
    TriggerRecordHeader,
};
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
    r.record_names()
        .unwrap()
        .iter()
        .map(|n| r.read_record(n).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn records_round_trip_byte_for_byte(payloads in proptest::collection::vec(proptest::collection::vec((0u32..6, proptest::collection::vec(any::<u8>(), 0..3000)), 1..5), 1..6)) {
        let dir = temp_dir("prop");
        let mut w = RecordFileWriter::new(config(&dir)).unwrap();
        let records: Vec<TriggerRecord> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // One fragment per source, as record building produces.
                let mut by_source: Vec<(u32, Vec<u8>)> = Vec::new();
                for (s, bytes) in p {
                    if !by_source.iter().any(|(t, _)| t == s) {
                        by_source.push((*s, bytes.clone()));
                    }
                }
                by_source.sort_by_key(|(s, _)| *s);
                record(i as u64 + 1, &by_source)
            })
            .collect();
        for r in &records {
            w.write(r).unwrap();
        }
        w.close().unwrap();
        let files = w.closed_files().to_vec();
        prop_assert_eq!(files.len(), 1);
        prop_assert_eq!(read_all(&files[0]), records);
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
    let a = RecordFileReader::open(&files[1])
        .unwrap()
        .attributes()
        .unwrap();
    assert_eq!(
        (
            a.run_number,
            a.file_index,
            a.record_type.as_str(),
            a.application_name.as_str()
        ),
        (1, 1, "TriggerRecord", "swdaq")
    );
    assert!(a.closing_timestamp_ms.is_some() && a.recorded_size.unwrap() > 300);
    assert!(files[0].ends_with("swdaq_run000001_0000.hdf5"));
    let names = RecordFileReader::open(&files[0])
        .unwrap()
        .record_names()
        .unwrap();
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
    let result = RecordFileReader::open(&cut).and_then(|r| {
        let names = r.record_names()?;
        names
            .iter()
            .map(|n| r.read_record(n))
            .collect::<Result<Vec<_>, _>>()
    });
    assert!(result.is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
