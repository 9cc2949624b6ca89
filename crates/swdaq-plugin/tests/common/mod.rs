//! Building the test plugins with the machine's C compiler, and the triggered board's packets.
#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles `source` (relative to the repository) into `dir/lib<name>.so` with `defines`.
pub fn build_c_plugin(dir: &Path, source: &str, name: &str, defines: &[&str]) -> PathBuf {
    let root = repo_root();
    let output = dir.join(format!("lib{name}.so"));
    let mut gcc = Command::new("gcc");
    gcc.args([
        "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC", "-I",
    ])
    .arg(root.join("include"))
    .arg(root.join(source))
    .arg("-o")
    .arg(&output);
    for define in defines {
        gcc.arg(format!("-D{define}"));
    }
    let status = gcc.status().expect("gcc runs");
    assert!(status.success(), "gcc failed on {source}");
    output
}

pub const BOARD_SOURCE: &str = "examples/plugins/triggered_board.c";
pub const FAULTY_SOURCE: &str = "crates/swdaq-plugin/tests/plugins/faulty.c";

/// The triggered board's packet format, as a no-code configuration.
pub const BOARD_FORMAT: &str = r#"
framing = "length_field"
header_bytes = 20
magic = { offset = 0, width = 2, order = "big", value = 0xB0A4 }
source_id = { offset = 2, width = 2, order = "big" }
event_number = { offset = 4, width = 4, order = "big" }
timestamp = { offset = 8, width = 8, order = "big" }
length = { offset = 16, width = 4, order = "big" }
max_packet_bytes = 1048596
"#;

/// One triggered-board packet: the 20-byte header and the samples.
pub fn board_packet(board: u16, trigger: u32, timestamp: u64, samples: &[u16]) -> Vec<u8> {
    let mut packet = Vec::with_capacity(20 + 2 * samples.len());
    packet.extend_from_slice(&0xB0A4u16.to_be_bytes());
    packet.extend_from_slice(&board.to_be_bytes());
    packet.extend_from_slice(&trigger.to_be_bytes());
    packet.extend_from_slice(&timestamp.to_be_bytes());
    packet.extend_from_slice(&(2 * samples.len() as u32).to_be_bytes());
    for sample in samples {
        packet.extend_from_slice(&sample.to_be_bytes());
    }
    packet
}
