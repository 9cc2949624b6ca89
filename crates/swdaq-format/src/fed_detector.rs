//! A detector's own payload carried in a FED fragment (#35): what the event builder stores for
//! a front end swdaq decodes with a plugin or a configured packet format, so events built by
//! number from any detector are CMS FRD events that CMS's readers walk FED by FED.
//!
//! The FED header sets "more headers follow" (`FEDHeader::moreHeaders` in cms-sw/cmssw
//! `DataFormats/FEDRawData/interface/FEDHeader.h`), and the payload begins with two words of
//! swdaq's own: an extension header word shaped as a CMS header word (BOE marker, a type
//! nibble, the "more headers" bit at bit 3 clear: none follows), then the detector's
//! timestamp. The detector's bytes follow, zero-padded to whole words; the extension word
//! says how many are its own, so no padding is ever read as data.
//!
//! Extension word:
//!
//! | bits   | field |
//! |--------|-------|
//! | 60..64 | BOE marker (= 0x5) |
//! | 56..60 | [`DETECTOR_PAYLOAD_TYPE`] (= 0xD): the detector's own payload follows |
//! | 32..56 | the detector payload's length in bytes (24 bits) |
//! | 16..32 | the decoder's detector flags (its flag bits 16..31) |
//! | 8..16  | the decoder's swdaq flags (`SWDAQ_FRAGMENT_*` of `include/swdaq_plugin.h`: event number, timestamp, corrupt, truncated) |
//! | 4..8   | this layout's version (1) |
//! | 3      | more headers follow (0) |
//!
//! The word after it is the timestamp (the detector's clock; 0 when the decoder gave none,
//! which the timestamp flag tells).

use crate::error::{FormatError, need};
use crate::fed::{FED_BOE, FED_HEADER_SIZE, FED_TRAILER_SIZE, FED_WORD, FedFragment};
use crate::le::{bits, get_u64, put_u64, with_bits};

/// The extension word's type nibble: a detector's own payload follows.
pub const DETECTOR_PAYLOAD_TYPE: u64 = 0xD;
pub const DETECTOR_PAYLOAD_VERSION: u64 = 1;
/// The extension word and the timestamp word.
pub const DETECTOR_WORDS_SIZE: usize = 2 * FED_WORD;
/// The longest detector payload the 24-bit length field holds.
pub const MAX_DETECTOR_PAYLOAD: usize = (1 << 24) - 1;
/// Flag bits as the plugin ABI numbers them (`SWDAQ_FRAGMENT_*`).
pub const HAS_EVENT_NUMBER: u32 = 0x1;
pub const HAS_TIMESTAMP: u32 = 0x2;

/// What a detector fragment's extension words say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DetectorWords {
    pub payload_bytes: usize,
    /// The decoder's flags as the plugin ABI numbers them: bits 0..8 swdaq's, 16..32 the
    /// detector's (bits 8..16 are not carried).
    pub flags: u32,
    pub timestamp: u64,
}

impl DetectorWords {
    const WHAT: &'static str = "detector payload words";

    /// The fragment's whole size with a `payload_bytes` payload: header, these two words, the
    /// payload in whole words and the trailer.
    pub fn fragment_size(payload_bytes: usize) -> usize {
        FED_HEADER_SIZE
            + DETECTOR_WORDS_SIZE
            + payload_bytes.next_multiple_of(FED_WORD)
            + FED_TRAILER_SIZE
    }

    /// Writes the two words at the start of `out` (at least 16 bytes).
    pub fn write(&self, out: &mut [u8]) -> Result<(), FormatError> {
        need(Self::WHAT, out, DETECTOR_WORDS_SIZE)?;
        if self.payload_bytes > MAX_DETECTOR_PAYLOAD {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "payload length",
                value: self.payload_bytes as u64,
            });
        }
        let mut w = with_bits(0, 60, 4, FED_BOE);
        w = with_bits(w, 56, 4, DETECTOR_PAYLOAD_TYPE);
        w = with_bits(w, 32, 24, self.payload_bytes as u64);
        w = with_bits(w, 16, 16, u64::from(self.flags >> 16));
        w = with_bits(w, 8, 8, u64::from(self.flags & 0xFF));
        w = with_bits(w, 4, 4, DETECTOR_PAYLOAD_VERSION);
        put_u64(out, 0, w);
        put_u64(out, FED_WORD, self.timestamp);
        Ok(())
    }

    /// Reads the two words at the start of a FED fragment's payload; `None` when they are not
    /// swdaq's detector words (another FED's payload).
    pub fn parse(payload: &[u8]) -> Option<DetectorWords> {
        if payload.len() < DETECTOR_WORDS_SIZE {
            return None;
        }
        let w = get_u64(payload, 0);
        let ours = bits(w, 60, 4) == FED_BOE
            && bits(w, 56, 4) == DETECTOR_PAYLOAD_TYPE
            && bits(w, 4, 4) == DETECTOR_PAYLOAD_VERSION;
        ours.then(|| DetectorWords {
            payload_bytes: bits(w, 32, 24) as usize,
            flags: ((bits(w, 16, 16) as u32) << 16) | bits(w, 8, 8) as u32,
            timestamp: get_u64(payload, FED_WORD),
        })
    }

    /// The timestamp when the decoder gave one.
    pub fn timestamp(&self) -> Option<u64> {
        (self.flags & HAS_TIMESTAMP != 0).then_some(self.timestamp)
    }
}

/// A FED fragment's detector payload: its words and its own bytes (padding left out).
#[derive(Debug, Clone, Copy)]
pub struct DetectorPayload<'a> {
    pub words: DetectorWords,
    pub bytes: &'a [u8],
}

/// The detector payload of `fragment` when its header says more headers follow and they are
/// swdaq's detector words; a length beyond the fragment is an error naming it, never a read
/// past it.
pub fn detector_payload<'a>(
    fragment: &FedFragment<'a>,
) -> Result<Option<DetectorPayload<'a>>, FormatError> {
    if !fragment.header.more_headers {
        return Ok(None);
    }
    let payload = fragment.payload();
    let Some(words) = DetectorWords::parse(payload) else {
        return Ok(None);
    };
    let bytes = payload
        .get(DETECTOR_WORDS_SIZE..DETECTOR_WORDS_SIZE + words.payload_bytes)
        .ok_or(FormatError::Inconsistent {
            what: DetectorWords::WHAT,
            field: "payload length beyond the fragment",
            value: words.payload_bytes as u64,
        })?;
    Ok(Some(DetectorPayload { words, bytes }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::{FedHeader, FedTrailer, encode_fed_fragment};
    use proptest::prelude::*;

    fn fragment(words: &DetectorWords, payload: &[u8]) -> Vec<u8> {
        let mut body = vec![0; DETECTOR_WORDS_SIZE + payload.len().next_multiple_of(FED_WORD)];
        words.write(&mut body).unwrap();
        body[DETECTOR_WORDS_SIZE..DETECTOR_WORDS_SIZE + payload.len()].copy_from_slice(payload);
        let header = FedHeader {
            l1_id: 7,
            source_id: 3,
            more_headers: true,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_fed_fragment(&mut out, &header, &FedTrailer::default(), &body);
        out
    }

    proptest! {
        /// Any payload and flags come back exactly, padding left out, and the fragment is
        /// the size `fragment_size` says.
        #[test]
        fn payload_round_trips(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            flags in any::<u32>(),
            timestamp in any::<u64>(),
        ) {
            let words = DetectorWords {
                payload_bytes: payload.len(),
                flags: flags & 0xFFFF_00FF,
                timestamp,
            };
            let bytes = fragment(&words, &payload);
            prop_assert_eq!(bytes.len(), DetectorWords::fragment_size(payload.len()));
            let parsed = FedFragment::parse(&bytes).unwrap();
            prop_assert!(parsed.crc_ok());
            let got = detector_payload(&parsed).unwrap().unwrap();
            prop_assert_eq!(got.words, words);
            prop_assert_eq!(got.bytes, &payload[..]);
        }

        /// Whatever the payload words hold, reading them never panics.
        #[test]
        fn any_payload_reads_without_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut body = body;
            body.truncate(body.len() / FED_WORD * FED_WORD);
            let header = FedHeader { more_headers: true, ..Default::default() };
            let mut out = Vec::new();
            encode_fed_fragment(&mut out, &header, &FedTrailer::default(), &body);
            let _ = detector_payload(&FedFragment::parse(&out).unwrap());
        }
    }

    #[test]
    fn a_length_beyond_the_fragment_is_named() {
        let words = DetectorWords {
            payload_bytes: 9,
            ..Default::default()
        };
        let mut bytes = fragment(&words, &[1; 9]);
        // Claim 100 bytes in the extension word (its CRC is not what is tested here).
        let at = FED_HEADER_SIZE;
        let w = with_bits(get_u64(&bytes, at), 32, 24, 100);
        put_u64(&mut bytes, at, w);
        let error = detector_payload(&FedFragment::parse(&bytes).unwrap()).unwrap_err();
        assert!(error.to_string().contains("beyond the fragment"), "{error}");
    }

    #[test]
    fn another_feds_payload_is_not_read_as_a_detectors() {
        let mut out = Vec::new();
        let header = FedHeader {
            more_headers: true,
            ..Default::default()
        };
        encode_fed_fragment(&mut out, &header, &FedTrailer::default(), &[0xAB; 16]);
        assert!(
            detector_payload(&FedFragment::parse(&out).unwrap())
                .unwrap()
                .is_none()
        );
        let plain = fragment(&DetectorWords::default(), &[]);
        let mut no_more = plain.clone();
        // Header without "more headers": the same words are payload, not ours.
        let w = with_bits(get_u64(&no_more, 0), 3, 1, 0);
        put_u64(&mut no_more, 0, w);
        assert!(
            detector_payload(&FedFragment::parse(&no_more).unwrap())
                .unwrap()
                .is_none()
        );
    }
}
