//! Building the test plugins with the machine's C compiler, and the triggered board's packets.
#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

/// The triggered board's packet format, as a no-code configuration (the example's file).
pub const BOARD_FORMAT: &str =
    include_str!("../../../../examples/plugins/triggered_board_format.toml");

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

/// A run refused at configure because of `plugin`: a failure, and one stderr line naming the
/// file, the configuration key and `why`.
pub fn assert_refused_naming(out: &std::process::Output, plugin: &Path, key: &str, why: &str) {
    assert!(!out.status.success(), "{plugin:?} was not refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(plugin.to_str().unwrap()))
        .collect();
    assert_eq!(named.len(), 1, "{stderr}");
    assert!(named[0].contains(key) && named[0].contains(why), "{stderr}");
}

/// Builds the example with the cargo running this test; `None` (the test is skipped) only
/// when there is no cargo.
pub fn build_panicky() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rust-panicky");
    let mut child = match Command::new(cargo)
        .args(["build", "--quiet", "--offline", "--manifest-path"])
        .arg(repo_root().join("examples/plugins/rust-panicky/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("no cargo: the Rust plugin test is skipped");
            return None;
        }
        Err(e) => panic!("cargo: {e}"),
    };
    // A cold build of the example and the SDK takes seconds; a hung one must not hang CI.
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("building examples/plugins/rust-panicky took over 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "cargo build of examples/plugins/rust-panicky failed"
    );
    Some(target.join("debug/librust_panicky.so"))
}
