//! `swdaq hwbench --json` carries every row of COMPASS's hardware assessment (issue #36 item
//! 3): memory read and write, sequential and random, 1 KiB to 1 MiB blocks, one thread and
//! every core; CRC32C; the disk's writes with and without `fdatasync` and the read back; each
//! with a positive rate and its unit. The disk rows leave their directory as they found it.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BLOCK_SIZES: [(u64, &str); 4] = [
    (1 << 10, "1KiB"),
    (4 << 10, "4KiB"),
    (64 << 10, "64KiB"),
    (1 << 20, "1MiB"),
];

/// `swdaq hwbench --json --quick` with `flags`; its report.
fn hwbench(flags: &[&str], dir: Option<&Path>) -> Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_swdaq"));
    c.args(["hwbench", "--json", "--quick"]).args(flags);
    if let Some(dir) = dir {
        c.arg("--dir").arg(dir);
    }
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hwbench failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn rows(report: &Value) -> &Vec<Value> {
    report["results"].as_array().expect("results")
}

/// The one row matching `name`, `operation`, `access`, `block_bytes` and `threads`,
/// checked to have a positive rate in GB/s (also under the old `gbps`) and per `items_unit`.
fn row<'a>(
    report: &'a Value,
    name: &str,
    (operation, access): (&str, &str),
    block_bytes: u64,
    threads: u64,
    items_unit: &str,
) -> &'a Value {
    let found: Vec<&Value> = rows(report)
        .iter()
        .filter(|r| {
            r["name"] == name
                && r["operation"] == operation
                && r["access"] == access
                && r["block_bytes"] == block_bytes
                && r["threads"] == threads
        })
        .collect();
    let what = format!("{name} {operation} {access} {block_bytes} B x{threads}");
    assert_eq!(found.len(), 1, "{what}: {found:?}");
    let r = found[0];
    let value = r["value"].as_f64().unwrap();
    assert!(value.is_finite() && value > 0.0, "{what}: {r}");
    assert_eq!(r["unit"], "GB/s", "{what}");
    assert_eq!(r["gbps"].as_f64(), Some(value), "{what}");
    let items = r["items_per_second"].as_f64().unwrap();
    assert!(items.is_finite() && items > 0.0, "{what}: {r}");
    assert_eq!(r["items_unit"], items_unit, "{what}");
    r
}

fn names(report: &Value) -> Vec<&str> {
    rows(report)
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

#[test]
fn every_row_of_compass_table_is_in_the_json_and_the_disk_is_left_clean() {
    let dir = tempfile::tempdir().unwrap();
    let report = hwbench(&[], Some(dir.path()));
    let cores = report["logical_cores"].as_u64().unwrap();
    let thread_counts: &[u64] = if cores > 1 { &[1, cores] } else { &[1] };
    for operation in ["read", "write"] {
        for access in ["sequential", "random"] {
            for (block, label) in BLOCK_SIZES {
                for &threads in thread_counts {
                    row(
                        &report,
                        &format!("memory_{operation}_{access}_{label}"),
                        (operation, access),
                        block,
                        threads,
                        "blocks/s",
                    );
                }
            }
        }
    }
    let checksum = ("checksum", "sequential");
    row(&report, "crc32c", checksum, 1 << 20, 1, "blocks/s");
    let write = ("write", "sequential");
    let read = ("read", "sequential");
    row(&report, "disk_write", write, 1 << 20, 1, "blocks/s");
    row(
        &report,
        "disk_write_fdatasync",
        write,
        1 << 20,
        1,
        "blocks/s",
    );
    row(&report, "disk_read_back", read, 1 << 20, 1, "blocks/s");
    // The rows before COMPASS's are still there for older consumers.
    let names = names(&report);
    for old in [
        "memory_read",
        "memcpy",
        "wibeth_unpack_scalar",
        "protowib_unpack_scalar",
    ] {
        assert!(names.contains(&old), "{old} missing from {names:?}");
    }
    let disk = &report["disk"];
    let canonical = dir.path().canonicalize().unwrap();
    assert_eq!(disk["dir"], canonical.to_str().unwrap());
    assert!(disk["mount"]["filesystem"].is_string(), "{disk}");
    assert_eq!(disk["skipped"], Value::Null);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_disk_without_room_is_skipped_with_the_reason_and_no_disk_leaves_it_out() {
    let dir = tempfile::tempdir().unwrap();
    // A file of about an exabyte: no disk here has twice that free.
    let report = hwbench(&["--disk-mib", "1000000000000"], Some(dir.path()));
    let skipped = report["disk"]["skipped"].as_str().expect("skipped");
    assert!(skipped.contains("MiB free"), "{skipped}");
    assert!(!names(&report).iter().any(|n| n.starts_with("disk_")));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let report = hwbench(&["--no-disk"], None);
    assert_eq!(report["disk"], Value::Null);
    assert!(!names(&report).iter().any(|n| n.starts_with("disk_")));
}

#[test]
fn the_table_names_each_row_with_its_units_and_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_swdaq"))
        .args(["hwbench", "--quick", "--disk-mib", "1", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\ndisk: "), "{text}");
    for part in [
        "memory_write_random_1KiB",
        "blocks/s",
        "disk_write_fdatasync",
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
}
