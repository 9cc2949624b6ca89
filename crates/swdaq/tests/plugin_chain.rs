//! A detector swdaq has never seen, read out by time window (#35): two streaming boards
//! (`examples/plugins/streaming_board.c`'s packets: a 16-byte header with board id, channel and
//! sample counts and the slice's timestamp, then the samples) send one UDP packet per 64 µs
//! slice to `swdaq run` of the chain with `source.format = "board"`; the board's C plugin,
//! built here with the machine's gcc, decodes the packets and finds hits, and the chain's
//! self-trigger fires on them. Board 0 sees a pulse on six channels every 16 ms; board 1 sees
//! none and never sends one slice inside the window of pulse 5.
//!
//! Checked against what was sent: one primitive per pulsed channel, one record per pulse, each
//! record's fragment of a link holding exactly the packets of its window as board frames (read
//! here from the layout `swdaq_format::board_frame` documents, not with it), the record of
//! pulse 5 flagged incomplete for link 1 and its missing slice counted; `swdaq inspect` reads
//! the files. A datagram the kernel dropped is allowed only as counted.

mod common;
use common::served::Served;
#[path = "../../swdaq-plugin/tests/common/mod.rs"]
mod plugins;

use plugins::{assert_refused_naming, build_c_plugin};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;
use swdaq_format::Fragment;
use swdaq_store::RecordFileReader;

const SOURCE: &str = "examples/plugins/streaming_board.c";
const CHANNELS: u16 = 16;
const SAMPLES: u16 = 64;
/// The boards' clock: 1 MHz, one tick per sample.
const CLOCK_HZ: u64 = 1_000_000;
const FIRST_TIMESTAMP: u64 = 1_000_000;
const SLICES: u64 = 7_800;
const PEDESTAL: u16 = 100;
/// Board 0's pulses: at sample 10 of these slices, on channels 2..8.
const PULSE_EVERY: u64 = 250;
const FIRST_PULSE: u64 = 100;
const PULSED: std::ops::Range<u16> = 2..8;
/// Board 1 never sends the slice after this pulse's.
const GAP_PULSE: u64 = 5;

fn pulse_slices() -> impl Iterator<Item = u64> {
    (FIRST_PULSE..SLICES - 4).step_by(PULSE_EVERY as usize)
}

fn timestamp(slice: u64) -> u64 {
    FIRST_TIMESTAMP + slice * u64::from(SAMPLES)
}

/// Board `board`'s packet of `slice`: pedestal and a little noise, the pulses on board 0.
fn packet(board: u16, slice: u64) -> Vec<u8> {
    let pulsed =
        board == 0 && slice >= FIRST_PULSE && (slice - FIRST_PULSE).is_multiple_of(PULSE_EVERY);
    let mut out = Vec::with_capacity(16 + 2 * usize::from(CHANNELS * SAMPLES));
    out.extend_from_slice(&0x5B0Au16.to_be_bytes());
    out.extend_from_slice(&board.to_be_bytes());
    out.extend_from_slice(&CHANNELS.to_be_bytes());
    out.extend_from_slice(&SAMPLES.to_be_bytes());
    out.extend_from_slice(&timestamp(slice).to_be_bytes());
    for s in 0..SAMPLES {
        for c in 0..CHANNELS {
            let noise = ((slice as u16).wrapping_mul(7) ^ s.wrapping_mul(13) ^ c) % 7;
            let signal = if pulsed && PULSED.contains(&c) && (10..15).contains(&s) {
                400
            } else {
                0
            };
            out.extend_from_slice(&(PEDESTAL - 3 + noise + signal).to_be_bytes());
        }
    }
    out
}

fn skipped(board: u16, slice: u64) -> bool {
    board == 1 && slice == FIRST_PULSE + GAP_PULSE * PULSE_EVERY + 1
}

/// Sends every slice of both boards, paced (about the boards' real rate).
fn send(port: u16) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for slice in 0..SLICES {
        for board in 0..2u16 {
            if !skipped(board, slice) {
                socket
                    .send_to(&packet(board, slice), ("127.0.0.1", port + board))
                    .unwrap();
            }
        }
        if slice % 32 == 31 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn configuration(dir: &Path, plugin: &Path, port: u16, extra: &str) -> PathBuf {
    let config = dir.join("boards.toml");
    std::fs::write(
        &config,
        format!(
            r#"[run]
duration_s = 10
metrics_addr = ""
output_dir = {records:?}
[source]
kind = "udp"
format = "board"
udp_address = "127.0.0.1:{port}"
first_timestamp = {FIRST_TIMESTAMP}
[source.board]
clock_hz = {CLOCK_HZ}
ticks_per_frame = {SAMPLES}
max_payload_bytes = 4096
max_hit_ticks = 128
[source.board.decoder]
plugin = {plugin:?}
[source.board.processor]
plugin = {plugin:?}
config = {{ threshold = 50, pedestal = {PEDESTAL}, channels_per_board = {CHANNELS} }}
[emulator]
links = 2
[readout]
buffer_s = 0.5
[trigger]
window_before_ticks = 64
window_after_ticks = 192
[trigger.multiplicity]
group_channels = 16
window_ticks = 64
threshold = 4
[trigger.track]
enabled = false
[trigger.periodic]
enabled = false
{extra}"#,
            records = dir.join("records"),
        ),
    )
    .unwrap();
    config
}

fn start(config: &Path, port: u16) -> Child {
    let child = common::spawn_run(config);
    common::wait_for_udp_ports(port, 2);
    child
}

/// The board frames of a fragment's payload as (timestamp, payload), read from the layout
/// documented in `swdaq_format::board_frame`: "SWBF", payload length u32, timestamp u64,
/// source u32, flags u32, the payload padded to 8 bytes.
fn board_frames(mut payload: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut frames = Vec::new();
    while !payload.is_empty() {
        assert_eq!(&payload[..4], b"SWBF");
        let len = u32::from_le_bytes(payload[4..8].try_into().unwrap()) as usize;
        let timestamp = u64::from_le_bytes(payload[8..16].try_into().unwrap());
        frames.push((timestamp, payload[24..24 + len].to_vec()));
        payload = &payload[24 + len.next_multiple_of(8)..];
    }
    frames
}

fn record_files(dir: &Path) -> Vec<PathBuf> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("records"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hdf5"))
        .collect();
    assert!(!files.is_empty(), "no record file");
    files
}

/// Checks the run against what was sent (see the module's comment).
fn check_against_what_was_sent(s: &Value, dir: &Path) {
    let pulses = pulse_slices().count() as u64;
    let links = s["links"].as_array().unwrap();
    let missing: Vec<u64> = links
        .iter()
        .map(|l| l["checks"]["missing_frames"].as_u64().unwrap())
        .collect();
    for (board, l) in links.iter().enumerate() {
        assert_eq!(
            l["frames"].as_u64().unwrap() + missing[board],
            SLICES,
            "link {board}: every slice arrived or is counted missing: {l}"
        );
        assert_eq!(l["decode_errors"], 0, "{l}");
        let processing = &l["processing"];
        assert_eq!(processing["plugin_errors"], 0, "{l}");
        assert_eq!(processing["late_primitives"], 0, "{l}");
        assert_eq!(processing["impossible_primitives"], 0, "{l}");
    }
    assert!(missing[1] >= 1, "board 1's missing slice is counted");
    let lossless = missing == [0, 1];
    eprintln!(
        "missing slices per link {missing:?}, decisions {}, primitives {}",
        s["trigger"]["decisions"], links[0]["trigger_primitives"]
    );
    if lossless {
        assert_eq!(
            links[0]["trigger_primitives"].as_u64().unwrap(),
            pulses * PULSED.len() as u64,
            "one primitive per pulsed channel"
        );
        assert_eq!(links[1]["trigger_primitives"], 0);
        assert_eq!(s["trigger"]["decisions"].as_u64().unwrap(), pulses);
    }

    let sent: Vec<BTreeMap<u64, Vec<u8>>> = (0..2u16)
        .map(|board| {
            (0..SLICES)
                .filter(|&slice| !skipped(board, slice))
                .map(|slice| (timestamp(slice), packet(board, slice)))
                .collect()
        })
        .collect();
    let mut by_pulse = BTreeMap::new();
    for path in record_files(dir) {
        let reader = RecordFileReader::open(&path).unwrap();
        for record in reader.records().unwrap() {
            let record = record.unwrap();
            let slice = (record.header.trigger_timestamp - FIRST_TIMESTAMP) / u64::from(SAMPLES);
            let pulse = (slice - FIRST_PULSE) / PULSE_EVERY;
            assert_eq!(
                slice,
                FIRST_PULSE + pulse * PULSE_EVERY,
                "a record at a pulse"
            );
            let mut incomplete = Vec::new();
            for (request, bytes) in record.header.components.iter().zip(&record.fragments) {
                let fragment = Fragment::parse(bytes).unwrap();
                if fragment.header.fragment_type.0 == 6 {
                    continue; // the trigger's TPs of the window
                }
                assert_eq!(fragment.header.fragment_type.0, 101, "Detector_Frames");
                let link = request.component.id as usize;
                if fragment.header.error_bits != 0 {
                    incomplete.push(link);
                    assert!(missing[link] > 0, "link {link} flagged without loss");
                    continue;
                }
                let want: Vec<(u64, Vec<u8>)> = sent[link]
                    .range(
                        request.window_begin.saturating_sub(u64::from(SAMPLES) - 1)
                            ..request.window_end,
                    )
                    .map(|(t, p)| (*t, p.clone()))
                    .collect();
                assert!(!want.is_empty());
                assert!(
                    board_frames(fragment.payload) == want,
                    "pulse {pulse} link {link}: exactly the packets of the window"
                );
            }
            if pulse == GAP_PULSE {
                assert!(incomplete.contains(&1), "pulse {pulse}: link 1 flagged");
            } else if lossless {
                assert!(incomplete.is_empty(), "pulse {pulse}: {incomplete:?}");
            }
            assert!(
                by_pulse.insert(pulse, incomplete).is_none(),
                "one record per pulse"
            );
        }
    }
    eprintln!("records of {} pulses: {by_pulse:?}", by_pulse.len());
    if lossless {
        assert_eq!(by_pulse.len() as u64, pulses, "every pulse recorded");
    }
    for path in record_files(dir) {
        let inspect = Command::new(env!("CARGO_BIN_EXE_swdaq"))
            .arg("inspect")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&inspect.stdout);
        assert!(inspect.status.success(), "{text}");
        assert!(text.contains("Detector_Frames"), "{text}");
    }
    // The event display draws a board record raw (payload bytes versus slices).
    let png = dir.join("pulse.png");
    let display = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .arg("display")
        .arg(&record_files(dir)[0])
        .args(["--record", "1", "-o"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        display.status.success(),
        "{}",
        String::from_utf8_lossy(&display.stderr)
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
}

/// How the run is driven.
enum How {
    /// `swdaq run` in one process.
    OneProcess,
    /// `swdaq run` of the chain's applications, one readout application per board.
    Applications,
    /// `swdaq serve` and `swdaq ctl`: configure, start, stop once every packet is sent.
    Served,
}

/// Runs the boards as `how` says, into `dir/records`, and checks the run.
fn boards_read_out_by_window(how: How) {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), SOURCE, "streaming_board", &[]);
    let port = common::free_udp_ports(2);
    let s = match how {
        How::OneProcess => {
            let run = start(&configuration(dir.path(), &plugin, port, ""), port);
            send(port);
            common::summary_of(run)
        }
        How::Applications => {
            let apps = common::loopback_apps(1);
            let run = start(&configuration(dir.path(), &plugin, port, &apps), port);
            send(port);
            common::summary_of(run)
        }
        How::Served => {
            let server = Served::start(&configuration(dir.path(), &plugin, port, ""));
            let ctl = |command: &str| server.ctl(&[command]);
            ctl("configure");
            assert_eq!(ctl("start")["run_number"], 1);
            common::wait_for_udp_ports(port, 2);
            send(port);
            // Every packet is in the sockets: a moment for the trigger, then the stop.
            std::thread::sleep(Duration::from_millis(500));
            ctl("stop")
        }
    };
    check_against_what_was_sent(&s, dir.path());
}

#[test]
fn streaming_boards_trigger_on_their_plugin_s_hits_and_are_read_out_by_window() {
    boards_read_out_by_window(How::OneProcess);
}

#[test]
fn streaming_boards_as_applications_of_a_topology() {
    boards_read_out_by_window(How::Applications);
}

#[test]
fn streaming_boards_under_swdaq_serve() {
    boards_read_out_by_window(How::Served);
}

#[test]
fn a_board_plugin_refused_at_configure_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build_c_plugin(dir.path(), SOURCE, "streaming_board", &[]);
    let port = common::free_udp_ports(2);
    let config = configuration(dir.path(), &plugin, port, "");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("threshold = 50,", "threshold = 50, gain = 2,");
    std::fs::write(&config, text).unwrap();
    let out = common::swdaq_run(&config);
    assert_refused_naming(
        &out,
        &plugin,
        "source.board.processor",
        "no such key \"gain\"",
    );
}
