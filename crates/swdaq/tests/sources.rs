//! `swdaq run` fed over UDP by `swdaq gen --udp` in another process, on 127.0.0.1, in one
//! process and as a topology whose readout applications have the UDP sources: every datagram
//! received or counted missing, each complete fragment exactly the frames the generator sent
//! for its window, hit finding scored against the generator's truth; and garbage datagrams
//! counted, never a panic. The tests run one at a time (the machine has two cores, and a busy
//! one loses datagrams).
//!
//! UDP may lose datagrams when the machine is busy (the socket holds ~20 ms of a link at the
//! kernel's `rmem_max`): a record is then allowed to be flagged, but only for a link that
//! counted frames missing.

mod common;
use common::loopback_apps;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use swdaq_format::{Fragment, FragmentType, FrameFormat};
use swdaq_sim::{Detector, SimConfig};
use swdaq_store::RecordFileReader;

const LINKS: u32 = 2;
/// Seconds of data the generator sends per link (real-time paced).
const SECONDS: f64 = 0.5;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn swdaq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_swdaq"))
}

/// Starts `swdaq run --json` reading UDP from `port` (+ link), with `extra` configuration (a
/// topology), and waits until it has bound every link's port.
fn start_run(dir: &Path, port: u16, duration_s: f64, truth: &Path, extra: &str) -> Child {
    let config = dir.join("udp.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nduration_s = {duration_s}\nmetrics_addr = \"\"\noutput_dir = {:?}\n\
             [source]\nkind = \"udp\"\nudp_address = \"127.0.0.1:{port}\"\ntruth = {truth:?}\n\
             [emulator]\nlinks = {LINKS}\n[readout]\nlinks_per_thread = 1\n[trigger.periodic]\nenabled = true\nrate_hz = 20.0\n{extra}",
            dir.join("records"),
        ),
    )
    .unwrap();
    let child = common::spawn_run(&config);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..LINKS).any(|k| UdpSocket::bind(("127.0.0.1", port + k as u16)).is_ok()) {
        assert!(Instant::now() < deadline, "swdaq run never bound its ports");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Every frame `swdaq gen` sends with its defaults, per link, by timestamp.
fn generated_frames() -> Vec<BTreeMap<u64, Vec<u8>>> {
    let detector = Detector::new(SimConfig::default()).unwrap();
    let format = FrameFormat::WibEth;
    let frames = (SECONDS * format.frame_rate_hz()).ceil() as u64;
    (0..LINKS)
        .map(|link| {
            let mut sim = detector.link(link, format, 0);
            let mut frame = vec![0u8; format.frame_size()];
            (0..frames)
                .map(|_| {
                    let info = sim.next_frame(&mut frame);
                    (info.timestamp, frame[..info.len].to_vec())
                })
                .collect()
        })
        .collect()
}

/// Runs `swdaq gen --udp` to `port` (+ link), its truth and files into `dir/gen`.
fn generate(dir: &Path, port: u16) {
    let generator = swdaq()
        .args([
            "gen",
            "--links",
            &LINKS.to_string(),
            "--seconds",
            &SECONDS.to_string(),
        ])
        .arg("--udp")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--out")
        .arg(dir.join("gen"))
        .output()
        .unwrap();
    assert!(
        generator.status.success(),
        "{}",
        String::from_utf8_lossy(&generator.stderr)
    );
}

/// Checks a run fed by [`generate`] against what was sent: every frame received or counted
/// missing, hit finding scored, one record per decision in the HDF5 files under
/// `dir/records`, each fragment of a link without loss exactly the frames of its window.
fn check_against_what_was_sent(s: &Value, dir: &Path, port: u16) {
    let sent = generated_frames();
    let mut lossy = Vec::new();
    for (link, l) in s["links"].as_array().unwrap().iter().enumerate() {
        let missing = l["checks"]["missing_frames"].as_u64().unwrap();
        assert_eq!(
            l["frames"].as_u64().unwrap() + missing,
            sent[link].len() as u64,
            "link {link}: every frame arrived or is counted missing: {l}"
        );
        lossy.push(missing > 0);
        assert_eq!(l["dropped"], 0);
        assert_eq!(
            l["source"]["udp"],
            format!("127.0.0.1:{}", port + link as u16)
        );
    }
    assert!(
        s["hit_finding"]["pulses_5_sigma"].as_u64().unwrap() > 0,
        "scored against the generator's truth: {}",
        s["hit_finding"]
    );
    let decisions = s["trigger"]["decisions"].as_u64().unwrap();
    assert!(decisions >= 5, "{decisions} decisions");

    let mut checked = 0;
    for file in std::fs::read_dir(dir.join("records")).unwrap() {
        let path = file.unwrap().path();
        // Beside the files: a topology's application logs.
        if path.extension().is_none_or(|e| e != "hdf5") {
            continue;
        }
        let reader = RecordFileReader::open(&path).unwrap();
        for record in reader.records().unwrap() {
            let record = record.unwrap();
            for (request, bytes) in record.header.components.iter().zip(&record.fragments) {
                let fragment = Fragment::parse(bytes).unwrap();
                let link = request.component.id as usize;
                if fragment.header.error_bits != 0 {
                    assert!(
                        lossy[link],
                        "record {}: link {link} flagged without loss",
                        record.header.trigger_number
                    );
                    continue;
                }
                if fragment.header.fragment_type != FragmentType::WIBETH {
                    continue;
                }
                let ticks = FrameFormat::WibEth.ticks_per_frame();
                let want: Vec<&[u8]> = sent[link]
                    .range(request.window_begin.saturating_sub(ticks - 1)..request.window_end)
                    .map(|(_, f)| f.as_slice())
                    .collect();
                let got: Vec<&[u8]> = fragment
                    .payload
                    .chunks(FrameFormat::WibEth.frame_size())
                    .collect();
                assert!(!want.is_empty());
                assert!(
                    got == want,
                    "record {} link {link}",
                    record.header.trigger_number
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, decisions, "one record per decision");
    if !lossy.contains(&true) {
        assert_eq!(s["records"]["complete"], decisions);
    }
}

#[test]
fn records_from_a_udp_front_end_hold_exactly_the_frames_it_sent() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_ports(LINKS as u16);
    let truth = dir.path().join("gen").join("truth_pulses.csv");
    let run = start_run(dir.path(), port, 6.0, &truth, "");
    generate(dir.path(), port);
    check_against_what_was_sent(&common::summary_of(run), dir.path(), port);
}

/// `configs/source-udp-apps.toml`'s case: each readout application binds its own links' ports.
#[test]
fn readout_applications_fed_over_udp_hold_exactly_the_frames_sent() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_ports(LINKS as u16);
    let truth = dir.path().join("gen").join("truth_pulses.csv");
    let topology = format!(
        "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\n{}",
        loopback_apps(1)
    );
    let run = start_run(dir.path(), port, 6.0, &truth, &topology);
    generate(dir.path(), port);
    let s = common::summary_of(run);
    let apps = s["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 5, "{apps:?}");
    assert!(apps.iter().all(|a| a["reported"] == true), "{apps:?}");
    check_against_what_was_sent(&s, dir.path(), port);
}

#[test]
fn garbage_datagrams_are_counted_not_fatal() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_ports(LINKS as u16);
    let run = start_run(dir.path(), port, 2.0, Path::new(""), "");
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for n in 0..200usize {
        let garbage = vec![n as u8; 1 + n * 37 % 9000];
        sender.send_to(&garbage, ("127.0.0.1", port)).unwrap();
    }
    let s = common::summary_of(run);
    let link = &s["links"][0];
    assert!(link["error"].is_null(), "{link}");
    // None has a frame's size: each is malformed, counted, and none is buffered.
    assert!((0..200usize).all(|n| 1 + n * 37 % 9000 != FrameFormat::WibEth.frame_size()));
    assert_eq!(link["frames"], 0, "{link}");
    assert_eq!(link["checks"]["bad_size"], 200, "{link}");
    assert!(s["hit_finding"].is_null(), "no truth, no score");
}

/// Random frame-sized datagrams carry random timestamps (~10^11 s of data time apart): the
/// run still ends at its duration, the jumps are counted, and no record is called complete.
#[test]
fn random_frames_end_with_the_run_and_make_no_complete_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_ports(LINKS as u16);
    let duration_s = 2.0;
    let started = Instant::now();
    let run = start_run(dir.path(), port, duration_s, Path::new(""), "");
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    // xorshift64: reproducible random bytes without a dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut frame = vec![0u8; FrameFormat::WibEth.frame_size()];
    for _ in 0..300 {
        for link in 0..LINKS as u16 {
            for chunk in frame.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            sender.send_to(&frame, ("127.0.0.1", port + link)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = common::summary_of(run);
    let took = started.elapsed().as_secs_f64();
    assert!(took < duration_s + 10.0, "the run took {took:.1} s");
    assert!(
        s["trigger"]["data_time_jumps"].as_u64() >= Some(1),
        "{}",
        s["trigger"]
    );
    assert_eq!(s["records"]["complete"], 0, "{}", s["records"]);
}
