//! A detector swdaq has never seen, read as FEDs (#35): `[evb.input.decoder]` names a plugin's
//! decoder or a packet format, and each FED's datagrams are decoded into fragments that
//! become FED fragments around the detector's own payload (`swdaq_format::fed_detector`),
//! numbered by the decoder's event number. From the FED's link on, they are built, checked,
//! flagged incomplete when a board's fragment is missing, and stored like any FED's.
//!
//! One decoder instance per FED (instances are never shared between links); the datagrams of
//! one FED are one stream to it, so a message split across datagrams is whole.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use swdaq_format::fed::{
    FED_HEADER_SIZE, FED_L1_ID_MASK, FED_SOURCE_ID_MAX, FedHeader, FedTrailer, seal_fed_fragment,
};
use swdaq_format::fed_detector::{
    DETECTOR_WORDS_SIZE, DetectorWords, HAS_EVENT_NUMBER, HAS_TIMESTAMP, MAX_DETECTOR_PAYLOAD,
};
use swdaq_plugin::{Decoder, Fragment, PacketFormat, Plugin, PluginDecoder, Stream};
use swdaq_readout::source::{FrameSource, Poll};

/// The most bytes of an unfinished message kept waiting for the rest, unless
/// `max_message_bytes` says: well above a test-beam board's packet, a bound on what a decoder
/// that never finishes a message can make a link hold.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// `[evb.input.decoder]`: the plugin (`plugin`, its own `config` table) or the packet format
/// (`format`, a `PacketFormatConfig` table) that decodes every FED's datagrams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecoderSection {
    /// The plugin's shared library; a relative path is taken from the working directory,
    /// never searched on the library path.
    pub plugin: Option<PathBuf>,
    /// The plugin's own table, handed to its `create` as TOML text.
    pub config: toml::Table,
    /// A no-code packet format instead of a plugin.
    pub format: Option<toml::Table>,
    /// The most bytes of one unfinished message kept waiting for the rest.
    pub max_message_bytes: usize,
}

impl Default for DecoderSection {
    fn default() -> Self {
        Self {
            plugin: None,
            config: toml::Table::new(),
            format: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// A decoder that cannot be made, in one line naming the key and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("evb.input.decoder: {0}")]
pub struct DecoderConfigError(pub String);

impl DecoderSection {
    /// One decoder instance, as each FED's link gets: the plugin loaded (a missing file, a
    /// library that is not a plugin, an ABI mismatch or a refused configuration is an error
    /// naming the file) or the format checked.
    pub fn make(&self) -> Result<Box<dyn Decoder + Send>, DecoderConfigError> {
        let fail = |e: &dyn std::fmt::Display| DecoderConfigError(e.to_string());
        if self.max_message_bytes == 0 {
            return Err(DecoderConfigError(
                "max_message_bytes must be at least 1".into(),
            ));
        }
        match (&self.plugin, &self.format) {
            (Some(path), None) => {
                let plugin = Plugin::load(path).map_err(|e| fail(&e))?;
                let config = toml::to_string(&self.config).map_err(|e| fail(&e))?;
                let decoder = PluginDecoder::new(&plugin, &config).map_err(|e| fail(&e))?;
                Ok(Box::new(decoder))
            }
            (None, Some(format)) => {
                let text = toml::to_string(format).map_err(|e| fail(&e))?;
                let format = PacketFormat::from_toml(&text).map_err(|e| fail(&e))?;
                Ok(Box::new(format))
            }
            (Some(_), Some(_)) => Err(DecoderConfigError(
                "give `plugin` or `format`, not both".into(),
            )),
            (None, None) => Err(DecoderConfigError("needs `plugin` or `format`".into())),
        }
    }
}

/// What one FED's decoder could not make a fragment of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeCounts {
    /// Blocks the decoder reported a problem in (bytes skipped, a fragment refused, a plugin
    /// error; the block's good fragments were still kept), datagrams cut short by the kernel,
    /// a message unfinished at the input's end, fragments longer than the payload length
    /// field holds.
    pub problems: u64,
    /// Fragments without an event number: events here are built by number.
    pub unnumbered: u64,
    /// Fragments naming another source than the FED they arrived on (kept, the FED's
    /// trailer says "wrong FED id" as CMS's does).
    pub wrong_source: u64,
}

impl DecodeCounts {
    /// Everything the decoder could not take as a good fragment.
    pub fn total(&self) -> u64 {
        self.problems + self.unnumbered + self.wrong_source
    }
}

/// One FED's datagrams through a decoder: a [`FrameSource`] whose frames are FED fragments.
pub struct DecodedSource {
    fed: u16,
    input: Box<dyn FrameSource>,
    datagram: Vec<u8>,
    stream: Stream<Box<dyn Decoder + Send>>,
    /// Sealed FED fragments waiting for a slot, in arrival order.
    sealed: Vec<u8>,
    ready: VecDeque<Range<usize>>,
    counts: DecodeCounts,
    input_ended: bool,
    /// The first problem has been named.
    named: bool,
}

impl DecodedSource {
    /// FED `fed`'s `input` (datagrams of at most `max_datagram` bytes) through `decoder`;
    /// an unfinished message is kept up to `max_message` bytes.
    pub fn new(
        fed: u16,
        input: Box<dyn FrameSource>,
        max_datagram: usize,
        decoder: Box<dyn Decoder + Send>,
        max_message: usize,
    ) -> DecodedSource {
        DecodedSource {
            fed,
            input,
            datagram: vec![0; max_datagram],
            stream: Stream::new(decoder, max_message),
            sealed: Vec::new(),
            ready: VecDeque::new(),
            counts: DecodeCounts::default(),
            input_ended: false,
            named: false,
        }
    }

    pub fn counts(&self) -> DecodeCounts {
        self.counts
    }

    /// Decodes one datagram, sealing each numbered fragment as a FED fragment.
    fn decode(&mut self, len: usize) {
        if len > self.datagram.len() {
            // The kernel cut the datagram short: what arrived is not the message sent.
            self.counts.problems += 1;
            self.name_first(&format!(
                "a {len}-byte datagram, longer than max_fragment_bytes ({})",
                self.datagram.len()
            ));
            return;
        }
        let Self {
            fed,
            datagram,
            stream,
            sealed,
            ready,
            counts,
            ..
        } = self;
        let before = counts.total();
        let result = stream.push(&datagram[..len], |fragment, bytes| {
            if let Some(range) = seal(*fed, fragment, bytes, sealed, counts) {
                ready.push_back(range);
            }
        });
        if let Err(error) = &result {
            counts.problems += 1;
            self.name_first(&error.to_string());
        } else if counts.total() > before {
            self.name_first("a fragment without an event number, or naming another source");
        }
    }

    /// Says once, on stderr, what the FED's decoder first failed at: the run goes on, and
    /// every failure is counted.
    fn name_first(&mut self, problem: &str) {
        if !self.named {
            self.named = true;
            eprintln!(
                "evb: FED {}: decoder: {problem} (every such problem is counted in feds[].ingest.decode_errors)",
                self.fed
            );
        }
    }
}

/// Appends `fragment` (its `bytes`) to `sealed` as a FED fragment of FED `fed`, or counts
/// why it cannot be one.
fn seal(
    fed: u16,
    fragment: &Fragment,
    bytes: &[u8],
    sealed: &mut Vec<u8>,
    counts: &mut DecodeCounts,
) -> Option<Range<usize>> {
    let Some(event) = fragment.event_number else {
        counts.unnumbered += 1;
        return None;
    };
    if bytes.len() > MAX_DETECTOR_PAYLOAD {
        counts.problems += 1;
        return None;
    }
    let wrong_fed_id = fragment.source_id != u32::from(fed);
    counts.wrong_source += u64::from(wrong_fed_id);
    let payload_bytes = bytes.len();
    let start = sealed.len();
    sealed.resize(start + DetectorWords::fragment_size(payload_bytes), 0);
    let fragment_bytes = &mut sealed[start..];
    let payload_at = FED_HEADER_SIZE + DETECTOR_WORDS_SIZE;
    fragment_bytes[payload_at..payload_at + payload_bytes].copy_from_slice(&bytes[..payload_bytes]);
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
    Some(start..sealed.len())
}

impl FrameSource for DecodedSource {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        loop {
            if let Some(range) = self.ready.pop_front() {
                let len = range.len();
                // A fragment larger than the slot is left out and reported by its length:
                // the link counts it oversized.
                if let Some(to) = slot.get_mut(..len) {
                    to.copy_from_slice(&self.sealed[range]);
                }
                if self.ready.is_empty() {
                    self.sealed.clear();
                }
                return Ok(Poll::Frame(len));
            }
            if self.input_ended {
                return Ok(Poll::End);
            }
            match self.input.next_frame(&mut self.datagram)? {
                Poll::Frame(len) => self.decode(len),
                Poll::Idle => return Ok(Poll::Idle),
                Poll::End => {
                    self.input_ended = true;
                    // An unfinished message at the end of the input never completes.
                    self.counts.problems += u64::from(self.stream.pending() > 0);
                }
            }
        }
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.input.kernel_drops()
    }

    fn decode_errors(&self) -> u64 {
        self.counts.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::fed::FedFragment;
    use swdaq_format::fed_detector::detector_payload;

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

    /// Datagrams handed out one per call, then the end.
    struct Datagrams(VecDeque<Vec<u8>>);

    impl FrameSource for Datagrams {
        fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
            Ok(match self.0.pop_front() {
                Some(d) => {
                    slot[..d.len()].copy_from_slice(&d);
                    Poll::Frame(d.len())
                }
                None => Poll::End,
            })
        }
    }

    fn source(fed: u16, datagrams: Vec<Vec<u8>>) -> DecodedSource {
        let section = DecoderSection {
            format: Some(toml::from_str(BOARD_FORMAT).unwrap()),
            ..Default::default()
        };
        DecodedSource::new(
            fed,
            Box::new(Datagrams(datagrams.into())),
            256,
            section.make().unwrap(),
            1024,
        )
    }

    /// Every FED fragment the source gives, until its end.
    fn drain(source: &mut DecodedSource) -> Vec<Vec<u8>> {
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
        assert_eq!(counts.wrong_source, 1);
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

    #[test]
    fn a_section_without_a_decoder_or_with_two_is_refused() {
        let none = DecoderSection::default().make().err().unwrap().to_string();
        assert!(none.contains("needs `plugin` or `format`"), "{none}");
        let both = DecoderSection {
            plugin: Some("x.so".into()),
            format: Some(toml::Table::new()),
            ..Default::default()
        };
        let error = both.make().err().unwrap().to_string();
        assert!(error.contains("not both"), "{error}");
        let missing = DecoderSection {
            plugin: Some("/nonexistent/libboard.so".into()),
            ..Default::default()
        };
        let error = missing.make().err().unwrap().to_string();
        assert!(error.contains("/nonexistent/libboard.so"), "{error}");
    }
}
