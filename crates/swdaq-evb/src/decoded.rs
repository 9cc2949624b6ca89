//! A detector swdaq has never seen, read as FEDs (#35): `[evb.input.decoder]` names a plugin's
//! decoder or a packet format, and each FED's datagrams are decoded into fragments that
//! become FED fragments around the detector's own payload (`swdaq_format::fed_detector`),
//! numbered by the decoder's event number. From the FED's link on, they are built, checked,
//! flagged incomplete when a board's fragment is missing, and stored like any FED's.
//!
//! The decoding itself is the readout's (`swdaq_readout::decoded`): one decoder instance per
//! FED, the datagrams of one FED one stream to it.

use swdaq_format::fed::{
    FED_HEADER_SIZE, FED_L1_ID_MASK, FED_SOURCE_ID_MAX, FedHeader, FedTrailer, seal_fed_fragment,
};
use swdaq_format::fed_detector::{
    DETECTOR_WORDS_SIZE, DetectorWords, HAS_EVENT_NUMBER, HAS_TIMESTAMP, MAX_DETECTOR_PAYLOAD,
};
use swdaq_plugin::{DecoderSection, Fragment};
use swdaq_readout::decoded::{DecodedSource, Framed, Framing};
use swdaq_readout::source::FrameSource;

/// A decoder that cannot be made, in one line naming the key and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("evb.input.decoder: {0}")]
pub struct DecoderConfigError(#[from] pub swdaq_plugin::SectionError);

/// FED `fed`'s `input` (datagrams of at most `max_datagram` bytes) through the decoder
/// `section` makes, each numbered fragment sealed as a FED fragment.
pub fn fed_source(
    fed: u16,
    input: Box<dyn FrameSource>,
    max_datagram: usize,
    section: &DecoderSection,
) -> Result<DecodedSource<FedFraming>, DecoderConfigError> {
    Ok(DecodedSource::new(
        format!("evb: FED {fed}"),
        input,
        max_datagram,
        section.make()?,
        section.max_message_bytes,
        FedFraming { fed },
    ))
}

/// Seals each decoded fragment as a FED fragment of one FED, numbered by its event number.
pub struct FedFraming {
    fed: u16,
}

impl Framing for FedFraming {
    fn frame(&mut self, fragment: &Fragment, bytes: &[u8], out: &mut Vec<u8>) -> Framed {
        let Some(event) = fragment.event_number else {
            return Framed::Refused("a fragment without an event number");
        };
        if bytes.len() > MAX_DETECTOR_PAYLOAD {
            return Framed::Refused("a fragment longer than a FED's detector payload holds");
        }
        let wrong_fed_id = fragment.source_id != u32::from(self.fed);
        seal(self.fed, event, wrong_fed_id, fragment, bytes, out);
        if wrong_fed_id {
            // Kept: the FED's trailer says "wrong FED id", as CMS's does.
            Framed::Suspect("a fragment naming another source than its FED")
        } else {
            Framed::Good
        }
    }
}

/// Appends `fragment` (its `bytes`) to `sealed` as FED fragment `event` of FED `fed`.
fn seal(
    fed: u16,
    event: u64,
    wrong_fed_id: bool,
    fragment: &Fragment,
    bytes: &[u8],
    sealed: &mut Vec<u8>,
) {
    let payload_bytes = bytes.len();
    let start = sealed.len();
    sealed.resize(start + DetectorWords::fragment_size(payload_bytes), 0);
    let fragment_bytes = &mut sealed[start..];
    let payload_at = FED_HEADER_SIZE + DETECTOR_WORDS_SIZE;
    fragment_bytes[payload_at..payload_at + payload_bytes].copy_from_slice(bytes);
    let timestamp_flag = if fragment.timestamp.is_some() {
        HAS_TIMESTAMP
    } else {
        0
    };
    let words = DetectorWords {
        payload_bytes,
        flags: fragment.flags | HAS_EVENT_NUMBER | timestamp_flag,
        timestamp: fragment.timestamp.unwrap_or(0),
    };
    let header = FedHeader {
        l1_id: (event as u32) & FED_L1_ID_MASK,
        source_id: fed & FED_SOURCE_ID_MAX,
        more_headers: true,
        ..Default::default()
    };
    let trailer = FedTrailer {
        wrong_fed_id,
        ..Default::default()
    };
    // Both cannot fail: the fragment was sized for the words, and the length checked.
    let written = words
        .write(&mut fragment_bytes[FED_HEADER_SIZE..])
        .and_then(|()| seal_fed_fragment(fragment_bytes, &header, &trailer));
    debug_assert!(written.is_ok(), "{written:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::fed::FedFragment;
    use swdaq_format::fed_detector::detector_payload;
    use swdaq_readout::decoded::{Blocks, DecodeCounts};
    use swdaq_readout::source::Poll;

    /// The triggered board's packets as a packet format: magic u16, board id u16, trigger
    /// number u32, timestamp u64, payload length u32 (big-endian), then the payload.
    const BOARD_FORMAT: &str =
        include_str!("../../../examples/plugins/triggered_board_format.toml");

    fn packet(board: u16, trigger: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = 0xB0A4u16.to_be_bytes().to_vec();
        out.extend(board.to_be_bytes());
        out.extend(trigger.to_be_bytes());
        out.extend((u64::from(trigger) * 25).to_be_bytes());
        out.extend((payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn source(fed: u16, datagrams: Vec<Vec<u8>>) -> DecodedSource<FedFraming> {
        let section = DecoderSection {
            format: Some(toml::from_str(BOARD_FORMAT).unwrap()),
            max_message_bytes: 1024,
            ..Default::default()
        };
        let blocks = Box::new(Blocks(datagrams.into()));
        fed_source(fed, blocks, 256, &section).unwrap()
    }

    /// Every FED fragment the source gives, until its end.
    fn drain(source: &mut DecodedSource<FedFraming>) -> Vec<Vec<u8>> {
        let mut slot = vec![0u8; 512];
        let mut out = Vec::new();
        while let Poll::Frame(len) = source.next_frame(&mut slot).unwrap() {
            out.push(slot[..len].to_vec());
        }
        out
    }

    /// Packets, one split across two datagrams and two in one, become FED fragments of this
    /// FED numbered by trigger, each payload exactly the packet and its timestamp kept.
    #[test]
    fn packets_become_fed_fragments_with_their_exact_bytes() {
        let packets: Vec<Vec<u8>> = (1..=4u32)
            .map(|t| packet(7, t, &vec![t as u8; 3 * t as usize]))
            .collect();
        let (head, tail) = packets[1].split_at(9);
        let datagrams = vec![
            packets[0].clone(),
            head.to_vec(),
            tail.to_vec(),
            [packets[2].clone(), packets[3].clone()].concat(),
        ];
        let mut source = source(7, datagrams);
        let fragments = drain(&mut source);
        assert_eq!(fragments.len(), 4);
        for (t, bytes) in (1..=4u32).zip(&fragments) {
            let fragment = FedFragment::parse(bytes).unwrap();
            assert!(fragment.crc_ok());
            assert_eq!((fragment.header.l1_id, fragment.header.source_id), (t, 7));
            assert!(!fragment.trailer.wrong_fed_id);
            let payload = detector_payload(&fragment).unwrap().unwrap();
            assert_eq!(payload.bytes, &packets[t as usize - 1][..]);
            assert_eq!(payload.words.timestamp(), Some(u64::from(t) * 25));
        }
        assert_eq!(source.counts(), DecodeCounts::default());
    }

    /// Garbage is skipped and counted with the good packets around it kept; a packet naming
    /// another board is kept with "wrong FED id" set and counted.
    #[test]
    fn garbage_and_a_foreign_board_are_counted() {
        let datagrams = vec![
            packet(7, 1, b"abcd"),
            vec![0x55; 40],
            packet(9, 2, b"efgh"),
            packet(7, 3, b"ijkl"),
        ];
        let mut source = source(7, datagrams);
        let fragments = drain(&mut source);
        let wrong: Vec<bool> = fragments
            .iter()
            .map(|b| FedFragment::parse(b).unwrap().trailer.wrong_fed_id)
            .collect();
        assert_eq!(wrong, [false, true, false]);
        // The garbage's last byte may begin a magic word: the next datagram tells, and is
        // a block with skipped bytes too.
        let counts = source.counts();
        assert!((1..=2).contains(&counts.problems), "{counts:?}");
        assert_eq!(counts.suspect, 1);
        assert_eq!(source.decode_errors(), counts.problems + 1);
    }

    /// A message cut off by the input's end is counted, never waited for.
    #[test]
    fn an_unfinished_message_at_the_end_is_counted() {
        let whole = packet(7, 1, &[1; 30]);
        let mut source = source(7, vec![whole[..25].to_vec()]);
        assert!(drain(&mut source).is_empty());
        assert_eq!(source.counts().problems, 1);
    }
}
