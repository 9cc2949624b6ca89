//! The event builder fed over UDP end to end, through the binary, on 127.0.0.1: `swdaq run`
//! of an `[evb]` configuration with `[evb.input] kind = "udp"` and `max_events`, while
//! `swdaq gen --format fed --udp` sends every FED's fragments (one datagram each, every fault
//! kind on) at a modest trigger rate; then `swdaq inspect --json` of every FRD file. Every
//! event sent is built once, each FED fragment in it is byte for byte what the FED sent
//! (the same generator's raw files: same configuration, same truth), and per FED the
//! failure counts are the sender's truth.
//!
//! A datagram the kernel dropped (the socket's receive buffer was full: the machine is
//! shared) is allowed only as counted: the FED's `kernel_dropped` (the socket's own drop
//! count) must account for every fragment missing beyond the truth, so a fragment lost in
//! the event builder itself fails the test.

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
/// Level-1 accepts per second the sender is paced at: 16 k datagrams/s in all.
const RATE_HZ: f64 = 2000.0;

#[test]
fn fed_fragments_over_udp_build_into_frd_files_with_every_fault_counted_once() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let feds = fed_specs(512);
    let seconds = write_generator_config(dir.path(), &feds, RATE_HZ, EVENTS);
    // The same FEDs to raw files: what each FED sends, record by record.
    generate(dir.path(), &seconds, &["--out", "files"]);

    let port = common::free_udp_ports(FEDS);
    // `duration_s` only bounds a broken run; `max_events` ends a good one.
    std::fs::write(
        dir.path().join("evb.toml"),
        format!(
            "duration_s = 15\nmetrics_addr = \"\"\n[evb]\nbuilder_units = 2\nevents_per_file = 100\n\
             max_events = {EVENTS}\nmin_free_bytes = 0\noutput = {:?}\n{}\n\
             [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{port}\"\nstop_wait = 100\n",
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
    common::wait_for_udp_ports(port, FEDS);
    generate(
        dir.path(),
        &seconds,
        &["--udp", &format!("127.0.0.1:{port}"), "--out", "sent"],
    );
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "swdaq run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The sender's truth is the files' truth: the same fragments went over UDP.
    let faults = truth(&dir.path().join("sent"));
    assert_eq!(faults, truth(&dir.path().join("files")));
    let sent = good_fragments(&dir.path().join("files"), &faults, EVENTS);

    // Every event once; each fragment in it exactly a good one sent. A good fragment absent
    // can only be one the kernel dropped (checked against its count below).
    let built = built_events(dir.path(), &dir.path().join("out"));
    assert!(built.keys().copied().eq(1..=EVENTS), "events built");
    let mut good_absent = [0u64; FEDS as usize];
    for (&number, fragments) in &built {
        let fragments: BTreeMap<u16, &Vec<u8>> = fragments.iter().map(|(f, b)| (*f, b)).collect();
        for fed in 0..FEDS {
            match (sent.get(&(number, fed)), fragments.get(&fed)) {
                (Some(sent), Some(&built)) => {
                    assert!(sent == built, "event {number} FED {fed}: bytes differ")
                }
                (Some(_), None) => good_absent[fed as usize] += 1,
                (None, Some(_)) => panic!("event {number} FED {fed}: not a good fragment"),
                (None, None) => {}
            }
        }
    }

    // Per FED: the failures are the truth's, plus the kernel's drops counted missing.
    let mut dropped_total = 0;
    for fed in summary["feds"].as_array().unwrap() {
        let id = fed["fed"].as_u64().unwrap() as u16;
        let dropped = fed["ingest"]["kernel_dropped"].as_u64().unwrap();
        dropped_total += dropped;
        let expected = expected_failures(&faults, id);
        let failed = |name: &str| fed["failures"][name].as_u64().unwrap();
        let want = |name: &str| expected.get(name).copied().unwrap_or(0);
        assert_eq!(
            failed("missing"),
            want("missing") + dropped,
            "FED {id} missing"
        );
        // A dropped fragment was good or carried a fault: its fault then shows as missing.
        let mut faulty_dropped = 0;
        for name in ["wrong_l1_id", "bad_crc", "bad_length"] {
            assert!(failed(name) <= want(name), "FED {id} {name}");
            faulty_dropped += want(name) - failed(name);
        }
        assert_eq!(
            failed("malformed") + failed("wrong_source_id"),
            0,
            "FED {id}"
        );
        assert_eq!(
            good_absent[id as usize] + faulty_dropped,
            dropped,
            "FED {id}: fragments missing that the kernel did not drop"
        );
        let good = EVENTS - expected.values().sum::<u64>() - good_absent[id as usize];
        assert_eq!(fed["good"].as_u64().unwrap(), good, "FED {id}");
        assert_eq!(fed["ingest"]["oversized"], 0);
    }
    if dropped_total > 0 {
        eprintln!(
            "the kernel dropped {dropped_total} datagrams (counted, each a missing fragment)"
        );
    }
    assert_eq!(summary["built"].as_u64().unwrap(), EVENTS);
    // An event lacking a FED (a fault, or a datagram the kernel dropped) is incomplete.
    let lacking = built.values().filter(|f| f.len() < FEDS as usize).count();
    assert_eq!(summary["incomplete"].as_u64().unwrap(), lacking as u64);
    assert_eq!(summary["lost"].as_u64().unwrap(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
