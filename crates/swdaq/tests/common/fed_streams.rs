//! What the event builder's end-to-end tests from FED streams (raw files, UDP) share: the
//! generator's configuration with every fault kind on, its truth, each FED's good
//! fragments as generated, and the events the builder units wrote, read back.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use swdaq_format::fed::FedFragment;
use swdaq_format::frd::FrdFile;
use swdaq_format::rawfile::RawFileReader;

/// FEDs 0..8: the first four read by readout unit 0, the rest by readout unit 1.
pub const FEDS: u16 = 8;

/// Runs the binary in `dir` and returns its standard output; fails the test if it fails.
pub fn swdaq(args: &[&str], dir: &Path) -> String {
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

/// The FEDs as `rus` entries, fragments of `mean_bytes` (spread an eighth).
pub fn fed_specs(mean_bytes: u32) -> Vec<String> {
    (0..FEDS)
        .map(|id| {
            format!(
                "{{ id = {id}, mean_bytes = {mean_bytes}, spread_bytes = {} }}",
                mean_bytes / 8
            )
        })
        .collect()
}

/// `rus = [[...], [...]]` for two readout units of four FEDs each.
pub fn two_readout_units(feds: &[String]) -> String {
    format!(
        "rus = [[{}], [{}]]",
        feds[..4].join(", "),
        feds[4..].join(", ")
    )
}

/// Writes `gen.toml` into `dir`: the FEDs at a fixed `rate_hz`, every fault kind at 2 % and
/// FED 6 stopping at event 400. Returns the seconds that make `events` events.
pub fn write_generator_config(dir: &Path, feds: &[String], rate_hz: f64, events: u64) -> String {
    std::fs::write(
        dir.join("gen.toml"),
        format!(
            "feds = [{}]\ntrigger_rate_hz = {rate_hz:?}\npoisson = false\nseed = 5\n\
             [faults]\nmissing = 0.02\nwrong_l1_id = 0.02\nbad_crc = 0.02\nbad_length = 0.02\n\
             stops = [[6, 400]]\n",
            feds.join(", ")
        ),
    )
    .unwrap();
    (events as f64 / rate_hz).to_string()
}

/// `swdaq gen --format fed` of `dir`'s `gen.toml` for `seconds`, then `output` (where to:
/// `--out DIR`, and `--udp ADDR` to send).
pub fn generate(dir: &Path, seconds: &str, output: &[&str]) {
    let mut args = vec![
        "gen",
        "--format",
        "fed",
        "--config",
        "gen.toml",
        "--seconds",
        seconds,
    ];
    args.extend(output);
    swdaq(&args, dir);
}

/// (event, FED) -> fault kind, from `fed_faults.csv` in `dir`.
pub fn truth(dir: &Path) -> BTreeMap<(u64, u16), String> {
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

/// Every good fragment by (event, FED): each FED's raw file in `files` read in order,
/// skipping the events it never sent and keeping only those without a fault.
pub fn good_fragments(
    files: &Path,
    faults: &BTreeMap<(u64, u16), String>,
    events: u64,
) -> BTreeMap<(u64, u16), Vec<u8>> {
    let mut good = BTreeMap::new();
    for fed in 0..FEDS {
        let file = std::fs::File::open(files.join(format!("fed{fed}.swraw"))).unwrap();
        let mut reader = RawFileReader::new(file).unwrap();
        let mut record = Vec::new();
        for event in 1..=events {
            let kind = faults.get(&(event, fed)).map(String::as_str);
            if matches!(kind, Some("missing" | "stopped")) {
                continue;
            }
            assert!(reader.next_frame(&mut record).unwrap());
            if kind.is_none() {
                good.insert((event, fed), record.clone());
            }
        }
    }
    good
}

/// The events in builder units `bu0` and `bu1`'s closed files of run 1 under `out`, each file first
/// read by `swdaq inspect --json` (no error, every CRC32C good): event number -> its FED
/// fragments as (FED, bytes) in the order they lie. An event found twice fails the test.
pub fn built_events(dir: &Path, out: &Path) -> BTreeMap<u64, Vec<(u16, Vec<u8>)>> {
    let mut built = BTreeMap::new();
    for bu in ["bu0", "bu1"] {
        for entry in std::fs::read_dir(out.join(bu).join("run000001")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "raw") {
                continue;
            }
            let report: Value =
                serde_json::from_str(&swdaq(&["inspect", "--json", path.to_str().unwrap()], dir))
                    .unwrap();
            assert_eq!(
                report["problems"],
                serde_json::json!([]),
                "{}",
                path.display()
            );
            assert_eq!(report["bad_event_crc"], 0);
            let bytes = std::fs::read(&path).unwrap();
            for event in FrdFile::parse(&bytes).unwrap().events() {
                let event = event.unwrap();
                let mut rest = event.payload;
                let mut fragments = Vec::new();
                while !rest.is_empty() {
                    let (fragment, before) = FedFragment::parse_last(rest).unwrap();
                    fragments.push((fragment.header.source_id, rest[before.len()..].to_vec()));
                    rest = before;
                }
                fragments.reverse();
                let number = u64::from(event.header.event);
                assert!(
                    built.insert(number, fragments).is_none(),
                    "event {number} built twice"
                );
            }
        }
    }
    built
}

/// What FED `id`'s failure counters must read by the truth: counter name -> count.
pub fn expected_failures(faults: &BTreeMap<(u64, u16), String>, id: u16) -> BTreeMap<&str, u64> {
    let counter_of = |kind: &str| match kind {
        "missing" | "stopped" => "missing",
        "wrong_l1_id" => "wrong_l1_id",
        "bad_crc" => "bad_crc",
        "bad_length" => "bad_length",
        other => panic!("a fault kind the truth does not have: {other}"),
    };
    let mut expected = BTreeMap::new();
    for ((_, fed), kind) in faults {
        if *fed == id {
            *expected.entry(counter_of(kind)).or_default() += 1;
        }
    }
    expected
}
