//! The mirror against what gcc and g++ make of `include/swdaq_plugin.h`.

use std::mem::offset_of;
use std::path::Path;
use std::process::Command;
use swdaq_plugin_abi::*;

/// What `tests/abi_layout.c` prints for the header, made from this mirror.
fn mirror_layout() -> String {
    macro_rules! size {
        ($c:literal, $t:ty) => {
            format!("{} size {}\n", $c, size_of::<$t>())
        };
    }
    macro_rules! field {
        ($c:literal, $t:ty, $f:ident) => {
            format!("{}.{} {}\n", $c, stringify!($f), offset_of!($t, $f))
        };
    }
    [
        size!("swdaq_fragment", RawFragment),
        field!("swdaq_fragment", RawFragment, offset),
        field!("swdaq_fragment", RawFragment, length),
        field!("swdaq_fragment", RawFragment, event_number),
        field!("swdaq_fragment", RawFragment, timestamp),
        field!("swdaq_fragment", RawFragment, source_id),
        field!("swdaq_fragment", RawFragment, flags),
        size!("swdaq_chunk", RawChunk),
        field!("swdaq_chunk", RawChunk, data),
        field!("swdaq_chunk", RawChunk, length),
        field!("swdaq_chunk", RawChunk, link),
        field!("swdaq_chunk", RawChunk, reserved),
        size!("swdaq_fragment_ref", RawFragmentRef),
        field!("swdaq_fragment_ref", RawFragmentRef, data),
        field!("swdaq_fragment_ref", RawFragmentRef, length),
        field!("swdaq_fragment_ref", RawFragmentRef, event_number),
        field!("swdaq_fragment_ref", RawFragmentRef, timestamp),
        field!("swdaq_fragment_ref", RawFragmentRef, source_id),
        field!("swdaq_fragment_ref", RawFragmentRef, flags),
        size!("swdaq_trigger_primitive", RawTriggerPrimitive),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, timestamp),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, channel),
        field!(
            "swdaq_trigger_primitive",
            RawTriggerPrimitive,
            time_over_threshold
        ),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, adc_peak),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, adc_integral),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, flags),
        field!("swdaq_trigger_primitive", RawTriggerPrimitive, reserved),
        size!("swdaq_event", RawEvent),
        field!("swdaq_event", RawEvent, event_number),
        field!("swdaq_event", RawEvent, fragments),
        field!("swdaq_event", RawEvent, fragment_count),
        size!("swdaq_decision", RawDecision),
        field!("swdaq_decision", RawDecision, accept),
        field!("swdaq_decision", RawDecision, stream),
        size!("swdaq_plugin", RawPlugin),
        field!("swdaq_plugin", RawPlugin, abi_version),
        field!("swdaq_plugin", RawPlugin, struct_size),
        field!("swdaq_plugin", RawPlugin, name),
        field!("swdaq_plugin", RawPlugin, version),
        field!("swdaq_plugin", RawPlugin, create),
        field!("swdaq_plugin", RawPlugin, destroy),
        field!("swdaq_plugin", RawPlugin, last_error),
        field!("swdaq_plugin", RawPlugin, decode),
        field!("swdaq_plugin", RawPlugin, aggregate),
        field!("swdaq_plugin", RawPlugin, process_fragments),
        field!("swdaq_plugin", RawPlugin, filter_events),
        format!("ABI_VERSION {ABI_VERSION}\n"),
        format!(
            "ENTRY {}\n",
            std::str::from_utf8(&ENTRY_SYMBOL[..ENTRY_SYMBOL.len() - 1]).unwrap()
        ),
        format!("OK {OK} NEED_ROOM {NEED_ROOM} ERROR {ERROR}\n"),
        format!("FLAGS {FRAGMENT_KNOWN_FLAGS:#x} {FRAGMENT_DETECTOR_FLAGS:#x}\n"),
    ]
    .concat()
}

#[test]
fn the_mirror_has_the_headers_layout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("abi_layout");
    let status = Command::new("gcc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("include"))
        .arg(root.join("crates/swdaq-plugin-abi/tests/abi_layout.c"))
        .arg("-o")
        .arg(&program)
        .status()
        .expect("gcc runs");
    assert!(status.success());
    let printed = Command::new(&program).output().unwrap();
    assert_eq!(String::from_utf8(printed.stdout).unwrap(), mirror_layout());
}

#[test]
fn the_header_compiles_as_cpp() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("g++")
        .args([
            "-x",
            "c++",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(root.join("include"))
        .arg(root.join("crates/swdaq-plugin-abi/tests/abi_layout.c"))
        .current_dir(dir.path())
        .status()
        .expect("g++ runs");
    assert!(status.success());
}
