//! The event builder fed by FEROL streams over TCP end to end, through the binary, on
//! 127.0.0.1: `swdaq run` of an `[evb]` configuration with `[evb.input] kind = "tcp"` (two
//! FEDs per stream, four streams) and `max_events`, while `swdaq gen --format fed --tcp`
//! connects as the FEROLs and sends every FED's fragments in FEROL blocks (fragments of
//! about 6 KB: two blocks each), every FED fault kind on and FEROL header corruptions
//! injected; then `swdaq inspect --json` of every FRD file. Every event sent is built once,
//! each FED fragment in it is byte for byte what the FED sent (the same generator's raw
//! files: same configuration, same truth), a fragment whose FEROL header was corrupted is
//! missing, and per FED every corruption is counted once by kind, as the sender's truth says.
//! TCP loses nothing: no other fragment may be missing.

mod common;
#[path = "common/fed_streams.rs"]
mod fed_streams;
use fed_streams::{
    FEDS, built_events, expected_failures, fed_specs, generate, good_fragments, truth,
    two_readout_units, write_generator_config,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EVENTS: u64 = 1000;
const RATE_HZ: f64 = 2000.0;

/// (FED, kind) -> count.
type PerFedKind = BTreeMap<(u16, String), u64>;

/// (FED, kind) -> count, from the sender's `ferol_faults.csv`; and (event, FED) of each.
fn ferol_truth(dir: &std::path::Path) -> (PerFedKind, Vec<(u64, u16)>) {
    let text = std::fs::read_to_string(dir.join("ferol_faults.csv")).unwrap();
    let mut counts = BTreeMap::new();
    let mut fragments = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (event, fed): (u64, u16) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        *counts.entry((fed, f[2].to_owned())).or_default() += 1;
        fragments.push((event, fed));
    }
    (counts, fragments)
}

#[test]
fn ferol_streams_over_tcp_build_into_frd_files_with_every_corruption_counted_once() {
    ferol_streams_build_every_event_once("");
}

/// The same streams read by the readout units of a topology: each `evm`/`ru` application
/// listens on its own FEDs' streams.
#[test]
fn ferol_streams_over_tcp_build_the_same_as_applications() {
    let apps = common::loopback_topology_apps(&[
        ("evm", "evm", ""),
        ("ru1", "ru", ""),
        ("bu0", "bu", ""),
        ("bu1", "bu", ""),
    ]);
    ferol_streams_build_every_event_once(&apps);
}

/// Runs the event builder (with `topology`'s applications, if any) on FEROL streams sent by
/// `swdaq gen` with corruptions, and checks every event, fragment and counter against the
/// sender's truth.
fn ferol_streams_build_every_event_once(topology: &str) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let feds = fed_specs(6000);
    let seconds = write_generator_config(dir.path(), &feds, RATE_HZ, EVENTS);
    generate(dir.path(), &seconds, &["--out", "files"]);

    // Four listening ports, free when asked (the run binds them; the sender retries).
    let port = common::free_tcp_ports(4);
    std::fs::write(
        dir.path().join("evb.toml"),
        format!(
            "duration_s = 15\nmetrics_addr = \"\"\n[evb]\nbuilder_units = 2\nevents_per_file = 100\n\
             max_events = {EVENTS}\nmin_free_bytes = 0\noutput = {:?}\n{}\n\
             [evb.input]\nkind = \"tcp\"\ntcp_address = \"127.0.0.1:{port}\"\nfeds_per_stream = 2\n\
             stop_wait = 100\n{topology}",
            dir.path().join("out"),
            two_readout_units(&feds),
        ),
    )
    .unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--config", "evb.toml", "--json"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    generate(
        dir.path(),
        &seconds,
        &[
            "--tcp",
            &format!("127.0.0.1:{port}"),
            "--feds-per-stream",
            "2",
            "--ferol-faults",
            "0.004",
            "--out",
            "sent",
        ],
    );
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "swdaq run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();

    let faults = truth(&dir.path().join("sent"));
    assert_eq!(faults, truth(&dir.path().join("files")));
    let (ferol, corrupted) = ferol_truth(&dir.path().join("sent"));
    assert!(corrupted.len() >= 10, "{} FEROL faults", corrupted.len());
    let sent = good_fragments(&dir.path().join("files"), &faults, EVENTS);

    let built = built_events(dir.path(), &dir.path().join("out"));
    assert!(built.keys().copied().eq(1..=EVENTS), "events built");
    for (&number, fragments) in &built {
        let fragments: BTreeMap<u16, &Vec<u8>> = fragments.iter().map(|(f, b)| (*f, b)).collect();
        for fed in 0..FEDS {
            let lost = corrupted.contains(&(number, fed));
            match (sent.get(&(number, fed)), fragments.get(&fed)) {
                (Some(_), Some(_)) if lost => panic!("event {number} FED {fed}: corrupt, built"),
                (Some(sent), Some(&built)) => {
                    assert!(sent == built, "event {number} FED {fed}: bytes differ")
                }
                (Some(_), None) => assert!(lost, "event {number} FED {fed}: lost"),
                (None, Some(_)) => panic!("event {number} FED {fed}: not a good fragment"),
                (None, None) => {}
            }
        }
    }

    for fed in summary["feds"].as_array().unwrap() {
        let id = fed["fed"].as_u64().unwrap() as u16;
        let expected = expected_failures(&faults, id);
        let failed = |name: &str| fed["failures"][name].as_u64().unwrap();
        let want = |name: &str| expected.get(name).copied().unwrap_or(0);
        let stream = &fed["ingest"]["stream"];
        let mut lost = 0;
        for kind in [
            "signature",
            "fed_id",
            "event_number",
            "packet_order",
            "length",
        ] {
            let truth = ferol.get(&(id, kind.to_owned())).copied().unwrap_or(0);
            assert_eq!(stream[kind].as_u64().unwrap(), truth, "FED {id} {kind}");
            lost += truth;
        }
        assert_eq!(
            failed("missing"),
            want("missing") + lost,
            "FED {id} missing"
        );
        for name in ["wrong_l1_id", "bad_crc", "bad_length"] {
            assert_eq!(failed(name), want(name), "FED {id} {name}");
        }
        assert_eq!(
            failed("malformed") + failed("wrong_source_id"),
            0,
            "FED {id}"
        );
        let good = EVENTS - expected.values().sum::<u64>() - lost;
        assert_eq!(fed["good"].as_u64().unwrap(), good, "FED {id}");
        assert_eq!(stream["connections"], 1, "FED {id}");
        assert_eq!(stream["cut"], 0, "FED {id}");
        assert_eq!(stream["stalled"], 0, "FED {id}");
        assert_eq!(fed["ingest"]["oversized"], 0);
    }
    assert_eq!(summary["built"].as_u64().unwrap(), EVENTS);
    let lacking = built.values().filter(|f| f.len() < FEDS as usize).count();
    assert_eq!(summary["incomplete"].as_u64().unwrap(), lacking as u64);
    assert_eq!(summary["lost"].as_u64().unwrap(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
