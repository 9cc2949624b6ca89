//! A detector swdaq has never seen, built by event number (#35): three triggered boards
//! (`examples/plugins/triggered_board.c`'s packets: a 20-byte header with board id and
//! trigger number, then samples) send over UDP to `swdaq run` of an `[evb]` configuration
//! whose `[evb.input.decoder]` is the board's C plugin, built here with the machine's gcc, or
//! the same packets described as a no-code packet format; boards 0 and 1 are one readout
//! unit, board 2 another; in one process, as applications and under `swdaq serve`. Board 2 never sends trigger 50,
//! and garbage reaches board 1's port once.
//!
//! Checked against what was sent: every trigger built once, each board's FED fragment
//! carrying exactly its packet (the detector payload words read here from the FED fragment,
//! independently of swdaq's reader), event 50 flagged incomplete in the file, counted in the
//! summary and listed by `swdaq inspect`; the garbage counted as board 1's decode error and
//! nothing else lost. A datagram the kernel dropped is allowed only as counted.

mod common;
use common::served::Served;
#[path = "../../swdaq-plugin/tests/common/mod.rs"]
mod plugins;

use plugins::{
    BOARD_FORMAT, BOARD_SOURCE, FAULTY_SOURCE, assert_refused_naming, board_packet, build_c_plugin,
    build_panicky,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use swdaq_format::fed::FedFragment;
use swdaq_format::frd::{FrdFile, frd_flags};

const BOARDS: u16 = 3;
const TRIGGERS: u32 = 300;
/// The trigger board 2 never sends.
const SKIPPED: u32 = 50;

/// Board `board`'s packet for `trigger`: its samples differ per board and trigger.
fn packet(board: u16, trigger: u32) -> Vec<u8> {
    let samples: Vec<u16> = (0..(4 + trigger % 13) as u16)
        .map(|i| i.wrapping_mul(97) ^ board ^ trigger as u16)
        .collect();
    board_packet(
        board,
        trigger,
        u64::from(trigger) * 1000 + u64::from(board),
        &samples,
    )
}

/// The detector payload of a FED fragment, read from the layout the event builder's
/// `fed_detector` module documents: the header's "more headers" bit, then an extension word
/// (BOE, type 0xD, length in bytes at bits 32..56, version 1 at bits 4..8) and the timestamp.
fn detector_bytes(fragment: &[u8]) -> (Vec<u8>, u64) {
    let word = |i: usize| u64::from_le_bytes(fragment[8 * i..8 * i + 8].try_into().unwrap());
    assert_eq!(
        word(0) >> 3 & 1,
        1,
        "the FED header says more headers follow"
    );
    let extension = word(1);
    assert_eq!(extension >> 56, 0x5D, "BOE and the detector-payload type");
    assert_eq!(extension >> 4 & 0xF, 1, "version");
    let length = (extension >> 32 & 0xFF_FFFF) as usize;
    (fragment[24..24 + length].to_vec(), word(2))
}

/// The run's FRD files, of every builder unit (`bu0` in one process, `bu-0` as applications).
fn frd_files(out: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for unit in std::fs::read_dir(out).unwrap() {
        let run = unit.unwrap().path().join("run000001");
        for entry in std::fs::read_dir(run).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "raw") {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty(), "no FRD file under {}", out.display());
    files
}

/// Every event of `files`: number, incomplete flag, FED id -> fragment bytes.
fn built_events(files: &[PathBuf]) -> BTreeMap<u64, (bool, BTreeMap<u16, Vec<u8>>)> {
    let mut built = BTreeMap::new();
    for path in files {
        let bytes = std::fs::read(path).unwrap();
        for event in FrdFile::parse(&bytes).unwrap().events() {
            let event = event.unwrap();
            assert!(event.crc_ok());
            let mut fragments = BTreeMap::new();
            let mut rest = event.payload;
            while !rest.is_empty() {
                let (fragment, before) = FedFragment::parse_last(rest).unwrap();
                assert!(fragment.crc_ok());
                fragments.insert(fragment.header.source_id, fragment.bytes.to_vec());
                rest = before;
            }
            let incomplete = event.header.flags & frd_flags::INCOMPLETE != 0;
            let number = u64::from(event.header.event);
            assert!(built.insert(number, (incomplete, fragments)).is_none());
        }
    }
    built
}

/// How the run is driven.
enum How {
    /// `swdaq run`, ended by `max_events`.
    OneProcess,
    /// `swdaq run` of the boards' applications ([`boards_topology`]), ended by `duration_s`.
    Applications,
    /// `swdaq serve` and `swdaq ctl`: configure, start, stop once every packet is sent.
    Served,
}

/// The boards as applications on loopback: boards 0 and 1 read by the event manager (readout
/// unit 0, as in CMS), board 2 by `ru-1`, one builder unit `bu-0`.
fn boards_topology() -> String {
    let apps = common::loopback_topology_apps(&[
        ("evm", "evm", ""),
        ("ru-1", "ru", ""),
        ("bu-0", "bu", ""),
    ]);
    format!("[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 2000\nsend_timeout_ms = 500\n{apps}")
}

/// The boards' packets, board 2 skipping `SKIPPED` and garbage once on board 1's port.
fn send_packets(port: u16) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for trigger in 1..=TRIGGERS {
        for board in 0..BOARDS {
            if board == 2 && trigger == SKIPPED {
                continue;
            }
            if board == 1 && trigger == 100 {
                socket
                    .send_to(&[0x5A; 40], ("127.0.0.1", port + 1))
                    .unwrap();
            }
            socket
                .send_to(&packet(board, trigger), ("127.0.0.1", port + board))
                .unwrap();
        }
        // A modest rate (about 3 k datagrams/s) that a shared machine keeps up with.
        if trigger % 10 == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `swdaq run --json` of `config` while the boards send; its summary.
fn run_while_sending(config: &Path, port: u16) -> Value {
    let run = common::spawn_run(config);
    common::wait_for_udp_ports(port, BOARDS);
    send_packets(port);
    common::summary_of(run)
}

/// `swdaq serve` of `config`, run 1 started and stopped by `swdaq ctl` around the boards'
/// packets; the stop's summary.
fn serve_while_sending(config: &Path, port: u16) -> Value {
    let server = Served::start(config);
    let ctl = |command: &str| server.ctl(&[command]);
    ctl("configure");
    assert_eq!(ctl("start")["run_number"], 1);
    common::wait_for_udp_ports(port, BOARDS);
    send_packets(port);
    // Every packet is in the sockets: a moment for the builder, then the operator's stop.
    std::thread::sleep(Duration::from_millis(500));
    ctl("stop")
}

/// Runs the boards against a decoder section as `how` says and checks the run event by
/// event.
fn boards_build_by_trigger_number(decoder: &str, how: How) {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_boards(dir.path(), decoder, how, "");
    check_built(dir.path(), &summary);
}

/// Runs the boards into `dir/out` against a decoder section as `how` says, with `extra`
/// lines in the configuration (a farm); the run's summary.
fn run_boards(dir: &Path, decoder: &str, how: How, extra: &str) -> Value {
    let port = common::free_udp_ports(BOARDS);
    let feds: Vec<String> = (0..BOARDS)
        .map(|id| format!("{{ id = {id}, mean_bytes = 64, spread_bytes = 0 }}"))
        .collect();
    // In one process `duration_s` only bounds a broken run, `max_events` ends a good one;
    // applications stop at `duration_s`, a served run when the operator stops it.
    let (duration_s, max_events, topology) = match how {
        How::OneProcess => (20, format!("max_events = {TRIGGERS}\n"), String::new()),
        How::Applications => (5, String::new(), boards_topology()),
        How::Served => (0, String::new(), String::new()),
    };
    let config = dir.join("boards.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [evb]\nbuilder_units = 1\nevents_per_file = 64\n{max_events}\
             min_free_bytes = 0\nrus = [[{}], [{}]]\n\
             [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{port}\"\nstop_wait = 100\n\
             [evb.input.decoder]\n{decoder}\n{extra}\n{topology}",
            dir.join("out"),
            feds[..2].join(", "),
            feds[2],
        ),
    )
    .unwrap();
    match how {
        How::Served => serve_while_sending(&config, port),
        _ => run_while_sending(&config, port),
    }
}

/// Every trigger built once in `dir/out`'s files with each board's packet, the skipped one
/// flagged incomplete, as the summary, the counters and `swdaq inspect` say.
fn check_built(dir: &Path, summary: &Value) {
    let mut dropped = 0;
    for fed in summary["feds"].as_array().unwrap() {
        let id = fed["fed"].as_u64().unwrap();
        let ingest = &fed["ingest"];
        dropped += ingest["kernel_dropped"].as_u64().unwrap();
        let decode_errors = ingest["decode_errors"].as_u64().unwrap();
        if id == 1 {
            assert!((1..=2).contains(&decode_errors), "FED 1: {ingest}");
        } else {
            assert_eq!(decode_errors, 0, "FED {id}: {ingest}");
        }
        let missing = fed["failures"]["missing"].as_u64().unwrap();
        assert_eq!(
            missing,
            u64::from(id == 2) + ingest["kernel_dropped"].as_u64().unwrap()
        );
    }

    let built = built_events(&frd_files(&dir.join("out")));
    assert!(built.keys().copied().eq(1..=u64::from(TRIGGERS)));
    let mut lacking = 0;
    for (&number, (incomplete, fragments)) in &built {
        let trigger = number as u32;
        for board in 0..BOARDS {
            match fragments.get(&board) {
                Some(bytes) => {
                    let (payload, timestamp) = detector_bytes(bytes);
                    assert_eq!(
                        payload,
                        packet(board, trigger),
                        "event {number} board {board}"
                    );
                    assert_eq!(timestamp, u64::from(trigger) * 1000 + u64::from(board));
                }
                None => assert!(
                    (board == 2 && trigger == SKIPPED) || dropped > 0,
                    "event {number} lacks board {board}"
                ),
            }
        }
        assert_eq!(
            *incomplete,
            fragments.len() < BOARDS as usize,
            "event {number}"
        );
        lacking += u64::from(*incomplete);
    }
    assert!(
        built[&u64::from(SKIPPED)].0,
        "event {SKIPPED} is flagged incomplete"
    );
    assert_eq!(
        summary["incomplete"].as_u64().unwrap(),
        lacking,
        "{summary}"
    );
    assert_eq!(summary["built"].as_u64().unwrap(), u64::from(TRIGGERS));
    assert_eq!(summary["lost"].as_u64().unwrap(), 0);

    // `swdaq inspect` lists the incomplete event and reads every detector payload.
    let mut listed = 0;
    let mut inspected_skipped = false;
    for path in frd_files(&dir.join("out")) {
        let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["inspect", "--json", "--record", &SKIPPED.to_string()])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["problems"],
            serde_json::json!([]),
            "{}",
            path.display()
        );
        listed += report["incomplete"].as_u64().unwrap();
        // The event asked for: its boards' payloads as the extension words say.
        for event in report["events"].as_array().unwrap() {
            if event["event"] != SKIPPED {
                continue;
            }
            let feds = event["feds"].as_array().unwrap();
            assert_eq!(feds.len(), 2, "{event}");
            for fed in feds {
                let board = fed["source_id"].as_u64().unwrap() as u16;
                let detector = &fed["detector"];
                assert_eq!(
                    detector["payload_bytes"].as_u64().unwrap() as usize,
                    packet(board, SKIPPED).len()
                );
                let timestamp = u64::from(SKIPPED) * 1000 + u64::from(board);
                assert_eq!(detector["timestamp"].as_u64(), Some(timestamp));
            }
            inspected_skipped = true;
        }
    }
    assert_eq!(listed, lacking);
    assert!(
        inspected_skipped,
        "swdaq inspect --record {SKIPPED} found it"
    );
}

#[test]
fn triggered_boards_through_the_c_plugin_build_by_trigger_number() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    boards_build_by_trigger_number(&format!("plugin = {:?}", plugin), How::OneProcess);
}

#[test]
fn triggered_boards_through_a_packet_format_build_by_trigger_number() {
    boards_build_by_trigger_number(
        &format!("[evb.input.decoder.format]\n{BOARD_FORMAT}"),
        How::OneProcess,
    );
}

/// The same boards read by applications: boards 0 and 1 by the event manager (readout unit
/// 0, as in CMS), board 2 by `ru-1`; the plugin is loaded in each process that reads FEDs.
#[test]
fn triggered_boards_through_the_c_plugin_as_applications() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    boards_build_by_trigger_number(&format!("plugin = {:?}", plugin), How::Applications);
}

/// The same boards in a run that `swdaq serve` runs and `swdaq ctl` starts and stops.
#[test]
fn triggered_boards_through_the_c_plugin_under_swdaq_serve() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    boards_build_by_trigger_number(&format!("plugin = {:?}", plugin), How::Served);
}

/// Whether the triggered board's `filter_events` accepts `trigger`: a sample of some board's
/// packet reaches 1000 (then into stream 1).
fn accepted(trigger: u32) -> bool {
    (0..BOARDS)
        .filter(|&board| board != 2 || trigger != SKIPPED)
        .any(|board| {
            packet(board, trigger)[20..]
                .chunks_exact(2)
                .any(|s| u16::from_be_bytes([s[0], s[1]]) >= 1000)
        })
}

/// The plugin's per-event filter where the filter farm sits: the farm verifies each file,
/// the plugin decides each event, the accepted ones are written into stream 1's files with
/// their boards' packets, the rejected ones are counted and written nowhere, and the
/// builder units' files are deleted once filtered.
#[test]
fn the_plugins_event_filter_in_the_farm_keeps_exactly_the_accepted_events() {
    filter_in_the_farm(How::OneProcess, "bu0");
}

/// The same filter in the farm of a builder unit application.
#[test]
fn the_plugins_event_filter_in_a_builder_unit_applications_farm() {
    filter_in_the_farm(How::Applications, "bu-0");
}

/// The same filter in a run that `swdaq serve` runs.
#[test]
fn the_plugins_event_filter_under_swdaq_serve() {
    filter_in_the_farm(How::Served, "bu0");
}

/// Runs the boards with the triggered board's filter in the farm (builder unit `bu`'s
/// directory) and checks the stream files against the filter's rule.
fn filter_in_the_farm(how: How, bu: &str) {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    let farm = format!("[evb.farm]\nconsumers = 1\n[evb.farm.filter]\nplugin = {plugin:?}\n");
    let summary = run_boards(dir.path(), &format!("plugin = {plugin:?}"), how, &farm);
    let expected: Vec<u64> = (1..=TRIGGERS)
        .filter(|&t| accepted(t))
        .map(u64::from)
        .collect();
    assert!(!expected.is_empty() && expected.len() < TRIGGERS as usize);
    let filter = &summary["farm"]["filter"];
    assert_eq!(filter["accepted"], expected.len() as u64, "{summary}");
    assert_eq!(
        filter["rejected"],
        u64::from(TRIGGERS) - expected.len() as u64
    );
    assert_eq!(filter["unfiltered"], 0);
    assert_eq!(summary["farm"]["errors"], serde_json::json!([]));

    let run = dir.path().join("out").join(bu).join("run000001");
    let left: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".raw"))
        .collect();
    assert!(
        left.is_empty(),
        "the farm leaves no builder-unit file: {left:?}"
    );
    let streams: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("stream"))
        .collect();
    assert_eq!(streams, ["stream1"]);
    let stream_files: Vec<PathBuf> = std::fs::read_dir(run.join("stream1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        stream_files
            .iter()
            .all(|p| p.extension().is_some_and(|e| e == "raw"))
    );
    let kept = built_events(&stream_files);
    assert!(kept.keys().copied().eq(expected.iter().copied()));
    for (&number, (_, fragments)) in &kept {
        for (&board, bytes) in fragments {
            let (payload, _) = detector_bytes(bytes);
            assert_eq!(payload, packet(board, number as u32), "event {number}");
        }
    }
}

/// A decoder plugin that breaks the ABI on every call (status 7) loses nothing but its own
/// datagrams: each is counted against its FED, the first named in one stderr line per FED,
/// no event is made of them, and the run ends at its duration without a panic.
#[test]
fn a_decoder_breaking_the_abi_is_counted_per_fed_and_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), FAULTY_SOURCE, "faulty", &["FAULT=FAULT_STATUS"]);
    let port = common::free_udp_ports(BOARDS);
    let feds: Vec<String> = (0..BOARDS)
        .map(|id| format!("{{ id = {id}, mean_bytes = 64, spread_bytes = 0 }}"))
        .collect();
    let config = dir.path().join("faulty.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = 1.5\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [evb]\nbuilder_units = 1\nmin_free_bytes = 0\nrus = [[{}]]\n\
             [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{port}\"\n\
             [evb.input.decoder]\nplugin = {plugin:?}\n",
            dir.path().join("out"),
            feds.join(", "),
        ),
    )
    .unwrap();
    let run = common::spawn_run(&config);
    common::wait_for_udp_ports(port, BOARDS);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    const RECORDS: u32 = 20;
    for event in 1..=RECORDS {
        for board in 0..BOARDS {
            // The faulty plugin's records: source id, event number (u32 little-endian).
            let record = [u32::from(board).to_le_bytes(), event.to_le_bytes()].concat();
            socket
                .send_to(&record, ("127.0.0.1", port + board))
                .unwrap();
        }
    }
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    for fed in summary["feds"].as_array().unwrap() {
        let ingest = &fed["ingest"];
        let counted =
            ingest["decode_errors"].as_u64().unwrap() + ingest["kernel_dropped"].as_u64().unwrap();
        assert_eq!(counted, u64::from(RECORDS), "{fed}");
        let named = format!("evb: FED {}: decoder: ", fed["fed"]);
        assert_eq!(stderr.matches(&named).count(), 1, "{stderr}");
    }
    assert!(stderr.contains("unknown status 7"), "{stderr}");
    assert_eq!(summary["built"], 0, "{summary}");
}

/// A Rust plugin that panics, end to end: `examples/plugins/rust-panicky` (built by cargo)
/// decodes two boards' records (source id, event number); one datagram of board 1 carries the
/// record that makes it panic. The panic comes back as one counted decode error of FED 1, named
/// once on stderr with the plugin's message; that event is built without FED 1 and flagged
/// incomplete, every other event is whole, and swdaq neither panics nor stops.
#[test]
fn a_rust_decoder_s_panic_costs_only_its_datagram() {
    let Some(plugin) = build_panicky() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_ports(2);
    const EVENTS: u32 = 30;
    const PANICS_AT: u32 = 10;
    let config = dir.path().join("panicky.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = 20\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [evb]\nbuilder_units = 1\nmin_free_bytes = 0\nmax_events = {EVENTS}\n\
             rus = [[{{ id = 0, mean_bytes = 64, spread_bytes = 0 }}, {{ id = 1, mean_bytes = 64, spread_bytes = 0 }}]]\n\
             [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{port}\"\nstop_wait = 100\nfirst_event = 1\n\
             [evb.input.decoder]\nplugin = {plugin:?}\n",
            dir.path().join("out"),
        ),
    )
    .unwrap();
    let run = common::spawn_run(&config);
    common::wait_for_udp_ports(port, 2);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for event in 1..=EVENTS {
        for board in 0..2u16 {
            let source = if (board, event) == (1, PANICS_AT) {
                0xDEAD_BEEF // the record the plugin panics on
            } else {
                u32::from(board)
            };
            let record = [source.to_le_bytes(), event.to_le_bytes()].concat();
            socket
                .send_to(&record, ("127.0.0.1", port + board))
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let feds = summary["feds"].as_array().unwrap();
    let dropped: u64 = feds
        .iter()
        .map(|f| f["ingest"]["kernel_dropped"].as_u64().unwrap())
        .sum();
    assert_eq!(feds[0]["ingest"]["decode_errors"], 0, "{summary}");
    assert_eq!(feds[1]["ingest"]["decode_errors"], 1, "{summary}");
    assert_eq!(
        stderr.matches("evb: FED 1: decoder: ").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("rust_panicky"), "{stderr}");
    assert!(stderr.contains("marked record"), "{stderr}");
    let built = built_events(&frd_files(&dir.path().join("out")));
    assert_eq!(built.len() as u32, EVENTS, "every event built once");
    for (event, (incomplete, fragments)) in &built {
        let whole = *event != u64::from(PANICS_AT);
        if dropped == 0 {
            assert_eq!(!incomplete, whole, "event {event}");
            assert_eq!(fragments.len(), if whole { 2 } else { 1 }, "event {event}");
        }
    }
    assert!(
        built[&u64::from(PANICS_AT)].0,
        "the panic's event is incomplete"
    );
}

/// A decoder that cannot be made stops the run at configure, in one line naming the file and
/// why: a missing file, a library that is not a plugin, another ABI version, a `create` that
/// fails, a plugin without `decode`.
#[test]
fn a_decoder_plugin_that_cannot_be_made_is_refused_at_configure() {
    let dir = tempfile::tempdir().unwrap();
    let build =
        |name: &str, source: &str, fault: &[&str]| build_c_plugin(dir.path(), source, name, fault);
    let cases = [
        (dir.path().join("libnowhere.so"), "no such file"),
        (
            build(
                "no_entry",
                "crates/swdaq-plugin/tests/plugins/no_entry.c",
                &[],
            ),
            "not a swdaq plugin",
        ),
        (
            build("abi99", FAULTY_SOURCE, &["FAULT=FAULT_ABI"]),
            "ABI version mismatch",
        ),
        (
            build("no_create", FAULTY_SOURCE, &["FAULT=FAULT_CREATE"]),
            "create failed",
        ),
    ];
    for (plugin, why) in &cases {
        let config = dir.path().join("boards.toml");
        std::fs::write(
            &config,
            format!(
                "[run]\nduration_s = 5\nmetrics_addr = \"\"\noutput_dir = {:?}\n[evb]\n\
                 [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:9\"\n\
                 [evb.input.decoder]\nplugin = {plugin:?}\n",
                dir.path().join("out"),
            ),
        )
        .unwrap();
        let out = common::swdaq_run(&config);
        assert_refused_naming(&out, plugin, "evb.input.decoder", why);
        assert!(!dir.path().join("out").exists(), "nothing written");
    }
}

/// `swdaq bench plugin`: both paths decode every event's FEDs (the bench refuses to time them
/// unless they agree) and the ratio of their rates is reported.
#[test]
fn bench_plugin_times_both_paths_and_reports_their_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(
        dir.path(),
        "examples/plugins/fed_decoder.c",
        "fed_decoder",
        &[],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args([
            "bench", "--json", "plugin", "--events", "3000", "--feds", "4", "--plugin",
        ])
        .arg(&plugin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = result["rows"].as_array().unwrap();
    let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["built-in", "fed_decoder"]);
    for row in rows {
        assert_eq!(row["fragments"], 3000 * 4, "{row}");
        assert!(row["events_per_core_second"].as_f64().unwrap() > 0.0);
    }
    let ratio = result["plugin_over_built_in"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{result}");
}
