//! A plugin written with the Rust SDK (examples/plugins/rust-panicky), built as a cdylib by
//! cargo: its panics come back as errors naming the plugin, never as an unwind into the host.

mod common;

use common::build_panicky;
use swdaq_plugin::*;

fn record(source: u32, event: u32) -> [u8; 8] {
    let mut bytes = [0; 8];
    bytes[..4].copy_from_slice(&source.to_le_bytes());
    bytes[4..].copy_from_slice(&event.to_le_bytes());
    bytes
}

#[test]
fn a_rust_plugins_panic_is_a_counted_error_and_the_instance_goes_on() {
    let Some(path) = build_panicky() else { return };
    let plugin = Plugin::load(&path).unwrap();
    assert_eq!((plugin.name(), plugin.version()), ("rust_panicky", "0.1.0"));
    let mut decoder = PluginDecoder::new(&plugin, "").unwrap();

    let block = [
        record(1, 10),
        record(2, 11),
        record(0xDEAD_BEEF, 12),
        record(3, 13),
    ]
    .concat();
    let mut fragments = Vec::new();
    let error = decoder.decode(&block, &mut fragments).unwrap_err();
    assert_eq!(
        error.problem.to_string(),
        "plugin rust_panicky: reported: panicked: marked record at byte 16"
    );
    assert_eq!(decoder.error_counts().reported, 1);
    // The panic left no byte count: the host skips the block, keeping the fragments written.
    assert_eq!(error.consumed, block.len());
    assert_eq!(
        fragments
            .iter()
            .map(|f| (f.source_id, f.event_number))
            .collect::<Vec<_>>(),
        [(1, Some(10)), (2, Some(11))]
    );

    fragments.clear();
    assert_eq!(
        decoder.decode(&block[24..], &mut fragments),
        Ok(8),
        "the instance still decodes"
    );
    assert_eq!(fragments[0].source_id, 3);

    let line = PluginDecoder::new(&plugin, "panic_in_create = true")
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        line,
        format!(
            "plugin {}: create failed: panicked: told to panic in create",
            path.display()
        )
    );
}
