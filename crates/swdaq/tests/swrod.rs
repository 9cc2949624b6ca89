//! `swdaq run` with a SW ROD configuration, end to end from the binary: FELIX cards
//! (emulated in the run, read from `swdaq gen --format felix` files, or published by its
//! FELIX servers over TCP), SW ROD threads, request servers, the HLT and EventStorage files.
//! The files are checked against the emulator itself (the same cards replayed here) and the
//! summary's counters against its truth, clean and with every fault kind on.

mod common;
#[path = "common/summary.rs"]
mod summary;
#[path = "common/swrod_truth.rs"]
mod swrod_truth;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use summary::{assert_every_block_arrived, u};
use swdaq_format::eformat::{ChunkRecords, status};
use swdaq_format::eformat_event::FullEvent;
use swdaq_sim::felix::FelixConfig;
use swrod_truth::events_of;

const CARDS: u16 = 2;
const ROBS_PER_CARD: u16 = 2;
const ELINKS: u16 = 16;
const ECR_EVERY: u32 = 1000;
const LUMI_BLOCK_L1AS: u64 = 700;
/// Fault-free L1 accepts at the end of a run of emulated cards (`clean_tail_l1as`).
const CLEAN_TAIL: u64 = 16;

fn config(dir: &Path, l1as: u64, faults: &str, input: &str) -> std::path::PathBuf {
    let path = dir.join("swrod.toml");
    std::fs::write(
        &path,
        format!(
            r#"
duration_s = 0.0
metrics_addr = ""
[swrod]
output_dir = "{out}"
max_file_mb = 1
lumi_block_l1as = {LUMI_BLOCK_L1AS}
cards = {CARDS}
robs_per_card = {ROBS_PER_CARD}
l1a_rate_hz = 0.0
max_l1as = {l1as}
hlt_accept_every = 1
timeout_fragments = 256
ring_slots = 1024
sample_every = 7
[swrod.felix]
elinks = {ELINKS}
chunk_min = 8
chunk_max = 90
ecr_every = {ECR_EVERY}
seed = 5
{faults}
{input}
"#,
            out = dir.join("out").display()
        ),
    )
    .unwrap();
    path
}

/// Every whole chunk the run's emulated cards sent.
fn emulated_chunks(l1as: u64, felix: FelixConfig) -> HashMap<(u16, u16, u32), Vec<u8>> {
    swrod_truth::emulated_chunks(CARDS, l1as, &felix, CLEAN_TAIL)
}

/// Reads every stored event and checks it against the emulated chunks; returns the number
/// of events, of e-links named missing and of incomplete events (a ROB missing, or one
/// missing e-links), and the luminosity blocks seen.
fn check_files(
    summary: &Value,
    l1as: u64,
    chunks: &HashMap<(u16, u16, u32), Vec<u8>>,
) -> (u64, u64, u64, Vec<u64>) {
    let files = summary["files"].as_array().unwrap();
    let mut events = 0u64;
    let mut named_missing = 0u64;
    let mut flagged = 0u64;
    let mut lumi_blocks = Vec::new();
    let mut l1a_indices = Vec::new();
    let per_rob = ELINKS / ROBS_PER_CARD;
    for f in files {
        // `swdaq inspect` finds every event good (status bits are listed, not bad).
        let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["inspect", "--json", f["path"].as_str().unwrap()])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert!(inspect.status.success(), "{:#}", report["problems"]);
        let listed = report["events"].as_array().map(Vec::len);
        assert_eq!(
            listed,
            Some(u(&f["events"]) as usize),
            "{:#}",
            report["format"]
        );
        for buf in events_of(f["path"].as_str().unwrap()) {
            let e = FullEvent::parse(&buf).unwrap();
            // Luminosity blocks advance every LUMI_BLOCK_L1AS L1 accepts; the file is its block's.
            let index = e.header.global_id - 1;
            assert_eq!(u64::from(e.header.lumi_block), 1 + index / LUMI_BLOCK_L1AS);
            assert_eq!(u64::from(e.header.lumi_block), u(&f["lumi_block"]));
            lumi_blocks.push(u(&f["lumi_block"]));
            // Events settle in any order (a ROB asked again later); each L1 accept once.
            let l1_id = e.header.l1_id;
            l1a_indices
                .push(u64::from(l1_id >> 24) * u64::from(ECR_EVERY) + u64::from(l1_id & 0xFF_FFFF));
            assert_eq!(l1a_indices.last(), Some(&index));
            assert!(
                e.missing_robs().is_empty(),
                "no ROB is missing in these runs"
            );
            let robs: Vec<_> = e.robs().map(Result::unwrap).collect();
            // Incomplete, as a reader sees it: a stand-in ROB, or one that names e-links missing.
            let incomplete = status::MISSING_ELINKS | status::DUMMY_FRAGMENT;
            flagged += u64::from(
                robs.iter()
                    .any(|r| r.status().next().unwrap_or(0) & incomplete != 0),
            );
            assert_eq!(robs.len(), usize::from(CARDS * ROBS_PER_CARD));
            for (r, rob) in robs.iter().enumerate() {
                let (card, first) = (r as u16 / ROBS_PER_CARD, r as u16 % ROBS_PER_CARD * per_rob);
                assert_eq!(rob.source_id, 0x0071_0000 + r as u32);
                assert_eq!(rob.rod.l1_id, e.header.l1_id);
                let words: Vec<u32> = rob.status().collect();
                let mut seen = 0;
                for record in ChunkRecords::new(rob.data) {
                    let record = record.unwrap();
                    let want = &chunks[&(card, record.elink, rob.rod.l1_id)];
                    assert_eq!(record.data, &want[..], "chunk of e-link {}", record.elink);
                    assert!((first..first + per_rob).contains(&record.elink));
                    seen += 1;
                }
                if words[0] & status::MISSING_ELINKS != 0 {
                    let named: u32 = words[1..].iter().map(|w| w.count_ones()).sum();
                    assert_eq!(named + seen, u32::from(per_rob));
                    named_missing += u64::from(named);
                } else {
                    assert_eq!(seen, u32::from(per_rob));
                }
            }
            events += 1;
        }
    }
    l1a_indices.sort_unstable();
    assert_eq!(l1a_indices, (0..l1as).collect::<Vec<_>>());
    lumi_blocks.dedup();
    (events, named_missing, flagged, lumi_blocks)
}

fn felix(faults: bool) -> FelixConfig {
    let mut f = FelixConfig {
        elinks: ELINKS,
        chunk_min: 8,
        chunk_max: 90,
        ecr_every: ECR_EVERY,
        seed: 5,
        ..FelixConfig::default()
    };
    if faults {
        f.faults = toml::from_str(FAULTS.trim_start_matches("[swrod.felix.faults]")).unwrap();
    }
    f
}

const FAULTS: &str = r#"[swrod.felix.faults]
missing_chunk = 0.002
truncated_chunk = 0.002
sequence_gap = 0.002
l1id_out_of_order = 0.002
dead_elinks = [{ elink = 3, after_l1as = 2500 }]
"#;

#[test]
fn a_clean_run_stores_every_event_as_the_cards_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 2990;
    let summary = common::swdaq_run_json(&config(dir.path(), l1as, "", ""));
    assert_eq!(summary["truth"]["ok"], true, "{summary:#}");
    assert_eq!(u(&summary["l1as"]), l1as);
    assert_eq!(u(&summary["hlt"]["complete_events"]), l1as);
    assert_eq!(u(&summary["stored_events"]), l1as);
    assert!(
        summary["files"].as_array().unwrap().len() > 1,
        "files roll over at 1 MB"
    );
    assert!(u(&summary["samples"]) > 0);
    let chunks = emulated_chunks(l1as, felix(false));
    let (events, named, flagged, mut lumi_blocks) = check_files(&summary, l1as, &chunks);
    assert_eq!((events, named, flagged), (l1as, 0, 0));
    assert_eq!(u(&summary["stored_incomplete_events"]), 0);
    lumi_blocks.sort_unstable();
    lumi_blocks.dedup();
    assert_eq!(
        lumi_blocks,
        (1..=l1as.div_ceil(LUMI_BLOCK_L1AS)).collect::<Vec<_>>()
    );
}

#[test]
fn every_fault_kind_ends_in_its_counter_and_the_files_name_missing_elinks() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 3990;
    let summary = common::swdaq_run_json(&config(dir.path(), l1as, FAULTS, ""));
    check_fault_run(&summary, l1as, felix(true));
}

/// The summary's truth holds for every fault kind, and the files hold every chunk the cards
/// (`felix`) sent, naming each one lost.
fn check_fault_run(summary: &Value, l1as: u64, felix: FelixConfig) {
    let truth = &summary["truth"];
    for check in truth["faults"].as_array().unwrap() {
        assert!(u(&check["injected"]) > 0, "{check}");
        assert_eq!(check["ok"], true, "{check}");
    }
    assert_eq!(truth["ok"], true, "{truth:#}\nHLT: {:#}", summary["hlt"]);
    assert_eq!(u(&summary["l1as"]), l1as);
    assert!(u(&summary["hlt"]["events_with_incomplete_robs"]) > l1as - 2500);
    let chunks = emulated_chunks(l1as, felix);
    let (_, named, flagged, _) = check_files(summary, l1as, &chunks);
    // The summary's incomplete events are the ones a reader finds incomplete.
    assert_eq!(u(&summary["stored_incomplete_events"]), flagged);
    assert_eq!(u(&summary["hlt"]["events_with_incomplete_robs"]), flagged);
    let missing: u64 = summary["robs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["aggregator"]["missing_chunks"]))
        .sum();
    // Lost chunks, and the dead e-link (of every card) in every L1 accept from its death on.
    assert_eq!(named, missing + u64::from(CARDS) * (l1as - 2500));
}

/// `swdaq gen --format felix` of the run's cards (every fault kind on, TTC-to-host e-link
/// on, as the generator always sends it) with `args`, `l1as` L1 accepts at `rate_hz`.
fn generate(dir: &Path, l1as: u64, rate_hz: u64, args: &[&str]) -> std::process::Child {
    let config = dir.join("cards.toml");
    std::fs::write(&config, toml::to_string(&felix(true)).unwrap()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["gen", "--format", "felix", "--links", &CARDS.to_string()])
        .arg("--config")
        .arg(&config)
        .args(["--seconds", &(l1as as f64 / rate_hz as f64).to_string()])
        .args(["--l1a-rate", &rate_hz.to_string()])
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The generator's cards as they sent their blocks: the run's, with their TTC-to-host e-link.
fn generated_cards() -> FelixConfig {
    FelixConfig {
        ttc_to_host: true,
        ..felix(true)
    }
}

#[test]
fn cards_read_from_generator_files_give_the_same_events_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    // A multiple of ECR_EVERY: the generator records an ECR after the last L1 accept, which
    // no data carries and the truth must not expect.
    let l1as = 4 * u64::from(ECR_EVERY);
    let cards = dir.path().join("cards");
    let generated = generate(dir.path(), l1as, l1as, &["--out", cards.to_str().unwrap()])
        .wait_with_output()
        .unwrap();
    assert!(generated.status.success());
    let input = format!("[swrod.input]\nkind = \"file\"\ndirectory = {cards:?}\n");
    let summary = common::swdaq_run_json(&config(dir.path(), 0, FAULTS, &input));
    check_fault_run(&summary, l1as, generated_cards());
}

/// `swdaq gen --format felix --tcp` on free ports: the run's cards published by FELIX
/// servers, paced at 10 kHz (0.4 s of L1 accepts), their truth written under `dir/sent`;
/// with the `[swrod.input]` that subscribes to them.
fn felix_servers(dir: &Path, l1as: u64) -> (std::process::Child, String) {
    let sent = dir.join("sent");
    let address = format!("127.0.0.1:{}", common::free_tcp_ports(CARDS));
    let servers = generate(
        dir,
        l1as,
        10_000,
        &[
            "--out",
            sent.to_str().unwrap(),
            "--tcp",
            &address,
            "--wait-subscribers",
            "30",
        ],
    );
    let input = format!(
        "[swrod.input]\nkind = \"tcp\"\ntcp_address = \"{address}\"\ntruth = {sent:?}\nconnect_timeout_s = 30\n"
    );
    (servers, input)
}

#[test]
fn cards_published_by_felix_servers_over_tcp_give_every_block_and_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 3990;
    let (servers, input) = felix_servers(dir.path(), l1as);
    let summary = common::swdaq_run_json(&config(dir.path(), 0, FAULTS, &input));
    assert!(servers.wait_with_output().unwrap().status.success());
    let cards = summary["cards"].as_array().unwrap();
    assert_every_block_arrived(cards.iter().chain(summary["robs"].as_array().unwrap()));
    check_fault_run(&summary, l1as, generated_cards());
}

/// The same servers read by SW ROD applications on 127.0.0.1, a card each, whose HLT
/// supervisor takes the L1 accepts off card 0's TTC-to-host e-link (as ATLAS's from the
/// central trigger), and two HLT applications that ask every ROB, build and store.
#[test]
fn sw_rod_applications_fed_by_felix_servers_store_the_same_events_and_the_truth_holds() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 3990;
    let (servers, input) = felix_servers(dir.path(), l1as);
    // Generous time-outs: on a loaded machine a peer or a fragment may be seconds late, and
    // this test is about the data, not the drills (tests/swrod_apps.rs).
    let topology = format!(
        "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 5000\n{}",
        common::loopback_swrod_apps()
    );
    let config = config(dir.path(), 0, FAULTS, &format!("{input}{topology}"));
    let text = std::fs::read_to_string(&config).unwrap();
    // 256 events each at most in flight: one HLT application that asks first cannot take
    // the whole run, so both share it.
    let text = text.replace(
        "[swrod]\n",
        "[swrod]\nhlt_give_up_ms = 10000\nhlt_max_in_flight = 256\n",
    );
    std::fs::write(&config, text).unwrap();
    let summary = common::swdaq_run_json(&config);
    assert!(servers.wait_with_output().unwrap().status.success());
    let hltsv = &summary["hltsv"];
    assert_eq!(u(&hltsv["l1as"]), l1as, "{hltsv:#}");
    assert_eq!(u(&hltsv["ttc_problems"]), 0, "{hltsv:#}");
    let ttc = serde_json::json!({ "intake": hltsv["ttc_intake"] });
    let cards = summary["cards"].as_array().unwrap();
    assert_every_block_arrived(
        cards
            .iter()
            .chain(summary["robs"].as_array().unwrap())
            .chain([&ttc]),
    );
    assert_eq!(
        (u(&summary["stored_events"]), u(&summary["lost"])),
        (l1as, 0),
        "{summary:#}"
    );
    for hlt in ["hlt-0", "hlt-1"] {
        assert!(
            summary["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["path"].as_str().unwrap().contains(hlt)),
            "{hlt} stored nothing: {:#}",
            summary["hltsv"]
        );
    }
    check_fault_run(&summary, l1as, generated_cards());
}

/// A card's file cut in the middle of a block: the run names the card and the file, and
/// exits non-zero (it exited 0, the card's later L1 accepts silently missing).
#[test]
fn a_truncated_card_file_is_named_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let cards = dir.path().join("cards");
    let generated = generate(dir.path(), 2000, 2000, &["--out", cards.to_str().unwrap()])
        .wait_with_output()
        .unwrap();
    assert!(generated.status.success());
    let card1 = cards.join("card1.swraw");
    let bytes = std::fs::read(&card1).unwrap();
    std::fs::write(&card1, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let input = format!("[swrod.input]\nkind = \"file\"\ndirectory = {cards:?}\n");
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--config"])
        .arg(config(dir.path(), 0, "", &input))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("input ended early (card 1: "), "{stderr}");
    assert!(stderr.contains("card1.swraw"), "{stderr}");
}
