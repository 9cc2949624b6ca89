//! swdaq raw files: what `swdaq gen` writes and link recording produces, replayed by the
//! readout's file source. A 64-byte header says what the file holds; then one record per
//! frame, each an 8-byte record header (u32 length as received, u32 reserved) and the frame
//! bytes. Lengths are kept per record so frames that arrived truncated are replayed as they
//! came, and records stay 8-byte aligned for frame sizes that are multiples of 8.
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..8   | magic `SWDAQRAW` |
//! | 8..12  | file format version (= 1) |
//! | 12..16 | header size (= 64) |
//! | 16..20 | frame format as a DUNE fragment type (12 WIBEth, 1 ProtoWIB) |
//! | 20..24 | nominal frame size in bytes |
//! | 24..32 | source id ([`SourceId`]) |
//! | 32..36 | run number |
//! | 36..40 | reserved |
//! | 40..48 | timestamp of the first frame (ticks) |
//! | 48..56 | creation time (ns since the Unix epoch) |
//! | 56..64 | reserved |

use crate::error::FormatError;
use crate::fragment::FragmentType;
use crate::le::{get_u32, get_u64, put_u32, put_u64};
use crate::source_id::SourceId;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

pub const RAW_MAGIC: [u8; 8] = *b"SWDAQRAW";
pub const RAW_VERSION: u32 = 1;
pub const RAW_HEADER_SIZE: usize = 64;
pub const RECORD_HEADER_SIZE: usize = 8;

/// Where link `link`'s raw file lies in `dir`: the name `swdaq gen` writes and `swdaq run`'s
/// file source reads.
pub fn link_path(dir: &Path, link: u32) -> PathBuf {
    dir.join(format!("link{link}.swraw"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFileHeader {
    pub frame_type: FragmentType,
    pub frame_size: u32,
    pub source_id: SourceId,
    pub run_number: u32,
    pub first_timestamp: u64,
    pub created_unix_ns: u64,
}

impl RawFileHeader {
    pub fn to_bytes(&self) -> [u8; RAW_HEADER_SIZE] {
        let mut b = [0u8; RAW_HEADER_SIZE];
        b[0..8].copy_from_slice(&RAW_MAGIC);
        put_u32(&mut b, 8, RAW_VERSION);
        put_u32(&mut b, 12, RAW_HEADER_SIZE as u32);
        put_u32(&mut b, 16, self.frame_type.0);
        put_u32(&mut b, 20, self.frame_size);
        self.source_id.encode(&mut b[24..32]);
        put_u32(&mut b, 32, self.run_number);
        put_u64(&mut b, 40, self.first_timestamp);
        put_u64(&mut b, 48, self.created_unix_ns);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "raw file header";
        crate::error::need(WHAT, b, RAW_HEADER_SIZE)?;
        if b[0..8] != RAW_MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: u32::from_le_bytes(*b"SWDA"),
                got: get_u32(b, 0),
            });
        }
        let version = get_u32(b, 8);
        if version != RAW_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                supported: RAW_VERSION,
                got: version,
            });
        }
        let header_size = get_u32(b, 12);
        if header_size as usize != RAW_HEADER_SIZE {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "header_size",
                value: header_size as u64,
            });
        }
        let frame_size = get_u32(b, 20);
        if frame_size == 0 || frame_size > MAX_FRAME_SIZE {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "frame_size",
                value: frame_size as u64,
            });
        }
        Ok(Self {
            frame_type: FragmentType(get_u32(b, 16)),
            frame_size,
            source_id: SourceId::decode(&b[24..32])?,
            run_number: get_u32(b, 32),
            first_timestamp: get_u64(b, 40),
            created_unix_ns: get_u64(b, 48),
        })
    }
}

/// Largest frame a raw file may declare: bounds what a corrupt header makes a reader allocate.
pub const MAX_FRAME_SIZE: u32 = 1 << 20;

/// Why reading a raw file stopped.
#[derive(Debug, thiserror::Error)]
pub enum RawFileError {
    #[error("raw file I/O: {0}")]
    Io(#[from] io::Error),
    #[error("raw file format: {0}")]
    Format(#[from] FormatError),
}

/// Writes a raw file: the header, then frames as they come.
pub struct RawFileWriter<W: Write> {
    out: W,
    frames: u64,
}

impl<W: Write> RawFileWriter<W> {
    pub fn new(mut out: W, header: &RawFileHeader) -> io::Result<Self> {
        out.write_all(&header.to_bytes())?;
        Ok(Self { out, frames: 0 })
    }

    pub fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        write_record(&mut self.out, frame)?;
        self.frames += 1;
        Ok(())
    }

    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes one frame as a raw-file record (record header, then the bytes), for a writer that
/// stages records itself (the link recorder).
pub fn write_record(out: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    let mut record = [0u8; RECORD_HEADER_SIZE];
    put_u32(&mut record, 0, frame.len() as u32);
    out.write_all(&record)?;
    out.write_all(frame)
}

/// Reads a raw file frame by frame into a caller-owned buffer (no allocation per frame).
pub struct RawFileReader<R: Read> {
    input: R,
    header: RawFileHeader,
}

impl<R: Read> RawFileReader<R> {
    pub fn new(mut input: R) -> Result<Self, RawFileError> {
        let mut b = [0u8; RAW_HEADER_SIZE];
        read_full(&mut input, &mut b, "raw file header")?;
        Ok(Self {
            header: RawFileHeader::decode(&b)?,
            input,
        })
    }

    pub fn header(&self) -> &RawFileHeader {
        &self.header
    }

    /// Reads the next frame into `buf` (resized to the frame's length). `Ok(false)` at a
    /// clean end of file; a record cut short or longer than the declared frame size is an error.
    pub fn next_frame(&mut self, buf: &mut Vec<u8>) -> Result<bool, RawFileError> {
        buf.resize(self.header.frame_size as usize, 0);
        let len = self.read_frame_into(buf)?;
        buf.truncate(len.unwrap_or(0));
        Ok(len.is_some())
    }

    /// Reads the next frame straight into `out` (a latency-buffer slot, say) and returns its
    /// length, `None` at a clean end of file. `out` must hold the declared frame size.
    pub fn read_frame_into(&mut self, out: &mut [u8]) -> Result<Option<usize>, RawFileError> {
        let mut record = [0u8; RECORD_HEADER_SIZE];
        let got = read_up_to(&mut self.input, &mut record)?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_SIZE {
            return Err(FormatError::Truncated {
                what: "raw file record header",
                need: RECORD_HEADER_SIZE,
                got,
            }
            .into());
        }
        let len = get_u32(&record, 0) as usize;
        if len > self.header.frame_size as usize || len > out.len() {
            return Err(FormatError::Inconsistent {
                what: "raw file record",
                field: "length",
                value: len as u64,
            }
            .into());
        }
        read_full(&mut self.input, &mut out[..len], "raw file frame")?;
        Ok(Some(len))
    }
}

/// The frame of the record at byte `offset` of a raw file held in memory, or why the record
/// is not whole there (for readers that walk, and resynchronise in, a damaged file).
pub fn record_at(file: &[u8], offset: usize) -> Result<&[u8], FormatError> {
    let rest = file.get(offset..).unwrap_or_default();
    crate::error::need("raw file record header", rest, RECORD_HEADER_SIZE)?;
    let len = get_u32(rest, 0) as usize;
    let frame = &rest[RECORD_HEADER_SIZE..];
    crate::error::need("raw file record", frame, len)?;
    Ok(&frame[..len])
}

/// Reads as many bytes as are available up to `buf.len()`, retrying short reads.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn read_full(
    input: &mut impl Read,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), RawFileError> {
    let got = read_up_to(input, buf)?;
    if got < buf.len() {
        return Err(FormatError::Truncated {
            what,
            need: buf.len(),
            got,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> RawFileHeader {
        RawFileHeader {
            frame_type: FragmentType::WIBETH,
            frame_size: 16,
            source_id: SourceId::readout(4),
            run_number: 12,
            first_timestamp: 1 << 50,
            created_unix_ns: 1_700_000_000_000_000_000,
        }
    }

    proptest! {
        #[test]
        fn frames_round_trip(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..=16), 0..20)) {
            let mut w = RawFileWriter::new(Vec::new(), &header()).unwrap();
            for f in &frames { w.write_frame(f).unwrap(); }
            let bytes = w.finish().unwrap();
            let mut r = RawFileReader::new(&bytes[..]).unwrap();
            prop_assert_eq!(r.header(), &header());
            let mut buf = Vec::new();
            for f in &frames {
                prop_assert!(r.next_frame(&mut buf).unwrap());
                prop_assert_eq!(&buf, f);
            }
            prop_assert!(!r.next_frame(&mut buf).unwrap());
        }

        #[test]
        fn reading_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), at in 0usize..400) {
            let _ = record_at(&bytes, at);
            if let Ok(mut r) = RawFileReader::new(&bytes[..]) {
                let mut buf = Vec::new();
                while let Ok(true) = r.next_frame(&mut buf) {}
            }
        }
    }

    #[test]
    fn records_read_in_place() {
        let mut w = RawFileWriter::new(Vec::new(), &header()).unwrap();
        w.write_frame(&[7u8; 16]).unwrap();
        w.write_frame(&[]).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(record_at(&bytes, RAW_HEADER_SIZE).unwrap(), &[7u8; 16]);
        assert_eq!(
            record_at(&bytes, RAW_HEADER_SIZE + 24).unwrap(),
            &[] as &[u8]
        );
        assert!(record_at(&bytes[..bytes.len() - 1], RAW_HEADER_SIZE + 24).is_err());
        assert!(record_at(&bytes, bytes.len() + 5).is_err());
    }

    #[test]
    fn truncated_file_is_an_error_not_a_short_frame() {
        let mut w = RawFileWriter::new(Vec::new(), &header()).unwrap();
        w.write_frame(&[7u8; 16]).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = RawFileReader::new(&bytes[..bytes.len() - 3]).unwrap();
        let mut buf = Vec::new();
        assert!(matches!(
            r.next_frame(&mut buf),
            Err(RawFileError::Format(FormatError::Truncated { .. }))
        ));
        assert!(matches!(
            RawFileReader::new(&bytes[..10]),
            Err(RawFileError::Format(FormatError::Truncated { .. }))
        ));
    }

    #[test]
    fn oversized_record_is_rejected() {
        let mut w = RawFileWriter::new(Vec::new(), &header()).unwrap();
        w.write_frame(&[0u8; 17]).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = RawFileReader::new(&bytes[..]).unwrap();
        assert!(matches!(
            r.next_frame(&mut Vec::new()),
            Err(RawFileError::Format(FormatError::Inconsistent { .. }))
        ));
    }
}
