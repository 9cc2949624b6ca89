//! The event builder reading FED raw files end to end, through the binary: `swdaq gen
//! --format fed` with every fault kind on, `swdaq run` of an `[evb]` configuration with
//! `[evb.input] kind = "file"`, then `swdaq inspect --json` of every FRD file. Every event is
//! in the files once, each FED fragment in it is byte for byte the generated file's record,
//! and the summary's per-FED failures are the generator's truth by kind.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use swdaq_format::fed::FedFragment;
use swdaq_format::frd::FrdFile;
use swdaq_format::rawfile::RawFileReader;

const EVENTS: u64 = 600;

fn swdaq(args: &[&str], dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swdaq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (event, FED) -> fault kind, from `fed_faults.csv`.
fn truth(dir: &Path) -> BTreeMap<(u64, u16), String> {
    let text = std::fs::read_to_string(dir.join("fed_faults.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (
                (f[0].parse().unwrap(), f[1].parse().unwrap()),
                f[2].to_owned(),
            )
        })
        .collect()
}

#[test]
fn fed_files_build_into_frd_files_with_every_fault_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let gen_dir = dir.path().join("gen");
    let feds: Vec<String> = (0..8)
        .map(|id| format!("{{ id = {id}, mean_bytes = 256, spread_bytes = 32 }}"))
        .collect();
    std::fs::write(
        dir.path().join("gen.toml"),
        format!(
            "feds = [{}]\ntrigger_rate_hz = 10000.0\npoisson = false\nseed = 5\n\
             [faults]\nmissing = 0.02\nwrong_l1_id = 0.02\nbad_crc = 0.02\nbad_length = 0.02\n\
             stops = [[6, 400]]\n",
            feds.join(", ")
        ),
    )
    .unwrap();
    let seconds = (EVENTS as f64 / 10000.0).to_string();
    swdaq(
        &[
            "gen",
            "--format",
            "fed",
            "--config",
            "gen.toml",
            "--seconds",
            &seconds,
            "--out",
            "gen",
        ],
        dir.path(),
    );
    std::fs::write(
        dir.path().join("evb.toml"),
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[evb]\nbuilder_units = 2\nevents_per_file = 100\n\
             min_free_bytes = 0\noutput = {:?}\nrus = [[{}], [{}]]\n\
             [evb.input]\nkind = \"file\"\ndirectory = {:?}\n",
            dir.path().join("out"),
            feds[..4].join(", "),
            feds[4..].join(", "),
            gen_dir,
        ),
    )
    .unwrap();
    let summary: Value = serde_json::from_str(&swdaq(
        &["run", "--config", "evb.toml", "--json"],
        dir.path(),
    ))
    .unwrap();

    // What each FED sent, by event: its file's records in order, skipping missing ones.
    let faults = truth(&gen_dir);
    let mut sent: BTreeMap<(u64, u16), Vec<u8>> = BTreeMap::new();
    for fed in 0..8u16 {
        let file = std::fs::File::open(gen_dir.join(format!("fed{fed}.swraw"))).unwrap();
        let mut reader = RawFileReader::new(file).unwrap();
        let mut record = Vec::new();
        for event in 1..=EVENTS {
            let kind = faults.get(&(event, fed)).map(String::as_str);
            if matches!(kind, Some("missing" | "stopped")) {
                continue;
            }
            assert!(reader.next_frame(&mut record).unwrap());
            if kind.is_none() {
                sent.insert((event, fed), record.clone());
            }
        }
    }

    // Every event once, in closed files that `swdaq inspect` reads without error; its FED
    // fragments exactly the good records.
    let mut seen = BTreeMap::new();
    for bu in ["bu0", "bu1"] {
        for entry in std::fs::read_dir(dir.path().join("out").join(bu)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "raw") {
                continue;
            }
            let report: Value = serde_json::from_str(&swdaq(
                &["inspect", "--json", path.to_str().unwrap()],
                dir.path(),
            ))
            .unwrap();
            assert_eq!(report["error"], Value::Null, "{}", path.display());
            assert_eq!(report["bad_event_crc"], 0);
            for e in report["events"].as_array().unwrap() {
                *seen.entry(e["event"].as_u64().unwrap()).or_insert(0) += 1;
            }
            let bytes = std::fs::read(&path).unwrap();
            for event in FrdFile::parse(&bytes).unwrap().events() {
                let event = event.unwrap();
                let number = u64::from(event.header.event);
                let mut rest = event.payload;
                let mut fragments = Vec::new();
                while !rest.is_empty() {
                    let (fragment, before) = FedFragment::parse_last(rest).unwrap();
                    fragments.push((fragment.header.source_id, &rest[before.len()..]));
                    rest = before;
                }
                fragments.reverse();
                let expected: Vec<(u16, &[u8])> = sent
                    .range((number, 0)..(number + 1, 0))
                    .map(|(&(_, fed), bytes)| (fed, bytes.as_slice()))
                    .collect();
                assert_eq!(fragments, expected, "event {number}");
            }
        }
    }
    assert_eq!(seen.len() as u64, EVENTS);
    assert!(
        seen.iter()
            .all(|(&e, &n)| n == 1 && (1..=EVENTS).contains(&e))
    );

    // Per FED, each failure counter is the truth's count of its kind.
    let kind_counter = [
        ("missing", "missing"),
        ("stopped", "missing"),
        ("wrong_l1_id", "wrong_l1_id"),
        ("bad_crc", "bad_crc"),
        ("bad_length", "bad_length"),
    ];
    for fed in summary["feds"].as_array().unwrap() {
        let id = fed["fed"].as_u64().unwrap() as u16;
        let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
        for ((_, f), kind) in &faults {
            if *f == id {
                let counter = kind_counter.iter().find(|(k, _)| k == kind).unwrap().1;
                *expected.entry(counter).or_default() += 1;
            }
        }
        for (name, count) in fed["failures"].as_object().unwrap() {
            let want = expected.get(name.as_str()).copied().unwrap_or(0);
            assert_eq!(count.as_u64().unwrap(), want, "FED {id} {name}");
        }
        let good = EVENTS - expected.values().sum::<u64>();
        assert_eq!(fed["good"].as_u64().unwrap(), good, "FED {id}");
    }
    assert_eq!(summary["built"].as_u64().unwrap(), EVENTS);
    assert_eq!(summary["lost"].as_u64().unwrap(), 0);
}
