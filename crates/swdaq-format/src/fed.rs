//! CMS FED fragment: what one front-end driver sends per level-1 accept over S-LINK, a 64-bit
//! header, a payload of whole 64-bit words and a 64-bit trailer. Each 64-bit word is stored
//! little-endian. The layout follows cms-sw/cmssw `DataFormats/FEDRawData/src/fed_header.h`
//! and `src/fed_trailer.h` (master, CMSSW_14 series; their 2005 revisions lack the trailer's
//! CRC-modified, S-LINK error and wrong-FED-id bits), read as `FEDHeader`/`FEDTrailer` in
//! `DataFormats/FEDRawData/interface/` do. Bits neither file assigns are read past, never
//! refused.
//!
//! Header word:
//!
//! | bits   | field |
//! |--------|-------|
//! | 60..64 | BOE marker (= 0x5) |
//! | 56..60 | event type |
//! | 32..56 | level-1 id (24 bits) |
//! | 20..32 | bunch crossing (12 bits) |
//! | 8..20  | source (FED) id (12 bits) |
//! | 4..8   | format version |
//! | 3      | more headers follow |
//!
//! Trailer word:
//!
//! | bits   | field |
//! |--------|-------|
//! | 60..64 | EOE marker (= 0xA) |
//! | 32..56 | fragment length in 64-bit words, header and trailer included |
//! | 16..32 | CRC-16 of the fragment ([`fed_crc16`]) |
//! | 15     | wrong FED id |
//! | 14     | S-LINK error |
//! | 8..12  | event status |
//! | 4..8   | TTS state |
//! | 3      | more trailers follow |
//! | 2      | CRC modified on the way |
//!
//! The CRC is CRC-16/CMS (polynomial 0x8005, initial 0xFFFF, not reflected) over every word
//! of the fragment fed most significant byte first, with the trailer's CRC field read as zero.

use crate::error::{FormatError, need};
use crate::le::{bits, get_u64, put_u64, with_bits};

pub const FED_WORD: usize = 8;
pub const FED_HEADER_SIZE: usize = FED_WORD;
pub const FED_TRAILER_SIZE: usize = FED_WORD;
/// Header and trailer: the smallest fragment there is.
pub const FED_MIN_SIZE: usize = FED_HEADER_SIZE + FED_TRAILER_SIZE;
pub const FED_BOE: u64 = 0x5;
pub const FED_EOE: u64 = 0xA;
/// Level-1 ids wrap at 24 bits.
pub const FED_L1_ID_MASK: u32 = 0x00FF_FFFF;
/// Source ids are 12 bits (CMS numbers FEDs 0..4095).
pub const FED_SOURCE_ID_MAX: u16 = 0x0FFF;

/// The frame type of raw files holding one FED's fragments (one record per fragment):
/// swdaq's own code, outside DUNE's fragment types ("FED").
pub const FED_RAW_FILE_TYPE: crate::FragmentType = crate::FragmentType(0x0046_4544);

const CRC_FIELD_SHIFT: u32 = 16;

/// The header word of a FED fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FedHeader {
    pub event_type: u8,
    /// Level-1 accept number, 24 bits.
    pub l1_id: u32,
    /// Bunch crossing, 12 bits.
    pub bx_id: u16,
    /// FED id, 12 bits.
    pub source_id: u16,
    pub version: u8,
    pub more_headers: bool,
}

impl FedHeader {
    const WHAT: &'static str = "FED header";

    pub fn to_word(&self) -> u64 {
        let mut w = 0;
        w = with_bits(w, 60, 4, FED_BOE);
        w = with_bits(w, 56, 4, self.event_type as u64);
        w = with_bits(w, 32, 24, self.l1_id as u64);
        w = with_bits(w, 20, 12, self.bx_id as u64);
        w = with_bits(w, 8, 12, self.source_id as u64);
        w = with_bits(w, 4, 4, self.version as u64);
        with_bits(w, 3, 1, self.more_headers as u64)
    }

    /// Reads the first 8 bytes of `bytes`; the marker must be BOE.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FED_HEADER_SIZE)?;
        let w = get_u64(bytes, 0);
        check_marker(Self::WHAT, w, FED_BOE)?;
        Ok(Self {
            event_type: bits(w, 56, 4) as u8,
            l1_id: bits(w, 32, 24) as u32,
            bx_id: bits(w, 20, 12) as u16,
            source_id: bits(w, 8, 12) as u16,
            version: bits(w, 4, 4) as u8,
            more_headers: bits(w, 3, 1) == 1,
        })
    }
}

/// The trailer word of a FED fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FedTrailer {
    /// Fragment length in 64-bit words, header and trailer included (24 bits).
    pub length_words: u32,
    pub crc: u16,
    pub wrong_fed_id: bool,
    pub slink_error: bool,
    /// Event status, 4 bits.
    pub event_status: u8,
    /// Trigger-throttling state, 4 bits.
    pub tts: u8,
    pub more_trailers: bool,
    pub crc_modified: bool,
}

impl FedTrailer {
    const WHAT: &'static str = "FED trailer";

    pub fn to_word(&self) -> u64 {
        let mut w = 0;
        w = with_bits(w, 60, 4, FED_EOE);
        w = with_bits(w, 32, 24, self.length_words as u64);
        w = with_bits(w, CRC_FIELD_SHIFT, 16, self.crc as u64);
        w = with_bits(w, 15, 1, self.wrong_fed_id as u64);
        w = with_bits(w, 14, 1, self.slink_error as u64);
        w = with_bits(w, 8, 4, self.event_status as u64);
        w = with_bits(w, 4, 4, self.tts as u64);
        w = with_bits(w, 3, 1, self.more_trailers as u64);
        with_bits(w, 2, 1, self.crc_modified as u64)
    }

    /// Reads the first 8 bytes of `bytes`; the marker must be EOE.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FED_TRAILER_SIZE)?;
        let w = get_u64(bytes, 0);
        check_marker(Self::WHAT, w, FED_EOE)?;
        Ok(Self {
            length_words: bits(w, 32, 24) as u32,
            crc: bits(w, CRC_FIELD_SHIFT, 16) as u16,
            wrong_fed_id: bits(w, 15, 1) == 1,
            slink_error: bits(w, 14, 1) == 1,
            event_status: bits(w, 8, 4) as u8,
            tts: bits(w, 4, 4) as u8,
            more_trailers: bits(w, 3, 1) == 1,
            crc_modified: bits(w, 2, 1) == 1,
        })
    }
}

fn check_marker(what: &'static str, word: u64, expected: u64) -> Result<(), FormatError> {
    let got = bits(word, 60, 4);
    if got == expected {
        Ok(())
    } else {
        Err(FormatError::BadMagic {
            what,
            expected: expected as u32,
            got: got as u32,
        })
    }
}

/// CRC-16 of a whole fragment (header to trailer, a multiple of 8 bytes) as the trailer
/// carries it: every word most significant byte first, the trailer's CRC field as zero.
/// Bytes past the last whole word are ignored.
///
/// `crc-fast`'s carry-less-multiply CRC-16/CMS over the words byte-reversed into a
/// per-thread buffer: the FED emulator and every readout-unit check run it over every byte, and the
/// hand-written slice-by-8 it replaced cost most of a readout unit's time (`swdaq bench
/// evb` reports its GB/s). The tests hold it to the `crc` crate's CRC-16/CMS.
pub fn fed_crc16(fragment: &[u8]) -> u16 {
    let whole = &fragment[..fragment.len() / FED_WORD * FED_WORD];
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc16Cms);
    let mut scratch = REVERSED.take();
    // Zeroed once per thread (a no-op after the first call).
    scratch.resize(CRC16_CHUNK, 0);
    let mut chunks = whole.chunks(CRC16_CHUNK).peekable();
    while let Some(chunk) = chunks.next() {
        let reversed = &mut scratch[..chunk.len()];
        // The CRC field is cleared after.
        reverse_words(chunk, reversed);
        if chunks.peek().is_none() {
            // Bits 16..32 of the trailer word are its bytes 4 and 5 most significant first.
            let trailer = reversed.len() - FED_WORD;
            reversed[trailer + 4..trailer + 6].fill(0);
        }
        digest.update(reversed);
    }
    REVERSED.set(scratch);
    digest.finalize() as u16
}

thread_local! {
    /// Each thread's buffer for the byte-reversed words, kept between calls: a stack buffer
    /// was zeroed per call, a 4 KiB `memset` per fragment checked or emulated (`perf` of
    /// `swdaq run`, BENCHMARKS.md's fourth round). Taken and put back, so a nested call
    /// would only allocate its own.
    static REVERSED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Each whole word of `src` byte-reversed into `dst`. Baseline x86-64 has no byte shuffle,
/// so the loop takes a byte-swap, a load and a store per word; compiled for AVX2 it becomes
/// `vpshufb` over 32 bytes at a time, which the CRC-16 of every fragment, twice per fragment
/// in a readout unit (emulator and check), is worth (`swdaq bench evb`'s `crc16_gbps`).
fn reverse_words(src: &[u8], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, all `reverse_words_avx2` needs.
        unsafe { reverse_words_avx2(src, dst) };
        return;
    }
    reverse_words_portable(src, dst);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn reverse_words_avx2(src: &[u8], dst: &mut [u8]) {
    reverse_words_portable(src, dst);
}

/// Inlined into each caller, so it compiles with the caller's target features.
#[inline(always)]
fn reverse_words_portable(src: &[u8], dst: &mut [u8]) {
    for (src, dst) in src
        .chunks_exact(FED_WORD)
        .zip(dst.chunks_exact_mut(FED_WORD))
    {
        let w = u64::from_le_bytes(src.try_into().expect("chunks of 8"));
        dst.copy_from_slice(&w.to_be_bytes());
    }
}

/// Bytes byte-reversed per `crc-fast` call: the per-thread buffer, in which fragments of a
/// few KiB (the emulator's default is 1 KiB) take one call.
const CRC16_CHUNK: usize = 4096;

/// A FED fragment viewed in place. Parsing checks the structure (size, markers, length
/// field); the CRC is checked separately ([`FedFragment::crc_ok`]) because a receiver counts
/// the two failures apart.
#[derive(Debug, Clone, Copy)]
pub struct FedFragment<'a> {
    pub header: FedHeader,
    pub trailer: FedTrailer,
    /// The whole fragment, header to trailer.
    pub bytes: &'a [u8],
}

impl<'a> FedFragment<'a> {
    const WHAT: &'static str = "FED fragment";

    /// Views `bytes` as exactly one fragment.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        need(Self::WHAT, bytes, FED_MIN_SIZE)?;
        if !bytes.len().is_multiple_of(FED_WORD) {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "size in bytes (not whole words)",
                value: bytes.len() as u64,
            });
        }
        let header = FedHeader::parse(bytes)?;
        let trailer = FedTrailer::parse(&bytes[bytes.len() - FED_TRAILER_SIZE..])?;
        if trailer.length_words as usize * FED_WORD != bytes.len() {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "trailer length",
                value: trailer.length_words as u64,
            });
        }
        Ok(Self {
            header,
            trailer,
            bytes,
        })
    }

    /// The last fragment of `bytes`, found from its trailer the way CMS reads FED data
    /// (backwards): returns it and what lies before it.
    pub fn parse_last(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), FormatError> {
        need(Self::WHAT, bytes, FED_MIN_SIZE)?;
        let trailer = FedTrailer::parse(&bytes[bytes.len() - FED_TRAILER_SIZE..])?;
        let size = trailer.length_words as usize * FED_WORD;
        if size < FED_MIN_SIZE || size > bytes.len() {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "trailer length",
                value: trailer.length_words as u64,
            });
        }
        let (before, last) = bytes.split_at(bytes.len() - size);
        Ok((Self::parse(last)?, before))
    }

    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[FED_HEADER_SIZE..self.bytes.len() - FED_TRAILER_SIZE]
    }

    pub fn crc_ok(&self) -> bool {
        fed_crc16(self.bytes) == self.trailer.crc
    }
}

/// The FED fragments of an event's data, found backwards from the last trailer as CMS reads
/// them: the last fragment first, each with where it starts in `data`. A fragment that does
/// not parse ends the walk with its error (what lies before it has no known end).
pub fn fed_fragments(data: &[u8]) -> FedFragments<'_> {
    FedFragments {
        rest: data,
        failed: false,
    }
}

/// The walk of [`fed_fragments`].
pub struct FedFragments<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for FedFragments<'a> {
    /// The fragment's offset in the event's data, and the fragment.
    type Item = Result<(usize, FedFragment<'a>), FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match FedFragment::parse_last(self.rest) {
            Ok((fragment, before)) => {
                self.rest = before;
                Some(Ok((before.len(), fragment)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Appends one fragment to `out`: header, `payload` (whole words), and a trailer carrying
/// `trailer_flags`' flags with the length and CRC filled in. Returns the fragment's range.
pub fn encode_fed_fragment(
    out: &mut Vec<u8>,
    header: &FedHeader,
    trailer_flags: &FedTrailer,
    payload: &[u8],
) -> std::ops::Range<usize> {
    debug_assert!(payload.len().is_multiple_of(FED_WORD));
    let start = out.len();
    out.extend_from_slice(&[0; FED_HEADER_SIZE]);
    out.extend_from_slice(payload);
    out.extend_from_slice(&[0; FED_TRAILER_SIZE]);
    let sealed = seal_fed_fragment(&mut out[start..], header, trailer_flags);
    debug_assert!(sealed.is_ok(), "header and trailer words are there");
    start..out.len()
}

/// Makes `fragment` a FED fragment around the payload already in place between its first
/// and last word: writes the header word and the trailer, with the length (whole words of
/// `fragment`) and the CRC-16 filled in and `trailer_flags`' flags. A producer that writes
/// the payload where the fragment goes (a FED link's slot) seals it there, without a copy.
pub fn seal_fed_fragment(
    fragment: &mut [u8],
    header: &FedHeader,
    trailer_flags: &FedTrailer,
) -> Result<(), FormatError> {
    need(FedFragment::WHAT, fragment, FED_MIN_SIZE)?;
    let size = fragment.len();
    put_u64(fragment, 0, header.to_word());
    let mut trailer = FedTrailer {
        length_words: (size / FED_WORD) as u32,
        crc: 0,
        ..*trailer_flags
    };
    put_u64(fragment, size - FED_TRAILER_SIZE, trailer.to_word());
    trailer.crc = fed_crc16(fragment);
    put_u64(fragment, size - FED_TRAILER_SIZE, trailer.to_word());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CRC16_CMS: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_CMS);

    /// The reference: the `crc` crate over the byte-reversed words, CRC field zeroed.
    fn reference_crc16(fragment: &[u8]) -> u16 {
        let words = fragment.len() / FED_WORD;
        let mut stream = Vec::new();
        for (i, chunk) in fragment.chunks_exact(FED_WORD).enumerate() {
            let mut w = u64::from_le_bytes(chunk.try_into().unwrap());
            if i + 1 == words {
                w = with_bits(w, CRC_FIELD_SHIFT, 16, 0);
            }
            stream.extend_from_slice(&w.to_be_bytes());
        }
        CRC16_CMS.checksum(&stream)
    }

    /// Fragments longer than one byte-reversed chunk: the CRC field is zeroed in the last
    /// chunk only, and the chunks chain.
    #[test]
    fn crc16_spans_chunks() {
        for len in [CRC16_CHUNK, CRC16_CHUNK + 8, 3 * CRC16_CHUNK + 24 + 5] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 + i / 7) as u8).collect();
            assert_eq!(fed_crc16(&bytes), reference_crc16(&bytes), "{len} bytes");
        }
    }

    /// The AVX2 build of the word reversal (used when the CPU has it) and the portable one
    /// agree on every length, whole words or not.
    #[test]
    fn word_reversal_is_the_same_on_every_path() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 37 + i / 5) as u8).collect();
        for len in [0, 7, 8, 9, 64, 104, 999, 1000] {
            let mut portable = vec![0; len];
            reverse_words_portable(&src[..len], &mut portable);
            let mut chosen = vec![0; len];
            reverse_words(&src[..len], &mut chosen);
            assert_eq!(chosen, portable, "{len} bytes");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut avx2 = vec![0; len];
                // SAFETY: the CPU has AVX2.
                unsafe { reverse_words_avx2(&src[..len], &mut avx2) };
                assert_eq!(avx2, portable, "{len} bytes");
            }
            for (i, word) in portable.chunks_exact(FED_WORD).enumerate() {
                let original = &src[i * FED_WORD..(i + 1) * FED_WORD];
                assert!(word.iter().eq(original.iter().rev()));
            }
        }
    }

    #[test]
    fn crc_known_answer() {
        // CRC-16/CMS check value, and the word byte order: one word 0x3132333435363738
        // stored little-endian is fed as "12345678".
        assert_eq!(CRC16_CMS.checksum(b"123456789"), 0xAEE7);
        let mut frag = 0x3132_3334_3536_3738u64.to_le_bytes().to_vec();
        frag.extend_from_slice(&0x3132_3334_3536_3738u64.to_le_bytes());
        // The last word is the trailer: its bytes "56" (bits 16..32) count as zero.
        assert_eq!(
            fed_crc16(&frag),
            CRC16_CMS.checksum(b"12345678\x31\x32\x33\x34\0\0\x37\x38")
        );
    }

    fn header_strategy() -> impl Strategy<Value = FedHeader> {
        (
            0u8..16,
            0u32..=FED_L1_ID_MASK,
            0u16..4096,
            0u16..4096,
            0u8..16,
            any::<bool>(),
        )
            .prop_map(
                |(event_type, l1_id, bx_id, source_id, version, more_headers)| FedHeader {
                    event_type,
                    l1_id,
                    bx_id,
                    source_id,
                    version,
                    more_headers,
                },
            )
    }

    proptest! {
        #[test]
        fn crc16_equals_the_crc_crate(bytes in proptest::collection::vec(any::<u8>(), 0..2100)) {
            prop_assert_eq!(fed_crc16(&bytes), reference_crc16(&bytes));
        }

        #[test]
        fn header_round_trip(h in header_strategy()) {
            prop_assert_eq!(FedHeader::parse(&h.to_word().to_le_bytes()).unwrap(), h);
        }

        #[test]
        fn trailer_round_trip(length_words in 0u32..0x100_0000, crc: u16, flags in 0u8..16, event_status in 0u8..16, tts in 0u8..16) {
            let t = FedTrailer {
                length_words, crc, event_status, tts,
                wrong_fed_id: flags & 1 != 0, slink_error: flags & 2 != 0,
                more_trailers: flags & 4 != 0, crc_modified: flags & 8 != 0,
            };
            prop_assert_eq!(FedTrailer::parse(&t.to_word().to_le_bytes()).unwrap(), t);
        }

        #[test]
        fn fragment_round_trip_and_any_bit_flip_is_caught(h in header_strategy(), words in proptest::collection::vec(any::<u64>(), 0..200), flip in any::<usize>()) {
            let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let mut out = Vec::new();
            let range = encode_fed_fragment(&mut out, &h, &FedTrailer::default(), &payload);
            let frag = FedFragment::parse(&out[range]).unwrap();
            prop_assert_eq!(frag.header, h);
            prop_assert_eq!(frag.payload(), &payload[..]);
            prop_assert!(frag.crc_ok());
            let (last, before) = FedFragment::parse_last(&out).unwrap();
            prop_assert_eq!(last.bytes, &out[..]);
            prop_assert!(before.is_empty());
            // A single flipped bit anywhere outside the CRC field is either a parse error or a CRC mismatch.
            let bit = flip % (out.len() * 8);
            let crc_bits = (out.len() - 8) * 8 + 16..(out.len() - 8) * 8 + 32;
            prop_assume!(!crc_bits.contains(&bit));
            out[bit / 8] ^= 1 << (bit % 8);
            if let Ok(bad) = FedFragment::parse(&out) {
                prop_assert!(!bad.crc_ok());
            }
        }

        /// Fragments back to back walk back to themselves, last first, each at its offset.
        #[test]
        fn fragments_walk_back_from_the_last(sizes in proptest::collection::vec(0usize..40, 0..8)) {
            let mut data = Vec::new();
            let mut ranges = Vec::new();
            for (i, words) in sizes.iter().enumerate() {
                let header = FedHeader { source_id: i as u16, ..Default::default() };
                ranges.push(encode_fed_fragment(&mut data, &header, &FedTrailer::default(), &vec![i as u8; words * FED_WORD]));
            }
            let walked: Vec<_> = fed_fragments(&data).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(walked.len(), sizes.len());
            for ((offset, fragment), range) in walked.iter().zip(ranges.iter().rev()) {
                prop_assert_eq!(*offset, range.start);
                prop_assert_eq!(fragment.bytes, &data[range.clone()]);
                prop_assert!(fragment.crc_ok());
            }
        }

        /// Any bytes: fragments that lie inside the data, back to back from its end, then at
        /// most one error, never a panic.
        #[test]
        fn any_data_walks_to_an_end(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut end = bytes.len();
            let mut errors = 0;
            for item in fed_fragments(&bytes) {
                prop_assert_eq!(errors, 0);
                match item {
                    Ok((offset, f)) => {
                        prop_assert_eq!(offset + f.bytes.len(), end);
                        end = offset;
                    }
                    Err(_) => errors += 1,
                }
            }
        }

        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = FedHeader::parse(&bytes);
            let _ = FedTrailer::parse(&bytes);
            if let Ok(f) = FedFragment::parse(&bytes) { let _ = f.crc_ok(); }
            let _ = FedFragment::parse_last(&bytes);
        }
    }

    /// A payload written in place and sealed there is the fragment `encode_fed_fragment`
    /// appends; a buffer without room for header and trailer is an error, left untouched.
    #[test]
    fn sealing_in_place_is_encoding() {
        let header = FedHeader {
            l1_id: 77,
            source_id: 12,
            ..Default::default()
        };
        let flags = FedTrailer {
            tts: 8,
            ..Default::default()
        };
        let payload: Vec<u8> = (0..40u8).collect();
        let mut encoded = Vec::new();
        encode_fed_fragment(&mut encoded, &header, &flags, &payload);
        let mut in_place = vec![0xEE; FED_MIN_SIZE + payload.len()];
        in_place[FED_HEADER_SIZE..FED_HEADER_SIZE + payload.len()].copy_from_slice(&payload);
        seal_fed_fragment(&mut in_place, &header, &flags).unwrap();
        assert_eq!(in_place, encoded);
        let mut short = [0xEE; FED_MIN_SIZE - 1];
        assert!(matches!(
            seal_fed_fragment(&mut short, &header, &flags),
            Err(FormatError::Truncated { .. })
        ));
        assert_eq!(short, [0xEE; FED_MIN_SIZE - 1]);
    }

    /// Bits CMS leaves unassigned (header 0..3; trailer 0..2, 12..14, 56..60) are read past,
    /// not refused, and count in the CRC like every other bit; re-encoding clears them.
    /// (The fuzzer found such a fragment with a matching CRC.)
    #[test]
    fn reserved_bits_are_read_past_and_covered_by_the_crc() {
        let header = FedHeader {
            l1_id: 5,
            source_id: 700,
            ..Default::default()
        };
        let mut clean = Vec::new();
        encode_fed_fragment(&mut clean, &header, &FedTrailer::default(), &[0xAB; 24]);
        let mut odd = clean.clone();
        let trailer_at = odd.len() - FED_TRAILER_SIZE;
        let header_word = get_u64(&odd, 0) | 0b111;
        put_u64(&mut odd, 0, header_word);
        let reserved_trailer_bits = 0b11 | (0b11 << 12) | (0xF << 56);
        let trailer_word = get_u64(&odd, trailer_at) | reserved_trailer_bits;
        put_u64(&mut odd, trailer_at, trailer_word);
        let parsed = FedFragment::parse(&odd).unwrap();
        assert!(!parsed.crc_ok(), "the reserved bits are inside the CRC");
        let crc = fed_crc16(&odd);
        let word = with_bits(trailer_word, CRC_FIELD_SHIFT, 16, crc as u64);
        put_u64(&mut odd, trailer_at, word);
        let parsed = FedFragment::parse(&odd).unwrap();
        assert!(parsed.crc_ok());
        assert_eq!(parsed.header, header);
        let clean_trailer = FedFragment::parse(&clean).unwrap().trailer;
        assert_eq!(
            FedTrailer {
                crc: clean_trailer.crc,
                ..parsed.trailer
            },
            clean_trailer
        );
        let mut again = Vec::new();
        encode_fed_fragment(
            &mut again,
            &parsed.header,
            &parsed.trailer,
            parsed.payload(),
        );
        assert_eq!(again, clean);
    }

    #[test]
    fn wrong_markers_and_lengths_are_typed_errors() {
        let mut out = Vec::new();
        encode_fed_fragment(
            &mut out,
            &FedHeader::default(),
            &FedTrailer::default(),
            &[0; 16],
        );
        let mut bad = out.clone();
        bad[7] = 0x00; // BOE nibble
        assert!(matches!(
            FedFragment::parse(&bad),
            Err(FormatError::BadMagic { .. })
        ));
        let mut bad = out.clone();
        bad[out.len() - 1] = 0x00; // EOE nibble
        assert!(matches!(
            FedFragment::parse(&bad),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(matches!(
            FedFragment::parse(&out[..out.len() - 8]),
            Err(FormatError::BadMagic { .. })
        ));
        let mut longer = out.clone();
        longer.extend_from_slice(&out[out.len() - 8..]);
        assert!(matches!(
            FedFragment::parse(&longer),
            Err(FormatError::Inconsistent {
                field: "trailer length",
                ..
            })
        ));
    }
}
