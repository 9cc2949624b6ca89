//! Garbage drills (issue #33): each input kind of each model fed what no front end sends
//! (random bytes, zeros, records too short to be anything, silence). Every run must end
//! within its duration plus the stated stop time, count the garbage by source and kind,
//! write no event made of it and keep its memory bounded. The chain's UDP drill is in
//! `sources.rs` (`random_frames_end_with_the_run_and_make_no_complete_record`).

mod common;

use common::watch::{self, watch};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a stop may take after the run's duration (docs/src/running.md: "How long a stop
/// takes"), plus start-up and a shared machine's slack.
const STOP_AND_SLACK: Duration = Duration::from_secs(15);
/// Peak RSS no drill may pass: the configured buffers are far below it.
const RSS_LIMIT_KB: u64 = 1_000_000;

fn swdaq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
}

/// Event-builder events in the FRD files under `out` (`swdaq inspect --json` of each).
fn frd_events(out: &Path) -> u64 {
    let mut events = 0;
    for entry in walk(out) {
        if entry.extension().is_some_and(|e| e == "raw") {
            let report = swdaq()
                .args(["inspect", "--json"])
                .arg(&entry)
                .output()
                .unwrap();
            let report: Value = serde_json::from_slice(&report.stdout).unwrap();
            events += report["events"].as_array().map_or(0, |e| e.len() as u64);
        }
    }
    events
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Four FEDs listening on consecutive free UDP ports from the returned base.
fn free_udp_base(feds: u16) -> u16 {
    loop {
        let base = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = base.local_addr().unwrap().port();
        if port < 60_000 && (1..feds).all(|k| UdpSocket::bind(("127.0.0.1", port + k)).is_ok()) {
            return port;
        }
    }
}

/// The datagrams of one garbage kind for 1.5 s, to FEDs 0..3 (FED 3 hears nothing).
fn send_garbage(base: u16, seed: u64) -> [u64; 4] {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = [0u64; 4];
    let until = Instant::now() + Duration::from_millis(1500);
    let mut datagram = vec![0u8; 9000];
    while Instant::now() < until {
        for fed in 0..3u16 {
            let len = match fed {
                // Random bytes, 24 bytes to 8 kB.
                0 => {
                    let len = rng.random_range(24..8000);
                    rng.fill(&mut datagram[..len]);
                    len
                }
                // Zeros.
                1 => {
                    let len = rng.random_range(24..8000);
                    datagram[..len].fill(0);
                    len
                }
                // Too short to hold a FED header and trailer.
                _ => rng.random_range(1..16),
            };
            if socket
                .send_to(&datagram[..len], ("127.0.0.1", base + fed))
                .is_ok()
            {
                sent[fed as usize] += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    sent
}

/// The event builder on UDP, its FEDs sent random bytes, zeros and short datagrams (one
/// kind per FED, the fourth silent): the run ends with its duration, every datagram is
/// counted on its FED and no event is written.
#[test]
fn event_builder_over_udp_writes_no_event_from_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_udp_base(4);
    let feds: Vec<String> = (0..4)
        .map(|id| format!("{{ id = {id}, mean_bytes = 1024, spread_bytes = 128 }}"))
        .collect();
    let config = dir.path().join("evb.toml");
    std::fs::write(
        &config,
        format!(
            "duration_s = 3\nmetrics_addr = \"\"\n[evb]\nbuilder_units = 1\nmin_free_bytes = 0\n\
             output = {:?}\nrus = [[{}], [{}]]\n\
             [evb.input]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{base}\"\nstop_wait = 100\n",
            dir.path().join("out"),
            feds[..2].join(", "),
            feds[2..].join(", "),
        ),
    )
    .unwrap();
    let started = Instant::now();
    let child = common::spawn_run(&config);
    // The run binds its ports within its first second; datagrams before that are refused.
    std::thread::sleep(Duration::from_millis(700));
    let sent = send_garbage(base, 7);
    let limit = (Duration::from_secs(3) + STOP_AND_SLACK).saturating_sub(started.elapsed());
    let run = watch(child, limit);
    let stderr = run.stderr();
    assert!(run.output.status.success(), "{stderr}");
    let s: Value = serde_json::from_slice(&run.output.stdout).unwrap();
    eprintln!(
        "sent {sent:?}; ended {:?} after it started, peak RSS {} kB",
        started.elapsed(),
        run.peak_rss_kb
    );
    assert!(run.peak_rss_kb < RSS_LIMIT_KB, "{} kB", run.peak_rss_kb);

    let written = s["written"].as_u64().unwrap();
    assert_eq!(
        (written, frd_events(&dir.path().join("out"))),
        (0, 0),
        "{s}"
    );
    for (fed, &sent) in sent.iter().enumerate() {
        let f = &s["feds"][fed];
        let ingest = &f["ingest"];
        let taken = ingest["fragments"].as_u64().unwrap() + ingest["too_short"].as_u64().unwrap();
        let dropped = ingest["kernel_dropped"].as_u64().unwrap();
        assert_eq!(taken + dropped, sent, "FED {fed}: {f}");
        assert_eq!(f["good"], 0, "FED {fed}: {f}");
    }
    assert_eq!(s["feds"][2]["ingest"]["too_short"], sent[2], "{s}");
}

/// A hostile FELIX server for card `card` on `listener` until `serve_for` has passed: it answers
/// each subscription as the card would, then sends garbage (odd connections: bytes of no
/// protocol; even: well-framed `Blocks` messages of random blocks) and closes. Returns the
/// connections it served.
fn hostile_felix_server(
    listener: std::net::TcpListener,
    card: u16,
    elinks: u16,
    serve_for: Duration,
) -> std::thread::JoinHandle<u64> {
    use std::io::Write;
    use swdaq_format::felix::BLOCK_SIZE;
    use swdaq_swrod::net::stream::{MessageReader, write_message};
    use swdaq_swrod::net::wire::{Kind, Subscribed};
    std::thread::spawn(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        listener.set_nonblocking(true).unwrap();
        let until = Instant::now() + serve_for;
        let mut served = 0;
        while Instant::now() < until {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut reader = MessageReader::default();
            if !matches!(reader.read(&mut stream), Ok(Some(h)) if h.kind == Kind::Subscribe) {
                continue;
            }
            let answer = Subscribed {
                card,
                elinks,
                ttc_to_host: true,
                block_size: BLOCK_SIZE,
            };
            let mut sequence = 0;
            let _ = write_message(
                &mut stream,
                Kind::Subscribed,
                &mut sequence,
                &answer.encode(),
            );
            served += 1;
            if served % 2 == 1 {
                let mut garbage = vec![0u8; 4096];
                rng.fill(&mut garbage[..]);
                let _ = stream.write_all(&garbage);
            } else {
                let mut blocks = vec![0u8; 16 * BLOCK_SIZE];
                for _ in 0..8 {
                    rng.fill(&mut blocks[..]);
                    let _ = write_message(&mut stream, Kind::Blocks, &mut sequence, &blocks);
                }
            }
        }
        served
    })
}

/// Two cards' FELIX servers on consecutive free ports (card K at the first + K), hostile
/// for `serve_for` (`hostile_felix_server`); card 0's address.
fn hostile_felix_servers(
    elinks: u16,
    serve_for: Duration,
) -> (std::net::SocketAddr, Vec<std::thread::JoinHandle<u64>>) {
    let listeners = loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if let Ok(second) = std::net::TcpListener::bind(("127.0.0.1", port.wrapping_add(1))) {
            break [first, second];
        }
    };
    let address = listeners[0].local_addr().unwrap();
    let servers = (0..)
        .zip(listeners)
        .map(|(card, l)| hostile_felix_server(l, card, elinks, serve_for))
        .collect();
    (address, servers)
}

/// The SW ROD subscribed to FELIX servers that send garbage, then go away, in one process
/// (`topology` empty) or as applications: the run stores no event, counts the garbage, and
/// when the servers stay away longer than `reconnect_s` ends naming card 0's server, with a
/// non-zero exit (it ended "successfully", 0 events).
fn sw_rod_garbage_drill(topology: &str) {
    let dir = tempfile::tempdir().unwrap();
    let elinks = 8;
    let (address, servers) = hostile_felix_servers(elinks, Duration::from_millis(1500));
    let config = dir.path().join("swrod.toml");
    std::fs::write(
        &config,
        format!(
            "duration_s = 4\nmetrics_addr = \"\"\n[swrod]\noutput_dir = {:?}\nmin_free_mb = 0\n\
             cards = 2\nrobs_per_card = 2\nl1a_rate_hz = 0.0\n[swrod.felix]\nelinks = {elinks}\n\
             [swrod.input]\nkind = \"tcp\"\ntcp_address = \"{address}\"\nconnect_timeout_s = 5\nreconnect_s = 0.5\n{topology}",
            dir.path().join("out"),
        ),
    )
    .unwrap();
    let started = Instant::now();
    let child = common::spawn_run(&config);
    let run = watch(child, Duration::from_secs(4) + STOP_AND_SLACK);
    let served: Vec<u64> = servers.into_iter().map(|s| s.join().unwrap()).collect();
    let stderr = run.stderr();
    eprintln!(
        "{served:?} connections served garbage; ended {:?} after it started, peak RSS {} kB",
        started.elapsed(),
        run.peak_rss_kb
    );
    assert!(served.iter().all(|&n| n >= 2), "{served:?}: {stderr}");
    assert!(run.peak_rss_kb < RSS_LIMIT_KB, "{} kB", run.peak_rss_kb);
    assert!(!run.output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("FELIX server {address}: connection lost")),
        "{stderr}"
    );
    let s: Value = serde_json::from_slice(&run.output.stdout).unwrap();
    assert_eq!(s["stored_events"], 0, "{s:#}");
    let malformed: u64 = s["robs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["intake"]["malformed"].as_u64().unwrap_or(0))
        .sum();
    assert!(malformed > 0, "{s:#}");
}

#[test]
fn sw_rod_fed_garbage_by_its_felix_servers_stores_nothing_and_names_the_server() {
    sw_rod_garbage_drill("");
}

#[test]
fn sw_rod_applications_fed_garbage_by_their_felix_servers_store_nothing_and_name_it() {
    let topology = format!(
        "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 2000\n{}",
        common::loopback_swrod_apps()
    );
    sw_rod_garbage_drill(&topology);
}

/// How each raw file's records are damaged.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Everything after the 64-byte header: 1 MB of random bytes (records of random lengths).
    RandomRecords,
    /// Each record's frame bytes random, its length kept: frames of no format.
    RandomFrames,
}

/// Damages every raw file in `dir`.
fn damage_raw_files(dir: &Path, damage: Damage, seed: u64) {
    use swdaq_format::rawfile::{RAW_HEADER_SIZE, RECORD_HEADER_SIZE};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for path in walk(dir) {
        if path.extension().is_none_or(|e| e != "swraw") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        match damage {
            Damage::RandomRecords => {
                bytes.truncate(RAW_HEADER_SIZE);
                bytes.resize(RAW_HEADER_SIZE + (1 << 20), 0);
                rng.fill(&mut bytes[RAW_HEADER_SIZE..]);
            }
            Damage::RandomFrames => {
                let mut at = RAW_HEADER_SIZE;
                while at + RECORD_HEADER_SIZE <= bytes.len() {
                    let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                    let frame = at + RECORD_HEADER_SIZE..at + RECORD_HEADER_SIZE + len;
                    rng.fill(&mut bytes[frame.clone()]);
                    at = frame.end;
                }
            }
        }
        std::fs::write(&path, bytes).unwrap();
    }
}

/// `swdaq run --json` of `config` (its duration 0: to the input's end), watched: it ends,
/// its memory bounded. Its summary (`Null` if it printed none).
fn run_to_input_end(config: &Path) -> (watch::Watched, Value) {
    let child = common::spawn_run(config);
    let run = watch(child, STOP_AND_SLACK + Duration::from_secs(30));
    assert!(run.peak_rss_kb < RSS_LIMIT_KB, "{} kB", run.peak_rss_kb);
    let summary = serde_json::from_slice(&run.output.stdout).unwrap_or(Value::Null);
    (run, summary)
}

/// Each model's file input given raw files whose records are random (`Damage`): the run
/// ends with its input, memory bounded, and stores no event; random record lengths are
/// named as unreadable and fail the run.
fn files_drill(damage: Damage) -> [(watch::Watched, Value); 3] {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let chain = drill_model(dir.path(), "links", &["--links", "1"], damage, |links| {
        format!(
            "[run]\nduration_s = 0\nmetrics_addr = \"\"\noutput_dir = {out:?}\n\
             [source]\nkind = \"file\"\ndirectory = {links:?}\n[emulator]\nlinks = 1\n"
        )
    });
    let fed_args = ["--format", "fed", "--links", "2"];
    let evb = drill_model(dir.path(), "feds", &fed_args, damage, |feds| {
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[evb]\noutput = {out:?}\nmin_free_bytes = 0\n\
             rus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, {{ id = 1, mean_bytes = 1024, spread_bytes = 128 }}]]\n\
             [evb.input]\nkind = \"file\"\ndirectory = {feds:?}\n"
        )
    });
    let card_args = ["--format", "felix", "--links", "2"];
    let swrod = drill_model(dir.path(), "cards", &card_args, damage, |cards| {
        format!(
            "duration_s = 0\nmetrics_addr = \"\"\n[swrod]\noutput_dir = {out:?}\nmin_free_mb = 0\n\
             cards = 2\nl1a_rate_hz = 0.0\n[swrod.input]\nkind = \"file\"\ndirectory = {cards:?}\n"
        )
    });
    [chain, evb, swrod]
}

/// 10 ms of `swdaq gen` with `args` into `dir/name`, damaged, then the model run on it with
/// the configuration `config` writes for that directory, to its input's end.
fn drill_model(
    dir: &Path,
    name: &str,
    args: &[&str],
    damage: Damage,
    config: impl FnOnce(&Path) -> String,
) -> (watch::Watched, Value) {
    let input = dir.join(name);
    let status = swdaq()
        .args(["gen", "--seconds", "0.01"])
        .args(args)
        .arg("--out")
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    damage_raw_files(&input, damage, 3);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config(&input)).unwrap();
    run_to_input_end(&path)
}

#[test]
fn raw_files_of_random_records_are_named_unreadable_in_every_model() {
    let [chain, evb, swrod] = files_drill(Damage::RandomRecords);
    for (model, (run, _)) in [("chain", &chain), ("evb", &evb), ("swrod", &swrod)] {
        assert!(!run.output.status.success(), "{model}: {}", run.stderr());
    }
    assert!(
        chain.0.stderr().contains("link0.swraw"),
        "{}",
        chain.0.stderr()
    );
    assert!(
        evb.0.stderr().contains("FED 0, 1 ended part-way"),
        "{}",
        evb.0.stderr()
    );
    assert!(
        swrod.0.stderr().contains("card0.swraw"),
        "{}",
        swrod.0.stderr()
    );
    assert_eq!(evb.1["written"], 0, "{:#}", evb.1);
    assert_eq!(swrod.1["stored_events"], 0, "{:#}", swrod.1);
}

/// Records whose frames are random (lengths kept): the chain's link checks flag every frame
/// and no record is complete; the event builder writes no event, each an event with no
/// good FED fragment; the SW ROD's decoders count every block corrupt and store nothing.
#[test]
fn raw_files_of_random_frames_make_no_event_in_any_model() {
    let [chain, evb, swrod] = files_drill(Damage::RandomFrames);
    let (chain, evb, swrod) = (&chain.1, &evb.1, &swrod.1);
    let link = &chain["links"][0];
    let frames = link["frames"].as_u64().unwrap();
    assert!(frames > 0, "{link:#}");
    assert_eq!(link["checks"]["frames_ok"], 0, "{link:#}");
    assert_eq!(chain["records"]["complete"], 0, "{:#}", chain["records"]);

    assert_eq!(evb["written"], 0, "{evb:#}");
    assert_eq!(evb["no_data"], evb["triggered"], "{evb:#}");
    for fed in evb["feds"].as_array().unwrap() {
        assert_eq!(fed["good"], 0, "{fed:#}");
        assert!(fed["ingest"]["fragments"].as_u64().unwrap() > 0, "{fed:#}");
    }

    assert_eq!(swrod["stored_events"], 0, "{swrod:#}");
    for rob in swrod["robs"].as_array().unwrap() {
        let decoder = &rob["decoder"];
        assert!(decoder["blocks"].as_u64().unwrap() > 0, "{decoder:#}");
        assert_eq!(decoder["corrupt_blocks"], decoder["blocks"], "{decoder:#}");
    }
}
