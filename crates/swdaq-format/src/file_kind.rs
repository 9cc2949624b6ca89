//! What kind of data file a reader has in front of it, from its first bytes and its name:
//! the one place `swdaq inspect` and `swdaq display` decide which reader to use, so a file
//! is never handed to the wrong one (an FRD file to HDF5, say) and the user is told which
//! format the file was taken for.
//!
//! | first bytes | kind |
//! |-------------|------|
//! | EventStorage file start record (`0x1234aaaa`, size 8) | [`FileKind::EventStorage`] |
//! | HDF5 signature at 0, 512, 1024, ... (after a user block) | [`FileKind::Hdf5`] |
//! | `RAW_0002` header that parses | [`FileKind::Frd`] |
//! | `SWDAQRAW` with the full-event frame type | [`FileKind::OldSwrodEvents`] |
//! | `SWDAQRAW`, any other frame type | [`FileKind::SwdaqRaw`] |
//! | a damaged or zeroed 32-byte header, then an FRD v6 event header (or `RAW_0002` off by a byte or two) | [`FileKind::FrdDamagedHeader`] |
//!
//! in that order: a swdaq raw header can hold what reads as an FRD event header at byte 32.
//!
//! A name ending `.tmp` (event builder), `.writing` (HDF5 and EventStorage writers) or `.part`
//! (SW ROD storage before it wrote EventStorage) is a file its writer never closed:
//! [`Detected::left_open`].

use crate::eventstorage::{FILE_START_MARKER, FILE_START_WORDS};
use crate::fragment::FragmentType;
use crate::frd::{
    FRD_FILE_HEADER_SIZE, FRD_FILE_ID, FRD_FILE_VERSION, FrdEventHeader, FrdFileHeader, frd_flags,
};
use crate::le::get_u32;
use crate::rawfile::RAW_MAGIC;
use std::io::Read;
use std::path::Path;

/// The HDF5 superblock signature.
pub const HDF5_SIGNATURE: [u8; 8] = *b"\x89HDF\r\n\x1a\n";
/// Frame type of the swdaq raw files of ATLAS full events SW ROD runs wrote before they
/// wrote EventStorage files ("EVT"): recognised to be named, no longer read.
pub const OLD_SWROD_FRAME_TYPE: FragmentType = FragmentType(0x0045_5654);

/// How many leading bytes [`detect`] needs to see every signature it knows (an HDF5 user
/// block of up to 32 KiB included).
pub const DETECT_BYTES: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// ATLAS EventStorage: full events in eformat (the SW ROD run's storage, ATLAS's SFOs).
    EventStorage,
    /// HDF5: swdaq (hdf5libs-layout) trigger-record files.
    Hdf5,
    /// A CMS FRD file whose `RAW_0002` header parses.
    Frd,
    /// An FRD file whose header is damaged or was never written (the event builder writes it
    /// at close), recognised by the FRD event that follows it or a nearly right header id.
    FrdDamagedHeader,
    /// A swdaq raw file of full events, as SW ROD runs stored them before EventStorage.
    OldSwrodEvents,
    /// A swdaq raw file of link frames or other records (`swdaq gen`, recorded bursts).
    SwdaqRaw,
    Directory,
    Empty,
    Unknown,
}

impl FileKind {
    /// What the file was taken for, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::EventStorage => "ATLAS EventStorage file of full events (eformat)",
            Self::Hdf5 => "HDF5 trigger-record file",
            Self::Frd => "CMS FRD file (RAW_0002)",
            Self::FrdDamagedHeader => "CMS FRD file with a damaged or unwritten RAW_0002 header",
            Self::OldSwrodEvents => {
                "swdaq raw file of SW ROD full events in the container SW ROD runs wrote before they wrote ATLAS EventStorage; swdaq reads it no more (its events are eformat v4.0 headers around v5 ROBs)"
            }
            Self::SwdaqRaw => "swdaq raw file of link records",
            Self::Directory => "a directory, not a data file",
            Self::Empty => "an empty file",
            Self::Unknown => {
                "no known data format (not EventStorage, HDF5, FRD RAW_0002 or swdaq raw: no known signature)"
            }
        }
    }
}

/// A file's kind and whether its writer left it open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detected {
    pub kind: FileKind,
    /// The suffix of a file its writer never closed (killed, or still writing), whose last
    /// records may be missing or cut.
    pub left_open: Option<&'static str>,
}

impl Detected {
    /// One line: the format, and that the file was left open when it was.
    pub fn describe(&self) -> String {
        match self.left_open {
            Some(suffix) => format!(
                "{}, left open by its writer ({suffix}: killed or still writing; its end may be missing or cut)",
                self.kind.describe()
            ),
            None => self.kind.describe().to_string(),
        }
    }
}

/// Suffixes swdaq's writers give a file until they close it.
const OPEN_SUFFIXES: [&str; 3] = [".tmp", ".writing", ".part"];

/// The kind of a file whose first bytes are `head` (up to [`DETECT_BYTES`]) and whose name is
/// `name`.
pub fn detect(head: &[u8], name: &str) -> Detected {
    Detected {
        kind: kind_of(head),
        left_open: OPEN_SUFFIXES.into_iter().find(|s| name.ends_with(s)),
    }
}

/// Reads the start of the file at `path` and detects its kind.
pub fn detect_path(path: &Path) -> std::io::Result<Detected> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.unwrap_or_default();
    if std::fs::metadata(path)?.is_dir() {
        return Ok(Detected {
            kind: FileKind::Directory,
            left_open: None,
        });
    }
    let mut head = Vec::with_capacity(DETECT_BYTES);
    crate::input_file::open_regular(path)?
        .take(DETECT_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(detect(&head, &name))
}

fn kind_of(head: &[u8]) -> FileKind {
    if head.is_empty() {
        FileKind::Empty
    } else if is_eventstorage(head) {
        FileKind::EventStorage
    } else if is_hdf5(head) {
        FileKind::Hdf5
    } else if FrdFileHeader::parse(head).is_ok() {
        FileKind::Frd
    } else if head.starts_with(&RAW_MAGIC) {
        // The frame type says what the records are, even when another header field is bad.
        if head.len() >= 20 && get_u32(head, 16) == OLD_SWROD_FRAME_TYPE.0 {
            FileKind::OldSwrodEvents
        } else {
            FileKind::SwdaqRaw
        }
    } else if looks_like_frd(head) {
        FileKind::FrdDamagedHeader
    } else {
        FileKind::Unknown
    }
}

/// The file start record's marker and size word: a damaged version or any later record is
/// the EventStorage reader's to name.
fn is_eventstorage(head: &[u8]) -> bool {
    head.len() >= 8
        && get_u32(head, 0) == FILE_START_MARKER
        && get_u32(head, 4) as usize == FILE_START_WORDS
}

/// The signature at offset 0 or, after a user block, at 512, 1024, 2048, ...
fn is_hdf5(head: &[u8]) -> bool {
    std::iter::once(0)
        .chain(std::iter::successors(Some(512usize), |o| o.checked_mul(2)))
        .take_while(|&o| o < head.len())
        .any(|o| head[o..].starts_with(&HDF5_SIGNATURE))
}

/// An FRD event header (version 6, no flag bit CMS leaves unassigned) right after the file
/// header, or a header id at most two bytes off. Checked after every other signature.
fn looks_like_frd(head: &[u8]) -> bool {
    let id: Vec<u8> = FRD_FILE_ID
        .iter()
        .chain(&FRD_FILE_VERSION)
        .copied()
        .collect();
    let id_nearly_right =
        head.len() >= id.len() && head.iter().zip(&id).filter(|(a, b)| a != b).count() <= 2;
    let known_flags = frd_flags::GENERATED | frd_flags::INCOMPLETE;
    let event_follows = head
        .get(FRD_FILE_HEADER_SIZE..)
        .and_then(|rest| FrdEventHeader::parse(rest).ok())
        .is_some_and(|e| e.flags & !known_flags == 0);
    // The event builder writes the header when a file closes: a file killed before its
    // first batch of events reached it holds the zeroed header alone.
    let header_only_unwritten = head.len() == FRD_FILE_HEADER_SIZE && head.iter().all(|&b| b == 0);
    id_nearly_right || event_follows || header_only_unwritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rawfile::RawFileHeader;
    use crate::{FragmentType, SourceId};
    use proptest::prelude::*;

    fn raw_header(frame_type: FragmentType) -> Vec<u8> {
        RawFileHeader {
            frame_type,
            frame_size: 100,
            source_id: SourceId::readout(0),
            run_number: 1,
            first_timestamp: 0,
            created_unix_ns: 0,
        }
        .to_bytes()
        .to_vec()
    }

    #[test]
    fn every_writer_s_files_are_recognised() {
        let frd = FrdFileHeader::default().to_bytes();
        assert_eq!(detect(&frd, "a.raw").kind, FileKind::Frd);
        let mut unwritten = vec![0u8; FRD_FILE_HEADER_SIZE];
        unwritten.extend(FrdEventHeader::default().to_bytes());
        let left = detect(&unwritten, "run000001_ls0001_index000000.raw.tmp");
        assert_eq!(left.kind, FileKind::FrdDamagedHeader);
        assert_eq!(left.left_open, Some(".tmp"));
        assert!(left.describe().contains("left open"));
        // Killed before its first batch of events: the zeroed header alone.
        let header_only = vec![0u8; FRD_FILE_HEADER_SIZE];
        assert_eq!(
            detect(&header_only, "a.raw.tmp").kind,
            FileKind::FrdDamagedHeader
        );
        let mut flipped = frd;
        flipped[1] ^= 4;
        assert_eq!(detect(&flipped, "a.raw").kind, FileKind::FrdDamagedHeader);
        let mut h5 = vec![0u8; 512];
        h5.extend(HDF5_SIGNATURE);
        assert_eq!(detect(&h5, "x.hdf5.writing").kind, FileKind::Hdf5);
        assert_eq!(detect(&HDF5_SIGNATURE, "x").kind, FileKind::Hdf5);
        assert_eq!(
            detect(&raw_header(OLD_SWROD_FRAME_TYPE), "swrod.raw.part").kind,
            FileKind::OldSwrodEvents
        );
        assert_eq!(
            detect(&raw_header(FragmentType::WIBETH), "link0.swraw").kind,
            FileKind::SwdaqRaw
        );
        // Run 6 puts what reads as an FRD v6 event header at byte 32 of a raw header.
        let mut run_6 = raw_header(OLD_SWROD_FRAME_TYPE);
        run_6[32] = 6;
        assert_eq!(detect(&run_6, "swrod.raw").kind, FileKind::OldSwrodEvents);
        let es = crate::eventstorage::FileHead::default().to_bytes();
        let left = detect(
            &es,
            "data_test.00000001.physics_Main.daq.RAW._lb0001._SFO-1._0001.writing",
        );
        assert_eq!(left.kind, FileKind::EventStorage);
        assert_eq!(left.left_open, Some(".writing"));
        assert_eq!(detect(b"", "x").kind, FileKind::Empty);
        assert_eq!(detect(b"hello world", "x").kind, FileKind::Unknown);
        let dir = std::env::temp_dir();
        assert_eq!(detect_path(&dir).unwrap().kind, FileKind::Directory);
    }

    proptest! {
        #[test]
        fn detect_never_panics(head in proptest::collection::vec(any::<u8>(), 0..2000), name in ".{0,20}") {
            let d = detect(&head, &name);
            prop_assert!(!d.describe().is_empty());
        }
    }
}
