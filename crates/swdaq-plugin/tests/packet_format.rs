//! The no-code packet format: configuration checks, framings, CRCs and resynchronisation.

mod common;

use common::*;
use swdaq_plugin::*;

fn refused(text: &str) -> String {
    PacketFormat::from_toml(text)
        .expect_err("refused")
        .to_string()
}

#[test]
fn a_format_that_cannot_describe_packets_is_refused_at_configure() {
    let cases = [
        (
            "framing = \"fixed\"\nheader_bytes = 0\npacket_bytes = 8",
            "packet format: header_bytes must be at least 1",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8",
            "packet format: fixed framing needs packet_bytes",
        ),
        (
            "framing = \"length_field\"\nheader_bytes = 8",
            "packet format: length_field framing needs a length field",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 8\ntimestamp = { offset = 4, width = 8, order = \"big\" }",
            "packet format: timestamp: bytes 4..12 are beyond the 8-byte header",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 8\nsource_id = { offset = 0, width = 3, order = \"big\" }",
            "packet format: source_id: width 3 is not 1, 2, 4 or 8",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 8\nmagic = { offset = 0, width = 1, order = \"big\", value = 0x100 }",
            "packet format: magic value 0x100 does not fit in 1 bytes",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 4",
            "packet format: packet_bytes 4 is smaller than the 8-byte minimum packet",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 10\ncrc = { kind = \"crc32\", at = 8, order = \"big\", over = [0, 0] }",
            "packet format: packet_bytes 10 is smaller than the 12-byte minimum packet",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 16\ncrc = { kind = \"crc32\", at = -4, order = \"big\", over = [4, 4] }",
            "packet format: crc: over [4, 4] is empty or reversed",
        ),
        (
            "framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 16\ncrc = { kind = \"crc32\", at = -2, order = \"big\", over = [0, -4] }",
            "packet format: crc: at = -2 leaves no room for its 4 bytes",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(refused(text), message, "{text}");
    }
    assert!(
        refused("framing = \"sometimes\"\nheader_bytes = 8")
            .starts_with("packet format: unknown variant `sometimes`")
    );
    assert!(
        refused("framing = \"fixed\"\nheader_bytes = 8\npacket_bytes = 8\nevent = 3")
            .contains("unknown field `event`")
    );
}

/// Fixed 16-byte packets: magic u8 0x5A, source u8, event u16 LE, 8 data bytes, CRC-32C (LE)
/// of the first 12 bytes in the last 4.
const FIXED_WITH_CRC: &str = r#"
framing = "fixed"
header_bytes = 4
packet_bytes = 16
magic = { offset = 0, width = 1, order = "little", value = 0x5A }
source_id = { offset = 1, width = 1, order = "little" }
event_number = { offset = 2, width = 2, order = "little" }
crc = { kind = "crc32c", at = -4, order = "little", over = [0, -4] }
"#;

fn fixed_packet(source: u8, event: u16) -> Vec<u8> {
    let mut packet = vec![0x5A, source];
    packet.extend_from_slice(&event.to_le_bytes());
    packet.extend_from_slice(&[event as u8; 8]);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&packet);
    packet.extend_from_slice(&crc.to_le_bytes());
    packet
}

#[test]
fn a_packet_failing_its_crc_is_skipped_and_the_next_one_found() {
    let mut format = PacketFormat::from_toml(FIXED_WITH_CRC).unwrap();
    let mut block: Vec<u8> = (0..3).flat_map(|e| fixed_packet(9, e)).collect();
    block[16 + 6] ^= 1; // the second packet's data
    let mut fragments = Vec::new();
    let error = format.decode(&block, &mut fragments).unwrap_err();
    assert_eq!(error.consumed, 48);
    assert_eq!(
        error.problem.to_string(),
        "16 bytes of garbage at byte 16 (CRC mismatch) skipped"
    );
    let events: Vec<_> = fragments
        .iter()
        .map(|f| (f.offset, f.source_id, f.event_number))
        .collect();
    assert_eq!(events, [(0, 9, Some(0)), (32, 9, Some(2))]);
    assert_eq!(
        fragments[0].timestamp, None,
        "no timestamp field configured"
    );
    let counts = format.counts();
    assert_eq!(
        (counts.packets, counts.crc_mismatch, counts.garbage_bytes),
        (2, 1, 16)
    );
}

#[test]
fn a_length_counting_the_header_and_a_crc_of_the_standard_check_string() {
    // Header: length u16 BE (whole packet) and CRC-32 (BE) of the payload after the header.
    let text = r#"
        framing = "length_field"
        header_bytes = 6
        length_includes_header = true
        length = { offset = 0, width = 2, order = "big" }
        crc = { kind = "crc32", at = 2, order = "big", over = [6, 0] }  # the payload
    "#;
    let mut format = PacketFormat::from_toml(text).unwrap();
    // CRC-32 of "123456789" is 0xCBF43926 (the catalogue's check value).
    let mut block = vec![0, 15, 0xCB, 0xF4, 0x39, 0x26];
    block.extend_from_slice(b"123456789");
    let mut fragments = Vec::new();
    assert_eq!(format.decode(&block, &mut fragments), Ok(15));
    assert_eq!(
        fragments,
        [Fragment {
            offset: 0,
            length: 15,
            ..Fragment::default()
        }]
    );
    // A half packet waits for the rest.
    fragments.clear();
    assert_eq!(format.decode(&block[..10], &mut fragments), Ok(0));
    assert!(fragments.is_empty());
}

#[test]
fn lengths_beyond_the_limits_are_garbage() {
    let mut format = PacketFormat::from_toml(BOARD_FORMAT).unwrap();
    let mut block = board_packet(1, 1, 1, &[1, 2]);
    block[19] = 0xFF; // payload length 0xFF0000FF: beyond max_packet_bytes
    block[16] = 0xFF;
    block.extend_from_slice(&board_packet(1, 2, 2, &[3]));
    let mut fragments = Vec::new();
    let error = format.decode(&block, &mut fragments).unwrap_err();
    assert_eq!(
        error.problem.to_string(),
        "24 bytes of garbage at byte 0 (length out of range) skipped"
    );
    assert_eq!(fragments.len(), 1);
    assert_eq!(fragments[0].event_number, Some(2));
    assert_eq!(format.counts().bad_length, 1);
}

#[test]
fn a_header_crc_checks_packets_of_any_length() {
    // Length-framed: magic u8, length u8 (payload), CRC-32 (BE) of those 2 bytes at 2.
    let text = r#"
        framing = "length_field"
        header_bytes = 6
        magic = { offset = 0, width = 1, order = "big", value = 0x77 }
        length = { offset = 1, width = 1, order = "big" }
        crc = { kind = "crc32", at = 2, order = "big", over = [0, 2] }
    "#;
    let packet = |payload: &[u8]| {
        let mut bytes = vec![0x77, payload.len() as u8];
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    };
    let mut block = [packet(&[1, 2, 3]), packet(&[]), packet(&[9; 40])].concat();
    // The second packet's length: without the header CRC the decoder would wait for 120 bytes.
    block[10] = 0x78;
    let mut format = PacketFormat::from_toml(text).unwrap();
    let mut fragments = Vec::new();
    let error = format.decode(&block, &mut fragments).unwrap_err();
    assert_eq!(error.consumed, block.len());
    assert_eq!(
        fragments
            .iter()
            .map(|f| (f.offset, f.length))
            .collect::<Vec<_>>(),
        [(0, 9), (15, 46)]
    );
    assert_eq!(
        (format.counts().crc_mismatch, format.counts().garbage_bytes),
        (1, 6)
    );
}

#[test]
fn a_stream_waiting_beyond_its_limit_drops_the_bytes_and_says_so() {
    let mut stream = Stream::new(PacketFormat::from_toml(BOARD_FORMAT).unwrap(), 100);
    // A header announcing 1000 samples: the decoder waits for them.
    let packet = board_packet(1, 1, 1, &[0; 1000]);
    assert_eq!(stream.push(&packet[..90], |_, _| unreachable!()), Ok(()));
    assert_eq!(stream.pending(), 90);
    let error = stream
        .push(&packet[90..150], |_, _| unreachable!())
        .unwrap_err();
    assert_eq!(
        error.problem.to_string(),
        "a message grew past 100 bytes without being decoded: 150 bytes dropped"
    );
    assert_eq!(stream.pending(), 0);
    // What follows is decoded as usual.
    let mut found = 0;
    let next = board_packet(1, 2, 2, &[5]);
    assert_eq!(stream.push(&next, |_, _| found += 1), Ok(()));
    assert_eq!(found, 1);
}
