//! A detector's own time slices (#35): swdaq's frame around each fragment a streaming board's
//! decoder (a plugin's or a configured packet format) finds, so the DUNE-style chain buffers,
//! checks and reads out by time window a detector swdaq has never seen. This is swdaq's own
//! layout (no experiment defines one); a trigger record's fragment of fragment type
//! [`crate::FragmentType::DETECTOR_FRAMES`] holds these frames back to back.
//!
//! One frame, little-endian:
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | [`BOARD_FRAME_MAGIC`], "SWBF" |
//! | 4..8   | the payload's length in bytes |
//! | 8..16  | the timestamp of the slice's first sample (the detector's clock) |
//! | 16..20 | the source id the decoder gave |
//! | 20..24 | the decoder's flags (`SWDAQ_FRAGMENT_*` of `include/swdaq_plugin.h`: corrupt, truncated; bits 16..31 the detector's) |
//! | 24..   | the payload: the detector's bytes as the board sent them, zero-padded to 8 bytes |
//!
//! The length field says how many payload bytes are the detector's, so padding is never read
//! as data; the next frame starts at the 8-byte boundary after the payload.

use crate::error::{FormatError, need};
use crate::le::{get_u32, get_u64, put_u32, put_u64};

/// "SWBF" as a little-endian word.
pub const BOARD_FRAME_MAGIC: u32 = u32::from_le_bytes(*b"SWBF");
pub const BOARD_FRAME_HEADER_SIZE: usize = 24;
/// Decoder flags (as the plugin ABI numbers them) that mark the slice as damaged.
pub const DAMAGED_FLAGS: u32 = 0x4 | 0x8;

/// How a link's board frames are timed and sized: the facts the readout needs of a detector
/// it knows nothing else about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BoardFrames {
    /// The largest payload one frame carries; a longer fragment is refused (and counted).
    pub max_payload: u32,
    /// The clock ticks one frame spans: the next frame's timestamp is this much later.
    pub ticks_per_frame: u64,
    /// The clock ticks between two samples (a primitive's length is counted in samples).
    pub ticks_per_sample: u64,
    /// The detector's timestamp clock, in Hz.
    pub clock_hz: u64,
}

impl BoardFrames {
    /// The bytes of the largest frame: a latency-buffer slot.
    pub fn max_frame_size(&self) -> usize {
        frame_size(self.max_payload as usize)
    }
}

/// One frame's header fields and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoardFrame<'a> {
    pub timestamp: u64,
    pub source_id: u32,
    pub flags: u32,
    pub payload: &'a [u8],
}

/// The bytes a frame with a `payload_len`-byte payload takes.
pub fn frame_size(payload_len: usize) -> usize {
    BOARD_FRAME_HEADER_SIZE + payload_len.next_multiple_of(8)
}

impl BoardFrame<'_> {
    const WHAT: &'static str = "board frame";

    /// Writes the frame at the start of `out`, which holds at least
    /// [`frame_size`]`(payload.len())` bytes; returns the bytes written.
    pub fn write(&self, out: &mut [u8]) -> usize {
        let size = frame_size(self.payload.len());
        put_u32(out, 0, BOARD_FRAME_MAGIC);
        put_u32(out, 4, self.payload.len() as u32);
        put_u64(out, 8, self.timestamp);
        put_u32(out, 16, self.source_id);
        put_u32(out, 20, self.flags);
        let end = BOARD_FRAME_HEADER_SIZE + self.payload.len();
        out[BOARD_FRAME_HEADER_SIZE..end].copy_from_slice(self.payload);
        out[end..size].fill(0);
        size
    }

    /// Reads the frame at the start of `bytes`; returns it and the bytes it takes.
    pub fn parse_prefix(bytes: &[u8]) -> Result<(BoardFrame<'_>, usize), FormatError> {
        need(Self::WHAT, bytes, BOARD_FRAME_HEADER_SIZE)?;
        let magic = get_u32(bytes, 0);
        if magic != BOARD_FRAME_MAGIC {
            return Err(FormatError::BadMagic {
                what: Self::WHAT,
                expected: BOARD_FRAME_MAGIC,
                got: magic,
            });
        }
        let len = get_u32(bytes, 4) as usize;
        let size = frame_size(len);
        need(Self::WHAT, bytes, size)?;
        let frame = BoardFrame {
            timestamp: get_u64(bytes, 8),
            source_id: get_u32(bytes, 16),
            flags: get_u32(bytes, 20),
            payload: &bytes[BOARD_FRAME_HEADER_SIZE..BOARD_FRAME_HEADER_SIZE + len],
        };
        Ok((frame, size))
    }

    /// Reads a buffer holding exactly one frame.
    pub fn parse(bytes: &[u8]) -> Result<BoardFrame<'_>, FormatError> {
        let (frame, size) = Self::parse_prefix(bytes)?;
        if size != bytes.len() {
            return Err(FormatError::Inconsistent {
                what: Self::WHAT,
                field: "payload length",
                value: frame.payload.len() as u64,
            });
        }
        Ok(frame)
    }
}

/// Writes `timestamp` into the header at the start of `head` (a replayed frame's next pass).
pub fn restamp(head: &mut [u8], timestamp: u64) {
    put_u64(head, 8, timestamp);
}

/// The frames of a fragment's payload, in order, each with its offset in the payload; a
/// damaged one ends the walk with its error (the frames before it are good: there is no
/// resynchronising inside swdaq's own layout).
pub fn frames(
    payload: &[u8],
) -> impl Iterator<Item = Result<(usize, BoardFrame<'_>), FormatError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = payload.get(at..).filter(|r| !r.is_empty())?;
        match BoardFrame::parse_prefix(rest) {
            Ok((frame, size)) => {
                let offset = at;
                at += size;
                Some(Ok((offset, frame)))
            }
            Err(e) => {
                at = payload.len();
                Some(Err(e))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let at = out.len();
            out.resize(at + frame_size(p.len()), 0xAA);
            let frame = BoardFrame {
                timestamp: 1000 + i as u64,
                source_id: 7,
                flags: 0x1_0000,
                payload: p,
            };
            assert_eq!(frame.write(&mut out[at..]), frame_size(p.len()));
        }
        out
    }

    #[test]
    fn frames_round_trip_with_their_padding_zeroed() {
        let bytes = framed(&[b"abc", b"", b"12345678"]);
        assert_eq!(bytes.len(), 24 + 8 + 24 + 24 + 8);
        assert_eq!(&bytes[27..32], &[0; 5]);
        let read: Vec<_> = frames(&bytes).map(|f| f.unwrap().1).collect();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].payload, b"abc");
        assert_eq!(read[1].payload, b"");
        assert_eq!((read[2].timestamp, read[2].source_id), (1002, 7));
        assert_eq!(read[2].flags, 0x1_0000);
    }

    #[test]
    fn a_damaged_frame_is_named_after_the_good_ones() {
        let mut bytes = framed(&[b"abc", b"defg"]);
        bytes[32] ^= 0xFF; // the second frame's magic
        let read: Vec<_> = frames(&bytes).collect();
        assert!(read[0].is_ok());
        assert!(matches!(read[1], Err(FormatError::BadMagic { .. })));
        assert_eq!(read.len(), 2);
        let mut cut = framed(&[b"abcdefghij"]);
        cut.truncate(30);
        assert!(matches!(
            BoardFrame::parse(&cut),
            Err(FormatError::Truncated { .. })
        ));
    }

    #[test]
    fn one_frame_must_fill_its_buffer_exactly() {
        let mut bytes = framed(&[b"abc"]);
        assert!(BoardFrame::parse(&bytes).is_ok());
        bytes.extend_from_slice(&[0; 8]);
        assert!(BoardFrame::parse(&bytes).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_walk_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut total = 0;
            for frame in frames(&bytes) {
                match frame {
                    Ok((at, f)) => total = at + frame_size(f.payload.len()),
                    Err(_) => break,
                }
            }
            prop_assert!(total <= bytes.len());
        }

        #[test]
        fn written_frames_read_back(payloads in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..100), 0..8)) {
            let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            let bytes = framed(&refs);
            let read: Vec<Vec<u8>> = frames(&bytes).map(|f| f.unwrap().1.payload.to_vec()).collect();
            prop_assert_eq!(read, payloads);
        }
    }
}
