//! The SW ROD's aggregation plugin (#35, `[swrod.aggregator]`) end to end from the binary:
//! the triggered board's `aggregate` (`examples/plugins/triggered_board.c`: per chunk in
//! e-link order, link u32 and length u32 big-endian, then its bytes) builds every ROB
//! fragment's payload, in one process, as applications and under `swdaq serve`, checked event by event against
//! the emulator's chunks replayed here; a plugin that breaks the ABI on every L1 ID is counted
//! per ROB while every event is still stored, its chunks in swdaq's records, flagged; and a
//! missing file, a library that is not a plugin and a plugin without `aggregate` are refused
//! at configure in one line, before anything runs.

mod common;
#[allow(dead_code)]
#[path = "common/launched.rs"]
mod launched;
// The plugin crate's own test helper builds C plugins with the machine's compiler; its repo
// root (two levels above the test's crate) is this crate's too.
#[path = "../../swdaq-plugin/tests/common/mod.rs"]
mod plugins;
#[path = "common/summary.rs"]
mod summary;
#[allow(dead_code)]
#[path = "common/swrod.rs"]
mod swrod;
#[path = "common/swrod_truth.rs"]
mod swrod_truth;

use common::served::Served;
use common::{loopback_swrod_apps, swdaq_run, swdaq_run_json};
use launched::Run;
use plugins::{BOARD_SOURCE, FAULTY_SOURCE, assert_refused_naming, build_c_plugin};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use summary::u;
use swdaq_format::eformat::{ChunkRecords, status};
use swdaq_format::eformat_event::FullEvent;
use swdaq_sim::felix::FelixConfig;
use swrod_truth::{emulated_chunks, events_of};

/// The one-process runs: one card, its 16 e-links in two ROBs of 8.
const ELINKS: u16 = 16;
const ROBS_PER_CARD: u16 = 2;
const L1AS: u64 = 400;
/// Fault-free L1 accepts at the end of an emulated run (the default `clean_tail_l1as`).
const CLEAN_TAIL: u64 = 16;

/// The one-process run's cards, as `config` sets them.
fn felix() -> FelixConfig {
    FelixConfig {
        elinks: ELINKS,
        chunk_min: 8,
        chunk_max: 90,
        seed: 5,
        ..FelixConfig::default()
    }
}

/// One card, `L1AS` L1 accepts as fast as the chain takes them, every event stored under
/// `dir/out`; `aggregator` is the `[swrod.aggregator]` section's body.
fn config(dir: &Path, aggregator: &str) -> PathBuf {
    let path = dir.join("swrod.toml");
    std::fs::write(
        &path,
        format!(
            "duration_s = 0.0\nmetrics_addr = \"\"\n\
             [swrod]\noutput_dir = {:?}\nmax_file_mb = 1\ncards = 1\nrobs_per_card = {ROBS_PER_CARD}\n\
             l1a_rate_hz = 0.0\nmax_l1as = {L1AS}\nhlt_accept_every = 1\nsample_every = 7\n\
             [swrod.felix]\nelinks = {ELINKS}\nchunk_min = 8\nchunk_max = 90\nseed = 5\n\
             [swrod.aggregator]\n{aggregator}\n",
            dir.join("out"),
        ),
    )
    .unwrap();
    path
}

/// The triggered board's payload of one L1 ID's chunks (in e-link order), padded with zeros
/// to whole words as the SW ROD stores it.
fn board_payload(chunks: &[(u16, &[u8])]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (link, data) in chunks {
        payload.extend_from_slice(&u32::from(*link).to_be_bytes());
        payload.extend_from_slice(&(data.len() as u32).to_be_bytes());
        payload.extend_from_slice(data);
    }
    payload.resize(payload.len().next_multiple_of(4), 0);
    payload
}

/// How the stored ROB payloads must look.
#[derive(Clone, Copy, PartialEq)]
enum Expected {
    /// The triggered board's layout; first status word `DETECTOR_PAYLOAD` alone.
    Board,
    /// The plugin failed: swdaq's chunk records, `PLUGIN_FAILED` set.
    RecordsFlagged,
}

/// Checks every event of `files` (closed EventStorage files): each ROB's source id and L1
/// ID, and its payload as `expected` says from `chunks` (the cards' truth, every e-link of a
/// ROB delivered: these runs have no faults). The events' global ids, sorted.
fn check_events(
    files: &[PathBuf],
    chunks: &HashMap<(u16, u16, u32), Vec<u8>>,
    robs: u32,
    expected: Expected,
) -> Vec<u64> {
    let per_rob = ELINKS / ROBS_PER_CARD;
    let mut global_ids = Vec::new();
    for file in files {
        for bytes in events_of(file) {
            let event = FullEvent::parse(&bytes).unwrap();
            global_ids.push(event.header.global_id);
            let l1_id = event.header.l1_id;
            let stored: Vec<_> = event.robs().map(Result::unwrap).collect();
            assert_eq!(stored.len(), robs as usize, "event {l1_id:#x}");
            for (r, rob) in stored.iter().enumerate() {
                let (card, first) = (r as u16 / ROBS_PER_CARD, r as u16 % ROBS_PER_CARD * per_rob);
                assert_eq!(rob.source_id, 0x0071_0000 + r as u32);
                assert_eq!(rob.rod.l1_id, l1_id);
                let truth: Vec<(u16, &[u8])> = (first..first + per_rob)
                    .map(|e| (e, chunks[&(card, e, l1_id)].as_slice()))
                    .collect();
                let first_status = rob.status().next().unwrap();
                match expected {
                    Expected::Board => {
                        assert_eq!(
                            first_status,
                            status::DETECTOR_PAYLOAD,
                            "ROB {r} of {l1_id:#x}"
                        );
                        assert_eq!(rob.data, board_payload(&truth), "ROB {r} of {l1_id:#x}");
                    }
                    Expected::RecordsFlagged => {
                        assert_eq!(first_status, status::PLUGIN_FAILED, "ROB {r} of {l1_id:#x}");
                        let mut records: Vec<(u16, &[u8])> = ChunkRecords::new(rob.data)
                            .map(|c| c.map(|c| (c.elink, c.data)).unwrap())
                            .collect();
                        records.sort_unstable();
                        assert_eq!(records, truth, "ROB {r} of {l1_id:#x}");
                    }
                }
            }
        }
    }
    global_ids.sort_unstable();
    global_ids
}

/// The closed files a one-process run lists in its summary.
fn summary_files(s: &Value) -> Vec<PathBuf> {
    s["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect()
}

fn plugin_errors(s: &Value) -> Vec<u64> {
    s["robs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["plugin_errors"]))
        .collect()
}

#[test]
fn a_plugin_builds_every_rob_payload_and_the_rob_around_it_stays_swdaqs() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    let s = swdaq_run_json(&config(dir.path(), &format!("plugin = {plugin:?}")));
    assert_eq!(u(&s["stored_events"]), L1AS, "{s:#}");
    assert_eq!(s["truth"]["ok"], true, "{:#}", s["truth"]);
    assert_eq!(plugin_errors(&s), vec![0, 0]);
    assert_eq!(u(&s["sample_errors"]), 0);
    assert!(u(&s["samples"]) > 0);
    let chunks = emulated_chunks(1, L1AS, &felix(), CLEAN_TAIL);
    let ids = check_events(&summary_files(&s), &chunks, 2, Expected::Board);
    assert_eq!(ids, (1..=L1AS).collect::<Vec<_>>());
}

#[test]
fn a_plugin_breaking_the_abi_is_counted_per_rob_and_every_event_is_stored_flagged() {
    let dir = tempfile::tempdir().unwrap();
    // Says it wrote one byte more than the buffer holds, for every L1 ID.
    let plugin = build_c_plugin(dir.path(), FAULTY_SOURCE, "faulty", &["FAULT=11"]);
    let s = swdaq_run_json(&config(dir.path(), &format!("plugin = {plugin:?}")));
    assert_eq!(s["stop_reason"], "InputEnded", "{s:#}");
    assert_eq!(u(&s["stored_events"]), L1AS, "{s:#}");
    assert_eq!(plugin_errors(&s), vec![L1AS, L1AS]);
    for rob in s["robs"].as_array().unwrap() {
        let first = rob["plugin_error"].as_str().unwrap();
        assert!(
            first.contains("plugin faulty") && first.contains("buffer"),
            "{first}"
        );
    }
    // Nothing the emulator injected explains it: the run is not what the detector asked for.
    assert_eq!(u(&s["truth"]["unexpected"]["plugin_errors"]), 2 * L1AS);
    assert_eq!(s["truth"]["ok"], false);
    assert_eq!(
        u(&s["sample_errors"]),
        0,
        "failed L1 IDs keep swdaq's layout"
    );
    let chunks = emulated_chunks(1, L1AS, &felix(), CLEAN_TAIL);
    let ids = check_events(&summary_files(&s), &chunks, 2, Expected::RecordsFlagged);
    assert_eq!(ids, (1..=L1AS).collect::<Vec<_>>());
}

#[test]
fn a_missing_file_a_library_that_is_not_a_plugin_and_one_without_aggregate_are_refused_at_configure()
 {
    let dir = tempfile::tempdir().unwrap();
    let not_plugin = build_c_plugin(
        dir.path(),
        "crates/swdaq-plugin/tests/plugins/no_entry.c",
        "no_entry",
        &[],
    );
    // The faulty plugin's default build decodes only.
    let decoder_only = build_c_plugin(dir.path(), FAULTY_SOURCE, "decoder_only", &[]);
    let missing = dir.path().join("libnowhere.so");
    for (plugin, why) in [
        (&missing, "no such file"),
        (&not_plugin, "not a swdaq plugin"),
        (&decoder_only, "does not provide aggregate"),
    ] {
        let out = swdaq_run(&config(dir.path(), &format!("plugin = {plugin:?}")));
        assert_refused_naming(&out, plugin, "swrod.aggregator.plugin", why);
        assert!(
            !dir.path().join("out").exists(),
            "a refused run wrote files"
        );
    }
}

/// The same run under `swdaq serve`: configured and started by `swdaq ctl`, it ends with
/// its input and leaves its summary in the status, every ROB payload the plugin's.
#[test]
fn under_swdaq_serve_the_plugin_builds_every_rob_payload() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    let server = Served::start(&config(dir.path(), &format!("plugin = {plugin:?}")));
    server.ctl(&["configure"]);
    assert_eq!(server.ctl(&["start"])["run_number"], 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    let s = loop {
        let status = server.ctl(&["status"]);
        if status["run"].is_null() && status["last_summary"].is_object() {
            break status["last_summary"].clone();
        }
        assert!(Instant::now() < deadline, "the run never ended: {status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(u(&s["stored_events"]), L1AS, "{s:#}");
    assert_eq!(s["truth"]["ok"], true, "{:#}", s["truth"]);
    assert_eq!(plugin_errors(&s), vec![0, 0]);
    let chunks = emulated_chunks(1, L1AS, &felix(), CLEAN_TAIL);
    let ids = check_events(&summary_files(&s), &chunks, 2, Expected::Board);
    assert_eq!(ids, (1..=L1AS).collect::<Vec<_>>());
}

#[test]
fn sw_rod_applications_each_make_their_robs_payloads_with_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), BOARD_SOURCE, "triggered_board", &[]);
    let topology = format!(
        "{}\n[swrod.aggregator]\nplugin = {plugin:?}\n",
        loopback_swrod_apps()
    );
    let s = Run::start(&swrod::config(dir.path(), 1.0, &topology)).summary();
    let l1as = u(&s["l1as_to_hlt"]);
    assert!(l1as > 0, "{s}");
    assert_eq!(u(&s["stored_events"]), l1as, "{s}");
    assert_eq!(s["truth"]["ok"], true, "{:#}", s["truth"]);
    assert!(plugin_errors(&s).iter().all(|&n| n == 0), "{s}");
    // The cards of `swrod::config`: 2 cards x 2 ROBs x 8 e-links, seed 3, ECR every 1000;
    // they may run on after the supervisor's last L1 accept.
    let felix = FelixConfig {
        elinks: 16,
        chunk_min: 8,
        chunk_max: 60,
        ecr_every: 1000,
        seed: 3,
        ..FelixConfig::default()
    };
    let card_l1as = s["cards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| u(&c["l1as"]))
        .max();
    let chunks = emulated_chunks(2, card_l1as.unwrap(), &felix, 0);
    let mut files = Vec::new();
    for hlt in swrod::HLTS {
        for entry in std::fs::read_dir(dir.path().join("out").join(hlt)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with('.') && !name.ends_with(".writing") {
                files.push(path);
            }
        }
    }
    let ids = check_events(&files, &chunks, 4, Expected::Board);
    assert_eq!(ids, (1..=l1as).collect::<Vec<_>>());
}
