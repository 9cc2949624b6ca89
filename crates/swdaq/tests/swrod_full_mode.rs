//! `swdaq run --config configs/swrod-full-mode.toml` end to end from the binary, in one
//! process and as applications: FELIX cards in FULL mode (one ~5 KB chunk per link per L1 accept, 4 KiB blocks
//! with 32-bit trailers, chunks spanning blocks) emulated in the run or read from
//! `swdaq gen --format felix --full-mode` files, SW ROD threads aggregating the links into
//! ROB fragments, the HLT and EventStorage files. The example configuration is run as it
//! stands except for the run's length and output (and the faults, where a test turns them
//! on); every stored event is checked against the emulator (the same cards replayed here)
//! and the summary's counters against its truth.

mod common;
#[path = "common/summary.rs"]
mod summary;
#[path = "common/swrod_truth.rs"]
mod swrod_truth;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use summary::{assert_every_block_arrived, u};
use swdaq_format::eformat::{ChunkRecords, status};
use swdaq_format::eformat_event::FullEvent;
use swdaq_sim::felix::{FelixConfig, FelixMode};
use swrod_truth::events_of;

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../configs/swrod-full-mode.toml"
);
const ECR_EVERY: u32 = 500;
const LUMI_BLOCK_L1AS: u64 = 400;
/// The dead link of `FAULTS` goes silent after this many L1 accepts.
const DEAD_AFTER: u64 = 900;

const FAULTS: &str = r#"
missing_chunk = 0.002
truncated_chunk = 0.002
sequence_gap = 0.002
l1id_out_of_order = 0.002
dead_elinks = [{ elink = 3, after_l1as = 900 }]
"#;

/// The example configuration, shortened to `l1as` L1 accepts as fast as the chain takes
/// them, every event stored, `faults` (TOML of `[swrod.felix.faults]`) and `input` (TOML of
/// `[swrod.input]`) when given.
struct Run {
    path: PathBuf,
    config: toml::Table,
}

impl Run {
    fn new(dir: &Path, l1as: u64, faults: Option<&str>, input: Option<&str>) -> Self {
        let mut config: toml::Table = std::fs::read_to_string(EXAMPLE).unwrap().parse().unwrap();
        // Tables are changed as copies and put back: one borrow at a time.
        let mut run = config["run"].as_table().unwrap().clone();
        run.insert("duration_s".into(), 0.0.into());
        run.insert("metrics_addr".into(), "".into());
        run.insert(
            "output_dir".into(),
            dir.join("out").to_str().unwrap().into(),
        );
        config.insert("run".into(), run.into());
        let mut swrod = config["swrod"].as_table().unwrap().clone();
        swrod.insert("l1a_rate_hz".into(), 0.0.into());
        swrod.insert("max_l1as".into(), (l1as as i64).into());
        swrod.insert("hlt_accept_every".into(), 1.into());
        swrod.insert("sample_every".into(), 7.into());
        swrod.insert("lumi_block_l1as".into(), (LUMI_BLOCK_L1AS as i64).into());
        let mut felix = swrod["felix"].as_table().unwrap().clone();
        felix.insert("ecr_every".into(), i64::from(ECR_EVERY).into());
        if let Some(f) = faults {
            felix.insert("faults".into(), f.parse::<toml::Table>().unwrap().into());
        }
        swrod.insert("felix".into(), felix.into());
        if let Some(i) = input {
            swrod.insert("input".into(), i.parse::<toml::Table>().unwrap().into());
        }
        config.insert("swrod".into(), swrod.into());
        let path = dir.join("swrod-full-mode.toml");
        std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
        Self { path, config }
    }

    /// The same run as `[topology]`'s applications (`[[topology.apps]]` entries), at
    /// `l1a_rate_hz` (applications follow an L1A clock).
    fn into_applications(mut self, apps: &str, l1a_rate_hz: f64) -> Self {
        let swrod = self.config["swrod"].as_table_mut().unwrap();
        swrod.insert("l1a_rate_hz".into(), l1a_rate_hz.into());
        let mut text = toml::to_string(&self.config).unwrap();
        text += apps;
        std::fs::write(&self.path, text).unwrap();
        self
    }

    fn swrod(&self, key: &str) -> u64 {
        self.config["swrod"][key].as_integer().unwrap() as u64
    }

    fn felix(&self) -> FelixConfig {
        self.config["swrod"]["felix"].clone().try_into().unwrap()
    }

    fn run(&self) -> Value {
        common::swdaq_run_json(&self.path)
    }
}

/// Reads every stored event and checks it, ROB by ROB and link by link, against the
/// emulated chunks; returns the links named missing and the incomplete events.
fn check_files(
    summary: &Value,
    run: &Run,
    l1as: u64,
    chunks: &HashMap<(u16, u16, u32), Vec<u8>>,
) -> (u64, u64) {
    let cards = run.swrod("cards") as u16;
    let robs_per_card = run.swrod("robs_per_card") as u16;
    let per_rob = run.felix().elinks / robs_per_card;
    let first_source = run.swrod("first_rob_source_id") as u32;
    let mut named_missing = 0u64;
    let mut flagged = 0u64;
    let mut l1a_indices = Vec::new();
    for f in summary["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .args(["inspect", "--json", path])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert!(inspect.status.success(), "{:#}", report["problems"]);
        for buf in events_of(path) {
            let e = FullEvent::parse(&buf).unwrap();
            let index = e.header.global_id - 1;
            assert_eq!(u64::from(e.header.lumi_block), 1 + index / LUMI_BLOCK_L1AS);
            let l1_id = e.header.l1_id;
            l1a_indices
                .push(u64::from(l1_id >> 24) * u64::from(ECR_EVERY) + u64::from(l1_id & 0xFF_FFFF));
            assert_eq!(l1a_indices.last(), Some(&index));
            assert!(
                e.missing_robs().is_empty(),
                "no ROB is missing in these runs"
            );
            let robs: Vec<_> = e.robs().map(Result::unwrap).collect();
            assert_eq!(robs.len(), usize::from(cards * robs_per_card));
            let incomplete = status::MISSING_ELINKS | status::DUMMY_FRAGMENT;
            flagged += u64::from(
                robs.iter()
                    .any(|r| r.status().next().unwrap_or(0) & incomplete != 0),
            );
            for (r, rob) in robs.iter().enumerate() {
                let card = r as u16 / robs_per_card;
                let first = r as u16 % robs_per_card * per_rob;
                assert_eq!(rob.source_id, first_source + r as u32);
                assert_eq!(rob.rod.l1_id, l1_id);
                let mut seen = 0;
                for record in ChunkRecords::new(rob.data) {
                    let record = record.unwrap();
                    let want = &chunks[&(card, record.elink, l1_id)];
                    assert_eq!(record.data, &want[..], "chunk of link {}", record.elink);
                    assert!((first..first + per_rob).contains(&record.elink));
                    seen += 1;
                }
                let words: Vec<u32> = rob.status().collect();
                if words[0] & status::MISSING_ELINKS != 0 {
                    let named: u32 = words[1..].iter().map(|w| w.count_ones()).sum();
                    assert_eq!(named + seen, u32::from(per_rob));
                    named_missing += u64::from(named);
                } else {
                    assert_eq!(seen, u32::from(per_rob));
                }
            }
        }
    }
    l1a_indices.sort_unstable();
    assert_eq!(
        l1a_indices,
        (0..l1as).collect::<Vec<_>>(),
        "every L1 accept once"
    );
    (named_missing, flagged)
}

#[test]
fn the_example_is_full_mode_with_12_links_of_about_5_kb() {
    let dir = tempfile::tempdir().unwrap();
    let run = Run::new(dir.path(), 1, None, None);
    let felix = run.felix();
    assert_eq!(felix.mode, FelixMode::Full);
    assert_eq!(felix.elinks, 12);
    assert!(felix.chunk_min <= 5000 && 5000 <= felix.chunk_max);
    assert_eq!(felix.layout().unwrap().trailer_size(), 4);
}

#[test]
fn a_clean_full_mode_run_stores_every_event_as_the_cards_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 1200;
    let run = Run::new(dir.path(), l1as, None, None);
    let summary = run.run();
    assert_eq!(summary["truth"]["ok"], true, "{summary:#}");
    assert_eq!(
        summary["felix"],
        serde_json::json!({"mode": "full", "block_bytes": 4096, "elinks_per_card": 12})
    );
    assert_eq!(u(&summary["l1as"]), l1as);
    assert_eq!(u(&summary["hlt"]["complete_events"]), l1as);
    assert_eq!(u(&summary["stored_events"]), l1as);
    let chunks = swrod_truth::emulated_chunks(
        run.swrod("cards") as u16,
        l1as,
        &run.felix(),
        run.config["swrod"]
            .get("clean_tail_l1as")
            .map_or(16, |v| v.as_integer().unwrap() as u64),
    );
    assert_eq!(chunks.len() as u64, l1as * 2 * 12);
    assert!(chunks.values().all(|c| (4600..=5400).contains(&c.len())));
    let (named, flagged) = check_files(&summary, &run, l1as, &chunks);
    assert_eq!((named, flagged), (0, 0));
    for rob in summary["robs"].as_array().unwrap() {
        assert_eq!(u(&rob["decoder"]["broken_chunks"]), 0, "{rob:#}");
        assert_eq!(u(&rob["decoder"]["corrupt_blocks"]), 0, "{rob:#}");
    }
}

/// FULL-mode cards read by SW ROD applications (a card each), their ROB fragments built by
/// the HLT applications: every stored event is what the cards sent.
#[test]
fn full_mode_sw_rod_applications_store_every_event_as_the_cards_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 600;
    let run = Run::new(dir.path(), l1as, None, None)
        .into_applications(&common::loopback_swrod_apps(), 2000.0);
    let summary = run.run();
    assert_eq!(summary["truth"]["ok"], true, "{summary:#}");
    assert_eq!(summary["apps"].as_array().unwrap().len(), 5, "{summary:#}");
    assert_eq!(u(&summary["stored_events"]), l1as, "{summary:#}");
    let chunks = swrod_truth::emulated_chunks(run.swrod("cards") as u16, l1as, &run.felix(), 16);
    let (named, flagged) = check_files(&summary, &run, l1as, &chunks);
    assert_eq!((named, flagged), (0, 0));
}

/// Every fault kind ends in its counter, the dead link is named missing in every L1 accept
/// from its death on, and the stored events are the chunks the cards sent (`ttc_to_host`:
/// the generator's cards).
fn check_fault_run(summary: &Value, run: &Run, l1as: u64, ttc_to_host: bool) {
    let truth = &summary["truth"];
    for check in truth["faults"].as_array().unwrap() {
        assert!(u(&check["injected"]) > 0, "{check}");
        assert_eq!(check["ok"], true, "{check}");
    }
    assert_eq!(truth["ok"], true, "{truth:#}\nHLT: {:#}", summary["hlt"]);
    assert_eq!(u(&summary["l1as"]), l1as);
    let cards = run.swrod("cards") as u16;
    let felix = FelixConfig {
        ttc_to_host,
        ..run.felix()
    };
    let clean_tail = 16;
    let chunks = swrod_truth::emulated_chunks(cards, l1as, &felix, clean_tail);
    let (named, flagged) = check_files(summary, run, l1as, &chunks);
    assert_eq!(u(&summary["stored_incomplete_events"]), flagged);
    let missing: u64 = summary["robs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["aggregator"]["missing_chunks"]))
        .sum();
    // Lost chunks, and the dead link (of every card) in every L1 accept from its death on.
    assert_eq!(named, missing + u64::from(cards) * (l1as - DEAD_AFTER));
}

#[test]
fn every_fault_kind_in_full_mode_ends_in_its_counter_and_missing_links_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // Not a multiple of ECR_EVERY, as tests/swrod.rs's emulated runs: with max_l1as = 1500
    // (3 ECRs) the summary counted 1501 L1 accepts (seen in FULL mode, not looked into).
    let l1as = 1490;
    let run = Run::new(dir.path(), l1as, Some(FAULTS), None);
    let summary = run.run();
    check_fault_run(&summary, &run, l1as, false);
}

/// `swdaq gen --format felix --full-mode` of `run`'s cards: `l1as` L1 accepts at `rate_hz`,
/// with `args` (where they go).
fn generate(run: &Run, dir: &Path, l1as: u64, rate_hz: u64, args: &[&str]) -> std::process::Child {
    generate_in(FelixMode::Full, run, dir, l1as, rate_hz, args)
}

/// `swdaq gen --format felix` of `run`'s cards in `mode`.
fn generate_in(
    mode: FelixMode,
    run: &Run,
    dir: &Path,
    l1as: u64,
    rate_hz: u64,
    args: &[&str],
) -> std::process::Child {
    // The generator's cards: the run's [swrod.felix], in GBT mode but for --full-mode.
    let mut felix = run.felix();
    felix.mode = FelixMode::Gbt;
    felix.block_kib = None;
    let cards_config = dir.join("cards.toml");
    std::fs::write(&cards_config, toml::to_string(&felix).unwrap()).unwrap();
    let full_mode: &[&str] = if mode == FelixMode::Full {
        &["--full-mode"]
    } else {
        &[]
    };
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["gen", "--format", "felix"])
        .args(full_mode)
        .arg("--links")
        .arg(run.swrod("cards").to_string())
        .arg("--config")
        .arg(&cards_config)
        .args(["--seconds", &(l1as as f64 / rate_hz as f64).to_string()])
        .args(["--l1a-rate", &rate_hz.to_string()])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// FULL-mode cards published by FELIX servers (`swdaq gen --tcp`): the SW ROD subscribes,
/// learns the cards' 4 KiB blocks from the subscription, and stores every event the cards
/// sent, every fault in its counter.
#[test]
fn full_mode_cards_published_over_tcp_give_every_block_and_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 3 * u64::from(ECR_EVERY);
    let port = common::free_tcp_ports(2);
    let sent = dir.path().join("sent");
    let input = format!(
        "kind = \"tcp\"\ntcp_address = \"127.0.0.1:{port}\"\ntruth = {sent:?}\nconnect_timeout_s = 30\n"
    );
    let run = Run::new(dir.path(), 0, Some(FAULTS), Some(&input));
    let address = format!("127.0.0.1:{port}");
    let servers = generate(
        &run,
        dir.path(),
        l1as,
        5000,
        &[
            "--out",
            sent.to_str().unwrap(),
            "--tcp",
            &address,
            "--wait-subscribers",
            "30",
        ],
    );
    let summary = run.run();
    let served = servers.wait_with_output().unwrap();
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
    assert_every_block_arrived(summary["cards"].as_array().unwrap().iter());
    check_fault_run(&summary, &run, l1as, true);
}

/// A FELIX server publishing GBT-mode cards to a SW ROD configured for FULL mode: the run
/// is refused at once, naming both block sizes, not read as garbage.
#[test]
fn a_card_of_other_blocks_over_tcp_is_refused_naming_both_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let address = format!("127.0.0.1:{}", common::free_tcp_ports(2));
    let input = format!("kind = \"tcp\"\ntcp_address = \"{address}\"\nconnect_timeout_s = 30\n");
    let run = Run::new(dir.path(), 0, None, Some(&input));
    let sent = dir.path().join("sent");
    let mut servers = generate_in(
        FelixMode::Gbt,
        &run,
        dir.path(),
        100,
        1000,
        &[
            "--out",
            sent.to_str().unwrap(),
            "--tcp",
            &address,
            "--wait-subscribers",
            "5",
        ],
    );
    let out = common::swdaq_run(&run.path);
    let _ = servers.kill();
    let _ = servers.wait();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("in 1 KiB blocks, where 4 KiB blocks"),
        "{stderr}"
    );
}

#[test]
fn full_mode_cards_read_from_generator_files_give_the_same_events_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    // A multiple of ECR_EVERY: the generator records an ECR after the last L1 accept, which
    // no data carries and the truth must not expect.
    let l1as = 3 * u64::from(ECR_EVERY);
    let cards_dir = dir.path().join("cards");
    let input = format!("kind = \"file\"\ndirectory = {cards_dir:?}\n");
    let run = Run::new(dir.path(), 0, Some(FAULTS), Some(&input));
    let generated = generate(
        &run,
        dir.path(),
        l1as,
        l1as,
        &["--out", cards_dir.to_str().unwrap()],
    )
    .wait_with_output()
    .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let said = String::from_utf8_lossy(&generated.stdout);
    assert!(said.contains("FULL mode, 4 KiB blocks"), "{said}");
    // Card files of 4 KiB blocks.
    let card0 = std::fs::read(cards_dir.join("card0.swraw")).unwrap();
    let header = swdaq_format::rawfile::RawFileHeader::decode(&card0).unwrap();
    assert_eq!(header.frame_size, 4096);
    // `swdaq inspect` walks the FULL-mode blocks: every sequence gap the generator injected
    // on card 0 is flagged (and fails the inspection), nothing else.
    let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["inspect", "--json"])
        .arg(cards_dir.join("card0.swraw"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let felix = &report["felix"];
    assert_eq!(felix["mode"], "full", "{report:#}");
    assert_eq!(u(&felix["block_bytes"]), 4096);
    assert_eq!(
        u(&felix["elinks"]),
        13,
        "12 links and the TTC-to-host e-link"
    );
    assert_eq!(u(&felix["corrupt_blocks"]), 0);
    let truth = std::fs::read_to_string(cards_dir.join("card0_faults.csv")).unwrap();
    let gaps = truth
        .lines()
        .filter(|l| l.starts_with("sequence_gap,"))
        .count() as u64;
    assert!(gaps > 0);
    assert_eq!(u(&felix["sequence_gaps"]), gaps);
    assert_eq!(u(&report["flagged_frames"]), gaps);
    assert!(!inspect.status.success());
    let summary = run.run();
    check_fault_run(&summary, &run, l1as, true);
}
