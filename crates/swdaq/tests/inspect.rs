//! `swdaq inspect` and `swdaq display` from the binary on damaged files (issue #22): the
//! format is named, every good event or record shown, every bad one named, and the exit
//! status non-zero when anything is bad. Files are made here byte by byte.

mod common;

use common::watch::watch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use swdaq_format::SourceId;
use swdaq_format::crc::crc32c;
use swdaq_format::eformat::{RobFragment, RodHeader};
use swdaq_format::eformat_event::{EventHeader, EventLists, encode_event, encode_stream_tags};
use swdaq_format::fed::{FedHeader, FedTrailer, encode_fed_fragment};
use swdaq_format::file_kind::OLD_SWROD_FRAME_TYPE;
use swdaq_format::frd::{FRD_FILE_HEADER_SIZE, FrdEventHeader, FrdFileHeader};
use swdaq_format::rawfile::{RawFileHeader, RawFileWriter};
use swdaq_store::{RecordFileWriter, StoreConfig, sample};
use swdaq_swrod::event::stream_tag;
use swdaq_swrod::files::{EventFiles, FileSettings};

/// Tests here run one at a time: a child spawned by one test inherits the descriptors of an
/// HDF5 file another test has open (HDF5 does not open them close-on-exec), and with them
/// its file lock, which then refuses that test's next open.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn swdaq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(args)
        .output()
        .unwrap()
}

fn inspect(path: &Path, json: bool) -> (bool, String, String) {
    let p = path.to_str().unwrap();
    let out = if json {
        swdaq(&["inspect", "--json", p])
    } else {
        swdaq(&["inspect", p])
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An FRD file of `n` events of one FED each, as the event builder writes it.
fn frd_file(n: u32) -> Vec<u8> {
    let mut body = Vec::new();
    for event in 1..=n {
        let mut payload = Vec::new();
        let fed = FedHeader {
            l1_id: event,
            source_id: 7,
            ..Default::default()
        };
        encode_fed_fragment(
            &mut payload,
            &fed,
            &FedTrailer::default(),
            &[event as u8; 64],
        );
        let header = FrdEventHeader {
            run: 3,
            lumi: 1,
            event,
            event_size: payload.len() as u32,
            crc32c: crc32c(&payload),
            ..Default::default()
        };
        body.extend(header.to_bytes());
        body.extend(payload);
    }
    let header = FrdFileHeader {
        event_count: n,
        run: 3,
        lumi: 1,
        file_size: (FRD_FILE_HEADER_SIZE + body.len()) as u64,
        ..Default::default()
    };
    let mut file = header.to_bytes().to_vec();
    file.extend(body);
    file
}

fn written(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn frd_files_show_every_intact_event_and_fail_on_damage() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let good = frd_file(100);
    let (ok, text, _) = inspect(&written(dir.path(), "good.raw", &good), false);
    assert!(ok, "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("CMS FRD file (RAW_0002)"),
        "{text}"
    );
    assert!(text.contains("100 events read"), "{text}");

    // Cut by one byte: the 99 whole events shown, the cut one named.
    let (ok, text, err) = inspect(
        &written(dir.path(), "cut.raw", &good[..good.len() - 1]),
        false,
    );
    assert!(!ok);
    assert!(text.contains("99 events read"), "{text}");
    assert_eq!(text.matches("crc32c ok").count(), 99);
    assert!(text.contains("BAD bytes"), "{text}");
    assert!(err.contains("problems"), "{err}");

    // A flipped bit in the first event's header: the other 99 shown.
    let mut flipped = good.clone();
    flipped[FRD_FILE_HEADER_SIZE] ^= 1;
    let (ok, text, _) = inspect(&written(dir.path(), "flipped.raw", &flipped), false);
    assert!(!ok);
    assert_eq!(text.matches("crc32c ok").count(), 99, "{text}");
    assert!(
        text.contains(&format!("BAD bytes {FRD_FILE_HEADER_SIZE}..")),
        "{text}"
    );

    // A flipped event count in the file header: named, and the exit status says so.
    let mut count = good.clone();
    count[12] ^= 2;
    let (ok, out, _) = inspect(&written(dir.path(), "count.raw", &count), true);
    assert!(!ok);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["format"], "CMS FRD file (RAW_0002)");
    assert_eq!(report["events"].as_array().unwrap().len(), 100);
    assert!(
        report["problems"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("the header says 102 events, 100 found"),
        "{report}"
    );

    // A damaged header id: still taken for FRD, not HDF5.
    let mut magic = good.clone();
    magic[0] = b'X';
    let (ok, text, err) = inspect(&written(dir.path(), "magic.raw", &magic), false);
    assert!(!ok);
    assert!(
        text.contains("damaged or unwritten RAW_0002 header"),
        "{text}"
    );
    assert_eq!(text.matches("crc32c ok").count(), 100);
    assert!(!err.contains("HDF5"), "{err}");

    // A killed writer's file: header not written yet, events still listed.
    let mut open = good.clone();
    open[..FRD_FILE_HEADER_SIZE].fill(0);
    let (ok, text, _) = inspect(
        &written(dir.path(), "run000003_ls0001_index000000.raw.tmp", &open),
        false,
    );
    assert!(!ok);
    assert!(text.contains("left open by its writer (.tmp"), "{text}");
    assert!(text.contains("file header not written"), "{text}");
    assert_eq!(text.matches("crc32c ok").count(), 100);
}

#[test]
fn what_is_no_data_file_is_said_in_one_line() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = inspect(dir.path(), false);
    assert!(!ok);
    assert!(err.contains("a directory, not a data file"), "{err}");
    assert!(!err.contains("HDF5 error"), "{err}");
    let (ok, _, err) = inspect(&written(dir.path(), "notes.txt", b"hello"), false);
    assert!(!ok);
    assert!(err.contains("no known data format"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = swdaq(&[
        "display",
        written(dir.path(), "x.raw", &frd_file(1)).to_str().unwrap(),
        "--record",
        "1",
        "-o",
        dir.path().join("x.png").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("CMS FRD file") && err.contains("draws records of HDF5"),
        "{err}"
    );
}

/// A closed EventStorage file of `events` one-ROB events in `dir`, as the SW ROD's writer
/// writes it, and the bytes of one event.
fn eventstorage_file(dir: &Path, events: u32) -> (PathBuf, usize) {
    let mut files = EventFiles::new(FileSettings {
        dir: dir.to_owned(),
        run_number: 4,
        project: "data_test".into(),
        stream_type: "physics".into(),
        stream_name: "Main".into(),
        app_name: "SFO-1".into(),
        max_file_bytes: 1 << 20,
        flush: swdaq_format::run_files::FlushPolicy::new(0, 0),
        sync_to_disk: false,
        min_free_bytes: 0,
        provenance: None,
    })
    .unwrap();
    let tags = encode_stream_tags(&[stream_tag()]);
    let mut event_bytes = 0;
    for l1_id in 0..events {
        let rod = RodHeader {
            source_id: 0x0071_0000,
            l1_id,
            ..Default::default()
        };
        let rob = RobFragment::assemble(0x0071_0000, &[0], &rod, &[1; 32]);
        let mut event = Vec::new();
        let h = EventHeader {
            l1_id,
            global_id: u64::from(l1_id) + 1,
            run_number: 4,
            lumi_block: 1,
            ..Default::default()
        };
        let lists = EventLists {
            stream_tags: &tags,
            ..Default::default()
        };
        encode_event(&mut event, &h, &[0], &lists, &[&rob]);
        event_bytes = event.len();
        files.write(1, &event, false).unwrap();
    }
    let (written_files, _, closed) = files.finish();
    closed.unwrap();
    (written_files[0].path.clone(), event_bytes)
}

#[test]
fn eventstorage_files_check_markers_and_payloads_and_old_sw_rod_files_are_named() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (path, event_bytes) = eventstorage_file(dir.path(), 5);
    let (ok, text, _) = inspect(&path, false);
    assert!(ok, "{text}");
    assert!(
        text.contains("ATLAS EventStorage file") && text.contains("5 good events"),
        "{text}"
    );
    // The third event's marker flipped (each event follows its 16-byte data separator).
    let good = std::fs::read(&path).unwrap();
    let body = good.len() - 40 - 5 * (16 + event_bytes);
    let mut bad = good.clone();
    bad[body + 2 * (16 + event_bytes) + 16] ^= 1;
    let name = path.file_name().unwrap().to_str().unwrap();
    let sub = dir.path().join("bad");
    std::fs::create_dir(&sub).unwrap();
    let (ok, text, _) = inspect(&written(&sub, name, &bad), false);
    assert!(!ok, "{text}");
    assert!(
        text.contains("4 good events") && text.contains("BAD event block 3"),
        "{text}"
    );
    assert!(text.contains("bad magic"), "{text}");
    // A file a SW ROD run wrote before EventStorage: named in one line, not read.
    let old = RawFileHeader {
        frame_type: OLD_SWROD_FRAME_TYPE,
        frame_size: 4096,
        source_id: SourceId::readout(0),
        run_number: 4,
        first_timestamp: 0,
        created_unix_ns: 0,
    };
    let mut w = RawFileWriter::new(Vec::new(), &old).unwrap();
    w.write_frame(&[0; 100]).unwrap();
    let (ok, _, err) = inspect(
        &written(dir.path(), "swrod_run000004_0000.raw", &w.finish().unwrap()),
        false,
    );
    assert!(!ok);
    assert!(err.contains("reads it no more"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Runs `swdaq inspect --json path` (at most a minute), its report written to `out`: whether
/// it succeeded, its peak resident set in kB and how long it took.
fn inspect_measured(path: &Path, out: &Path) -> (bool, u64, Duration) {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["inspect", "--json"])
        .arg(path)
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = watch(child, Duration::from_secs(60));
    (
        run.output.status.success(),
        run.peak_rss_kb,
        started.elapsed(),
    )
}

/// Issue #33: a good file with a 2 GB zero tail (sparse: no disk) read whole cost 2.1 GB of
/// memory and over 30 s. Now every good event is listed, the zero span named once, the exit
/// status non-zero, in bounded memory and time.
#[test]
fn a_2_gb_zero_tail_costs_neither_memory_nor_time() {
    const ZERO_TAIL: u64 = 2 << 30;
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let frd = written(dir.path(), "tail.raw", &frd_file(100));
    let (eventstorage, _) = eventstorage_file(dir.path(), 5);
    let out = dir.path().join("report.json");
    for (path, events) in [(frd, 100), (eventstorage, 5)] {
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let good = file.metadata().unwrap().len();
        file.set_len(good + ZERO_TAIL).unwrap();
        let (ok, peak_kb, took) = inspect_measured(&path, &out);
        eprintln!("{}: peak RSS {peak_kb} kB, {took:?}", path.display());
        assert!(!ok);
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(report["events"].as_array().unwrap().len(), events);
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["offset"] == good && p["bytes"] == ZERO_TAIL),
            "{problems:?}"
        );
        assert!(peak_kb < 200_000, "peak RSS {peak_kb} kB");
        assert!(took < Duration::from_secs(60), "{took:?}");
    }
}

fn hdf5_file(dir: &Path, records: u64) -> PathBuf {
    let mut writer = RecordFileWriter::new(StoreConfig {
        directory: dir.to_owned(),
        min_free_bytes: 0,
        ..Default::default()
    })
    .unwrap();
    for trigger in 1..=records {
        writer.write(&sample::track_record(trigger).record).unwrap();
    }
    writer.close().unwrap();
    writer.closed_files()[0].clone()
}

#[test]
fn hdf5_attributes_of_the_wrong_type_are_named_and_records_still_listed() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = hdf5_file(dir.path(), 3);
    {
        let file = hdf5::File::open_rw(&path).unwrap();
        file.delete_attr("file_index").unwrap();
        file.new_attr::<f64>()
            .create("file_index")
            .and_then(|a| a.write_scalar(&1.5))
            .unwrap();
    }
    let (ok, text, err) = inspect(&path, false);
    assert!(!ok);
    assert!(
        text.starts_with(&format!("{}: HDF5 trigger-record file", path.display())),
        "{text}"
    );
    assert!(text.contains(", 3 records"), "{text}");
    assert!(
        text.contains("BAD attribute file_index: expected unsigned integer, found float64"),
        "{text}"
    );
    assert!(err.contains("file attributes"), "{err}");
    let (_, out, _) = inspect(&path, true);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["attributes"]["problems"][0]["name"], "file_index");
    assert_eq!(report["records"].as_array().unwrap().len(), 3);
}

#[test]
fn display_draws_around_a_garbage_fragment_and_names_it() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = hdf5_file(dir.path(), 1);
    let garbled =
        swdaq_store::sample::garble_wibeth_payload(&path, "TriggerRecord00001.0000").unwrap();
    let png = dir.path().join("event.png");
    let out = swdaq(&[
        "display",
        path.to_str().unwrap(),
        "--record",
        "1",
        "-o",
        png.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(png.exists(), "{err}");
    assert!(
        err.contains(&format!(
            "BAD fragment {garbled} (left out, the rest drawn)"
        )),
        "{err}"
    );
}

/// A link file is as good as its frames: one the continuity checks flag (here 1000 frames of
/// random bytes after the good ones) makes inspect exit non-zero, a clean one exits 0.
#[test]
fn raw_link_files_with_bad_frames_fail() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = swdaq(&[
        "gen",
        "--seconds",
        "0.01",
        "--links",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let clean = dir.path().join("link0.swraw");
    let (ok, text, err) = inspect(&clean, false);
    assert!(ok, "{text}{err}");
    let mut bytes = std::fs::read(&clean).unwrap();
    let frame = swdaq_format::FrameFormat::WibEth.frame_size();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..1000 {
        bytes.extend_from_slice(&(frame as u32).to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        for _ in 0..frame {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.push(state as u8);
        }
    }
    let damaged = written(dir.path(), "damaged.swraw", &bytes);
    let (ok, text, err) = inspect(&damaged, false);
    assert!(!ok, "{text}");
    assert!(
        err.contains("frames flagged by the continuity checks"),
        "{err}"
    );
}
