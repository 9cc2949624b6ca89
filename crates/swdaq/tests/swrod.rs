//! `swdaq run` with a SW ROD configuration, end to end from the binary: emulated FELIX cards,
//! SW ROD threads, request servers, the HLT and raw files. The files are checked against
//! the emulator itself (the same cards replayed here) and the summary's counters against its
//! truth, clean and with every fault kind on.

use serde_json::Value;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::process::Command;
use swdaq_format::eformat::{ChunkRecords, status};
use swdaq_format::eformat_event::FullEvent;
use swdaq_format::rawfile::RawFileReader;
use swdaq_sim::felix::{FelixCard, FelixConfig};
use swdaq_swrod::BlockDecoder;

const CARDS: u16 = 2;
const ROBS_PER_CARD: u16 = 2;
const ELINKS: u16 = 16;
const ECR_EVERY: u32 = 1000;

fn config(dir: &Path, l1as: u64, faults: &str) -> std::path::PathBuf {
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
"#,
            out = dir.join("out").display()
        ),
    )
    .unwrap();
    path
}

fn run(config: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["run", "--config"])
        .arg(config)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swdaq run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Every whole chunk the emulated cards sent: (card, e-link, L1 ID) -> bytes, as the cards
/// of the run (seed + card) send them, with the run's clean tail.
fn emulated_chunks(l1as: u64, felix: FelixConfig) -> HashMap<(u16, u16, u32), Vec<u8>> {
    let mut chunks = HashMap::new();
    for card in 0..CARDS {
        let mut c = FelixCard::new(FelixConfig {
            seed: felix.seed + u64::from(card),
            ..felix.clone()
        })
        .unwrap();
        let mut blocks = Vec::new();
        for i in 0..l1as {
            if i + 16 >= l1as {
                c.set_fault_rates(Default::default());
            }
            c.l1_accept(&mut blocks);
        }
        c.flush(&mut blocks);
        let elinks: Vec<u16> = (0..ELINKS).collect();
        let mut decoder = BlockDecoder::new(&elinks);
        decoder.decode_blocks(&blocks, |e, chunk, _| {
            let l1_id = u32::from_le_bytes(chunk[0..4].try_into().unwrap());
            chunks.insert((card, e as u16, l1_id), chunk.to_vec());
        });
    }
    chunks
}

/// Reads every stored event and checks it against the emulated chunks; returns the number
/// of events and of e-links named missing.
fn check_files(
    summary: &Value,
    l1as: u64,
    chunks: &HashMap<(u16, u16, u32), Vec<u8>>,
) -> (u64, u64) {
    let files = summary["files"].as_array().unwrap();
    let mut events = 0u64;
    let mut named_missing = 0u64;
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
        let mut reader =
            RawFileReader::new(File::open(f["path"].as_str().unwrap()).unwrap()).unwrap();
        let mut buf = Vec::new();
        while reader.next_frame(&mut buf).unwrap() {
            let e = FullEvent::parse(&buf).unwrap();
            // Events settle in any order (a ROB asked again later); each L1 accept once.
            let l1_id = e.header.l1_id;
            l1a_indices
                .push(u64::from(l1_id >> 24) * u64::from(ECR_EVERY) + u64::from(l1_id & 0xFF_FFFF));
            assert!(
                e.missing_robs().is_empty(),
                "no ROB is missing in these runs"
            );
            let robs: Vec<_> = e.robs().map(Result::unwrap).collect();
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
    (events, named_missing)
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
    let summary = run(&config(dir.path(), l1as, ""));
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
    assert_eq!(check_files(&summary, l1as, &chunks), (l1as, 0));
}

#[test]
fn every_fault_kind_ends_in_its_counter_and_the_files_name_missing_elinks() {
    let dir = tempfile::tempdir().unwrap();
    let l1as = 3990;
    let summary = run(&config(dir.path(), l1as, FAULTS));
    let truth = &summary["truth"];
    for check in truth["faults"].as_array().unwrap() {
        assert!(u(&check["injected"]) > 0, "{check}");
        assert_eq!(check["ok"], true, "{check}");
    }
    assert_eq!(truth["ok"], true, "{truth:#}");
    assert!(u(&summary["hlt"]["events_with_incomplete_robs"]) > l1as - 2500);
    let chunks = emulated_chunks(l1as, felix(true));
    let (_, named) = check_files(&summary, l1as, &chunks);
    let missing: u64 = summary["robs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["aggregator"]["missing_chunks"]))
        .sum();
    // Lost chunks, and the dead e-link (of every card) in every L1 accept from its death on.
    assert_eq!(named, missing + u64::from(CARDS) * (l1as - 2500));
}
