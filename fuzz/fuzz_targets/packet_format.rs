#![no_main]
use libfuzzer_sys::fuzz_target;
use swdaq_plugin::{Decoder, PacketFormat, Stream};

/// A length-framed format with a magic word and a header CRC, and a fixed-size one with a
/// trailing CRC: together they reach every check of the decoder.
const LENGTH_FRAMED: &str = r#"
framing = "length_field"
header_bytes = 16
max_packet_bytes = 4096
magic = { offset = 0, width = 2, order = "big", value = 0xB0A4 }
source_id = { offset = 2, width = 2, order = "little" }
event_number = { offset = 4, width = 4, order = "big" }
length = { offset = 8, width = 4, order = "little" }
crc = { kind = "crc32", at = 12, order = "big", over = [0, 12] }
"#;
const FIXED: &str = r#"
framing = "fixed"
header_bytes = 8
packet_bytes = 24
timestamp = { offset = 0, width = 8, order = "little" }
crc = { kind = "crc32c", at = -4, order = "little", over = [0, -4] }
"#;

// Whatever bytes arrive, split however the first byte says: fragments only within the bytes
// consumed, never a panic, and the same packets whole or split.
fuzz_target!(|data: &[u8]| {
    let Some((&control, bytes)) = data.split_first() else { return };
    let text = if control & 1 == 0 { LENGTH_FRAMED } else { FIXED };
    let mut whole = PacketFormat::from_toml(text).expect("the fuzz formats are valid");
    let mut fragments = Vec::new();
    let consumed = match whole.decode(bytes, &mut fragments) {
        Ok(consumed) => consumed,
        Err(error) => error.consumed,
    };
    assert!(consumed <= bytes.len());
    for fragment in &fragments {
        assert!(fragment.offset + fragment.length <= consumed);
    }
    let piece = usize::from(control >> 1).max(1);
    let mut stream = Stream::new(PacketFormat::from_toml(text).unwrap(), 8192);
    let mut split = Vec::new();
    for chunk in bytes.chunks(piece) {
        let _ = stream.push(chunk, |fragment, packet| split.push((fragment.event_number, fragment.timestamp, packet.to_vec())));
    }
    let whole_packets: Vec<_> = fragments
        .iter()
        .map(|f| (f.event_number, f.timestamp, bytes[f.offset..f.offset + f.length].to_vec()))
        .collect();
    // Split, a packet may be found where whole garbage hid it (resync starts elsewhere), so
    // only the packets decoded whole from the start are compared, as far as both agree on.
    if whole.counts().garbage_bytes == 0 {
        assert_eq!(split, whole_packets);
    }
});
