//! Properties of the host's checks and of the packet format over random input: never a panic,
//! never a fragment outside the bytes consumed, resynchronisation after garbage.

mod common;

use std::sync::OnceLock;

use common::*;
use proptest::prelude::*;
use swdaq_plugin::*;

/// The scripted plugin, built once for every case.
fn scripted() -> &'static Plugin {
    static PLUGIN: OnceLock<(tempfile::TempDir, Plugin)> = OnceLock::new();
    &PLUGIN
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = build_c_plugin(
                dir.path(),
                "crates/swdaq-plugin/tests/plugins/scripted.c",
                "scripted",
                &[],
            );
            let plugin = Plugin::load(path).unwrap();
            (dir, plugin)
        })
        .1
}

/// A script: status, count, consumed, then raw fragments (offset, length, event, time, source, flags).
fn script() -> impl Strategy<Value = Vec<u8>> {
    let status = prop_oneof![Just(0i64), Just(1), Just(-1), any::<i64>()];
    let small = prop_oneof![0u64..64, any::<u64>()];
    let fragment = (
        small.clone(),
        small.clone(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    );
    (
        status,
        small.clone(),
        small,
        prop::collection::vec(fragment, 0..6),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(status, count, consumed, fragments, tail)| {
            let mut block = Vec::new();
            block.extend_from_slice(&status.to_le_bytes());
            block.extend_from_slice(&count.to_le_bytes());
            block.extend_from_slice(&consumed.to_le_bytes());
            for (offset, length, event, time, source, flags) in fragments {
                for word in [offset, length, event, time] {
                    block.extend_from_slice(&word.to_le_bytes());
                }
                block.extend_from_slice(&source.to_le_bytes());
                block.extend_from_slice(&flags.to_le_bytes());
            }
            block.extend_from_slice(&tail);
            block
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn whatever_a_plugin_returns_the_host_keeps_only_fragments_in_the_block(block in script(), batch in 1usize..5) {
        let mut decoder = PluginDecoder::new(scripted(), "").unwrap().with_batch(batch);
        let mut fragments = Vec::new();
        let result = decoder.decode(&block, &mut fragments);
        let consumed = match &result { Ok(c) => *c, Err(e) => e.consumed };
        prop_assert!(consumed <= block.len());
        for fragment in &fragments {
            prop_assert!(fragment.offset.checked_add(fragment.length).is_some_and(|end| end <= consumed));
            prop_assert!(fragment.bytes(&block).is_some());
        }
        // An error is always counted, and a count always comes with an error.
        prop_assert_eq!(result.is_err(), decoder.error_counts().total() > 0);
    }

    #[test]
    fn the_packet_format_on_random_bytes_stays_in_the_block(block in prop::collection::vec(any::<u8>(), 0..600)) {
        let mut format = PacketFormat::from_toml(BOARD_FORMAT).unwrap();
        let mut fragments = Vec::new();
        let consumed = match format.decode(&block, &mut fragments) { Ok(c) => c, Err(e) => e.consumed };
        prop_assert!(consumed <= block.len());
        for fragment in &fragments {
            prop_assert!(fragment.offset + fragment.length <= consumed);
            prop_assert!(fragment.length >= 20);
        }
    }

    #[test]
    fn packets_between_garbage_split_anywhere_are_all_found(
        packets in prop::collection::vec((any::<u16>(), prop::collection::vec(any::<u16>(), 0..20), prop::collection::vec(0u8..0xB0, 0..30)), 1..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        // Garbage bytes below 0xB0 can never start the magic word 0xB0A4: every packet must be found.
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for (i, (board, samples, garbage)) in packets.iter().enumerate() {
            stream.extend_from_slice(garbage);
            let packet = board_packet(*board, i as u32, 7 * i as u64, samples);
            expected.push((*board as u32, Some(i as u64), packet.clone()));
            stream.extend_from_slice(&packet);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut decoder = Stream::new(PacketFormat::from_toml(BOARD_FORMAT).unwrap(), 1 << 21);
        let mut found = Vec::new();
        for piece in cuts.windows(2) {
            let _ = decoder.push(&stream[piece[0]..piece[1]], |f, bytes| found.push((f.source_id, f.event_number, bytes.to_vec())));
        }
        prop_assert_eq!(found, expected);
        let garbage: usize = packets.iter().map(|p| p.2.len()).sum();
        prop_assert_eq!(decoder.decoder().counts().garbage_bytes as usize + decoder.pending(), garbage);
    }
}
