//! The whole event builder in one process, end to end: files read back against the
//! emulator, and the fault drills (every injected fault in exactly one counter, a FED that
//! stops, a builder unit that dies, a full disk under both policies).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use swdaq_evb::check::FedCheckFailure;
use swdaq_evb::farm::{FarmConfig, FarmCounts};
use swdaq_evb::files::WriterError;
use swdaq_evb::jsn::{EolsJsn, EorJsn, FileJsn, eols_file_name, eor_file_name};
use swdaq_evb::{DiskFullPolicy, Drills, EvbConfig, EvbRun, EvbSummary};
use swdaq_format::fed::FedFragment;
use swdaq_format::frd::{FrdFile, frd_flags};
use swdaq_monitor::Registry;
use swdaq_sim::fed::{FedFaultKind, FedFaultRates};

fn config(dir: &Path, events: u64) -> EvbConfig {
    EvbConfig {
        run: 1,
        paced: false,
        max_events: Some(events),
        output: dir.to_owned(),
        min_free_bytes: 0,
        // Long enough that threads starved of the two cores by parallel tests never time out.
        ru_hold_timeout: Duration::from_secs(20),
        build_timeout: Duration::from_secs(10),
        ..Default::default()
    }
}

fn run(config: &EvbConfig, drills: &Drills) -> EvbSummary {
    let evb = EvbRun::start(config, &Registry::new(), drills, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !evb.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the event builder did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    evb.join().unwrap()
}

/// A builder unit's run directory (`run<NNNNNN>/`, the one run it wrote).
fn run_dir(bu: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(bu)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.file_name().unwrap().to_str().unwrap().starts_with("run"))
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// Every event in the files under `dir`: (event number, flags, FED ids), checking CRCs and .jsn.
fn read_back(dir: &Path) -> Vec<(u32, u16, Vec<u16>)> {
    let mut events = Vec::new();
    for bu in std::fs::read_dir(dir).unwrap() {
        let bu = bu.unwrap().path();
        let mut eols_events = 0;
        let mut file_events = 0;
        for entry in std::fs::read_dir(run_dir(&bu)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            assert!(!name.ends_with(".tmp"), "{name} left behind");
            if name.ends_with("_EoLS.jsn") {
                eols_events += EolsJsn::parse(&std::fs::read_to_string(&path).unwrap())
                    .unwrap()
                    .events;
            } else if name.ends_with(".raw") {
                let bytes = std::fs::read(&path).unwrap();
                let file = FrdFile::parse(&bytes).unwrap();
                let jsn =
                    FileJsn::parse(&std::fs::read_to_string(path.with_extension("jsn")).unwrap())
                        .unwrap();
                assert_eq!(
                    jsn,
                    FileJsn {
                        events: file.header.event_count as u64,
                        bytes: bytes.len() as u64
                    }
                );
                file_events += jsn.events;
                for event in file.events() {
                    let event = event.unwrap();
                    assert!(event.crc_ok());
                    let mut feds = Vec::new();
                    let mut rest = event.payload;
                    while !rest.is_empty() {
                        let (f, before) = FedFragment::parse_last(rest).unwrap();
                        assert!(f.crc_ok());
                        assert_eq!(f.header.l1_id, event.header.event);
                        feds.push(f.header.source_id);
                        rest = before;
                    }
                    feds.sort_unstable();
                    events.push((event.header.event, event.header.flags, feds));
                }
            }
        }
        // A unit that died ended no lumi section (the run's end never reached it).
        if run_dir(&bu).read_dir().unwrap().any(|e| {
            let name = e.unwrap().file_name();
            name.to_str().unwrap().ends_with("_EoR.jsn")
        }) {
            assert_eq!(eols_events, file_events);
        }
    }
    events.sort_unstable();
    events
}

#[test]
fn clean_run_writes_every_event_once_with_every_fed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3000);
    let s = run(&cfg, &Drills::default());
    assert_eq!(
        (
            s.evm.assigned,
            s.built(),
            s.written(),
            s.incomplete(),
            s.lost()
        ),
        (3000, 3000, 3000, 0, 0)
    );
    let events = read_back(dir.path());
    let all_feds: Vec<u16> = cfg.rus.iter().flatten().map(|f| f.id).collect();
    assert_eq!(events.len(), 3000);
    for (i, (event, flags, feds)) in events.iter().enumerate() {
        assert_eq!((*event, *flags), (i as u32 + 1, 0));
        assert_eq!(feds, &all_feds);
    }
    // No builder unit was ever given more than it asked for.
    for a in &s.evm.accounts {
        assert!(a.assigned <= a.requested);
    }
}

#[test]
fn every_injected_fault_ends_in_exactly_one_counter() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 4000);
    cfg.faults = FedFaultRates {
        missing: 0.01,
        wrong_l1_id: 0.01,
        bad_crc: 0.01,
        bad_length: 0.01,
        stops: vec![(201, 2500)],
    };
    let s = run(&cfg, &Drills::default());
    let injected = |fed: u16, kinds: &[FedFaultKind]| -> u64 {
        kinds
            .iter()
            .map(|k| s.injected.get(&(fed, *k)).copied().unwrap_or(0))
            .sum()
    };
    for &(_, fed, c) in &s.feds {
        assert_eq!(
            c.failed(FedCheckFailure::Missing),
            injected(fed, &[FedFaultKind::Missing, FedFaultKind::Stopped])
        );
        assert_eq!(
            c.failed(FedCheckFailure::WrongL1Id),
            injected(fed, &[FedFaultKind::WrongL1Id])
        );
        assert_eq!(
            c.failed(FedCheckFailure::BadCrc),
            injected(fed, &[FedFaultKind::BadCrc])
        );
        assert_eq!(
            c.failed(FedCheckFailure::BadLength),
            injected(fed, &[FedFaultKind::BadLength])
        );
        assert_eq!(
            c.failed(FedCheckFailure::Malformed) + c.failed(FedCheckFailure::WrongSourceId),
            0
        );
    }
    // The stopped FED is missing from every event from 2500 on, and only the failed FEDs are.
    assert_eq!(injected(201, &[FedFaultKind::Stopped]), 1501);
    let events = read_back(dir.path());
    assert_eq!(events.len(), 4000);
    assert!(
        events[2499..]
            .iter()
            .all(|(_, _, feds)| !feds.contains(&201))
    );
    let left_out: u64 = events
        .iter()
        .map(|(_, _, feds)| (8 - feds.len()) as u64)
        .sum();
    let failed: u64 = s
        .feds
        .iter()
        .map(|(_, _, c)| c.failures.iter().sum::<u64>())
        .sum();
    assert_eq!(left_out, failed);
    // An event lacking a FED is incomplete, though every readout unit answered: flagged in
    // the file and counted, exactly those.
    let lacking = events.iter().filter(|(_, _, feds)| feds.len() < 8).count() as u64;
    assert!(lacking > 1500);
    assert!(
        events
            .iter()
            .all(|(_, flags, feds)| (flags & frd_flags::INCOMPLETE != 0) == (feds.len() < 8))
    );
    assert_eq!(s.incomplete(), lacking);
}

#[test]
fn a_builder_unit_that_dies_loses_only_what_it_held_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 4000);
    let s = run(
        &cfg,
        &Drills {
            kill_bu: Some((1, 500)),
        },
    );
    let events = read_back(dir.path());
    let numbers: BTreeSet<u32> = events.iter().map(|e| e.0).collect();
    assert_eq!(numbers.len(), events.len(), "an event was written twice");
    assert_eq!(s.evm.gone, [1]);
    // Every event triggered is in a file or listed lost, never both: in one process the dead
    // unit's writer still writes what the unit handed it, and the summary reads that back
    // (so nothing may be lost at all when the unit dies with nothing in hand).
    let lost: BTreeSet<u32> = s.evm.lost.iter().map(|&e| e as u32).collect();
    let missing: Vec<u32> = (1..=4000)
        .filter(|e| !numbers.contains(e) && !lost.contains(e))
        .collect();
    assert!(missing.is_empty(), "neither written nor lost: {missing:?}");
    let both: Vec<_> = numbers.intersection(&lost).collect();
    assert!(both.is_empty(), "written and lost: {both:?}");
    assert_eq!(
        (s.written() + s.lost(), s.written()),
        (4000, numbers.len() as u64)
    );
    assert_eq!(s.read_back.len(), 1);
    // The surviving builder unit kept building to the end of the run.
    assert_eq!(s.evm.assigned, 4000);
    assert!(events.iter().all(|e| e.1 & frd_flags::INCOMPLETE == 0));
}

#[test]
fn full_disk_stops_the_run_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), u64::MAX);
    cfg.max_events = None;
    cfg.min_free_bytes = u64::MAX / 4;
    let s = run(&cfg, &Drills::default());
    assert!(
        s.writers
            .iter()
            .any(|w| matches!(w.error, Some(WriterError::DiskFull { .. })))
    );
    assert_eq!(s.written(), 0);
    // Every event given out was built and counted unwritten: none vanished in a queue.
    assert_eq!((s.evm.lost.len() as u64, s.built()), (0, s.evm.assigned));
    assert_eq!(s.lost(), s.evm.assigned);
    assert!(s.lost() > 0);
}

#[test]
fn full_disk_sheds_by_policy_and_counts_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 1000);
    cfg.min_free_bytes = u64::MAX / 4;
    cfg.disk_full = DiskFullPolicy::Shed;
    let s = run(&cfg, &Drills::default());
    assert_eq!(
        (s.built(), s.written(), s.shed(), s.lost()),
        (1000, 0, 1000, 1000)
    );
}

/// The files are byte for byte what the builder wrote before events were built in place and
/// written with vectored writes: CRC32C of the raw files of this seeded run (one builder
/// unit, so event order is fixed), as `swdaq run` of main at 593959b wrote them.
#[test]
fn files_are_the_same_bytes_as_before_in_place_building() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EvbConfig {
        builder_units: 1,
        trigger_rate_hz: 20_000.0,
        ..config(dir.path(), 1000)
    };
    assert_eq!(run(&cfg, &Drills::default()).written(), 1000);
    let mut names: Vec<_> = std::fs::read_dir(run_dir(&dir.path().join("bu0")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "raw"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 10);
    let bytes: Vec<u8> = names
        .iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(
        (bytes.len(), swdaq_format::crc::crc32c(&bytes)),
        (8_234_768, 0x8e29_6f5e)
    );
}

#[test]
fn the_farm_verifies_every_event_once_and_leaves_no_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EvbConfig {
        farm: FarmConfig {
            consumers: 2,
            filter: None,
        },
        ..config(dir.path(), 3000)
    };
    let s = run(&cfg, &Drills::default());
    assert_eq!((s.written(), s.lost()), (3000, 0));
    let farm = s.farm.clone().expect("the farm ran");
    let files: u64 = s.writers.iter().map(|w| w.counts.files).sum();
    assert_eq!(
        farm.counts,
        FarmCounts {
            files,
            events: 3000,
            bytes: s.written_bytes(),
            bad_events: 0,
            bad_files: 0,
            filter: Default::default(),
        }
    );
    assert!(farm.kept.is_empty() && farm.errors.is_empty(), "{farm:?}");
    assert!(farm.cpu_seconds > 0.0);
    // Only the definitions and the lumi sections' and run's bookkeeping are left.
    for bu in std::fs::read_dir(dir.path()).unwrap() {
        for entry in std::fs::read_dir(run_dir(&bu.unwrap().path())).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                name == "jsd" || name.ends_with("_EoLS.jsn") || name.ends_with("_EoR.jsn"),
                "{name} left behind"
            );
        }
    }
}

/// Two builder units and lumi sections of a few events: every unit writes an EoLS for every
/// lumi section of the run, also those it wrote nothing in, each with the event manager's
/// count for the whole lumi section; and an EoR with the run's totals.
#[test]
fn every_unit_ends_every_lumi_section_with_the_event_manager_s_total() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EvbConfig {
        run: 5,
        poisson: false,
        trigger_rate_hz: 1000.0,
        lumi_section: Duration::from_millis(3),
        events_per_file: 4,
        ..config(dir.path(), 300)
    };
    let s = run(&cfg, &Drills::default());
    assert_eq!(s.written(), 300);
    let runs: Vec<PathBuf> = (0..2)
        .map(|bu| run_dir(&dir.path().join(format!("bu{bu}"))))
        .collect();
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap();
    let eors: Vec<EorJsn> = runs
        .iter()
        .map(|r| EorJsn::parse(&read(r.join(eor_file_name(5)))).unwrap())
        .collect();
    let last = eors[0].last_lumi as u32;
    assert!(last >= 90, "{eors:?}");
    let mut empty = 0;
    let mut total = 0;
    for lumi in 1..=last {
        let eols: Vec<EolsJsn> = runs
            .iter()
            .map(|r| EolsJsn::parse(&read(r.join(eols_file_name(5, lumi)))).unwrap())
            .collect();
        let events: u64 = eols.iter().map(|e| e.events).sum();
        assert!(
            eols.iter().all(|e| e.total_events == events),
            "{lumi}: {eols:?}"
        );
        empty += eols
            .iter()
            .filter(|e| e.events == 0 && e.files == 0)
            .count();
        total += events;
    }
    assert!(empty > 0, "no unit had an empty lumi section");
    assert_eq!(total, 300);
    for (eor, r) in eors.iter().zip(&runs) {
        assert_eq!(
            (eor.last_lumi, eor.lumis, eor.total_events),
            (last as u64, last as u64, 300)
        );
        assert!(!r.join(eols_file_name(5, last + 1)).exists());
    }
    assert_eq!(eors.iter().map(|e| e.events).sum::<u64>(), 300);
}
