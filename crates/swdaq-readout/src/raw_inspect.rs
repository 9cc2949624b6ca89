//! What a swdaq raw file holds (`swdaq inspect FILE.swraw`): its header, and its frames run
//! through the readout's continuity checks, so a recorded burst's gaps show as missing
//! frames and each frame the checks flagged is listed with where it lies, and a record cut
//! short is named with how far the file read. [`walk_raw`] hands every record to a caller as
//! it goes (the `swdaq` Python package indexes a file's frames with it), so a reader sees
//! exactly the frames and findings `swdaq inspect` reports. A file of FELIX to-host blocks
//! (`swdaq gen --format felix`, GBT or FULL mode) has its blocks walked instead: marker,
//! trailers, per-e-link sequence numbers, whole chunks counted ([`FelixCounts`]).

use crate::checks::{CheckCounts, ContinuityChecker, Verdict};
use std::fmt::Write as _;
use std::io::Read;
use swdaq_format::FrameFormat;
use swdaq_format::felix::{self, Block, BlockLayout, SubchunkIndex, SubchunkKind};
use swdaq_format::rawfile::{RAW_HEADER_SIZE, RECORD_HEADER_SIZE, RawFileError, RawFileReader};

/// Flagged frames listed in a report, at most: a front end that flags every frame would
/// otherwise make the report as large as the file. Every one is counted.
pub const MAX_FLAGGED_LISTED: usize = 1000;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RawInspection {
    /// The TPC frame format the header names; `None` for other records (FELIX blocks, FED
    /// fragments), which are counted but not checked. (Not `format`: `swdaq inspect --json`
    /// puts the file's format under that key.)
    pub frame_format: Option<&'static str>,
    pub fragment_type: u32,
    pub frame_size: u32,
    pub source_id: String,
    pub run_number: u32,
    pub header_first_timestamp: u64,
    pub created_unix_ns: u64,
    pub frames: u64,
    pub bytes: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    /// Data time from the first frame to the end of the last.
    pub seconds: f64,
    pub checks: Option<CheckCounts>,
    /// A file of FELIX blocks: what their walk found (`None` for other records).
    pub felix: Option<FelixCounts>,
    /// Frames the checks found something wrong with or before.
    pub flagged_frames: u64,
    /// The first [`MAX_FLAGGED_LISTED`] of them, in file order.
    pub flagged: Vec<FlaggedFrame>,
    /// Why reading stopped before the end of the file.
    pub error: Option<String>,
}

/// A frame the continuity checks flagged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlaggedFrame {
    /// Its index among the file's records.
    pub frame: u64,
    /// Where its record starts in the file.
    pub offset: u64,
    /// `None` for a frame of the wrong size.
    pub timestamp: Option<u64>,
    /// What the checks found ([`Verdict::findings`]).
    pub findings: Vec<&'static str>,
    /// Frames missing just before it.
    pub missing_before: u64,
}

/// One record as [`walk_raw`] reads it.
pub struct RawRecord<'a> {
    /// Its index among the file's records.
    pub index: u64,
    /// Where its record header starts in the file.
    pub offset: u64,
    pub frame: &'a [u8],
    /// The continuity checks' verdict; `None` for records of another kind than TPC frames.
    pub verdict: Option<Verdict>,
    /// What the walk of a FELIX block found wrong with it (empty for other records).
    pub felix_findings: &'a [&'static str],
}

/// Reads the whole file; only a header that cannot be read is an error (a bad record ends
/// the reading and is named in `error`).
pub fn inspect_raw(input: impl Read) -> Result<RawInspection, RawFileError> {
    walk_raw(input, |_| {})
}

/// [`inspect_raw`], handing each whole record to `on_record` as it is read.
pub fn walk_raw(
    input: impl Read,
    mut on_record: impl FnMut(&RawRecord<'_>),
) -> Result<RawInspection, RawFileError> {
    let mut reader = RawFileReader::new(input)?;
    let header = *reader.header();
    let format = [FrameFormat::WibEth, FrameFormat::ProtoWib]
        .into_iter()
        .find(|f| f.fragment_type() == header.frame_type);
    let mut checker = format.map(ContinuityChecker::new);
    let mut felix_walk = (header.frame_type == felix::RAW_FILE_TYPE).then(FelixWalk::default);
    let mut out = RawInspection {
        frame_format: format.map(FrameFormat::name),
        fragment_type: header.frame_type.0,
        frame_size: header.frame_size,
        source_id: header.source_id.to_string(),
        run_number: header.run_number,
        header_first_timestamp: header.first_timestamp,
        created_unix_ns: header.created_unix_ns,
        frames: 0,
        bytes: RAW_HEADER_SIZE as u64,
        first_timestamp: None,
        last_timestamp: None,
        seconds: 0.0,
        checks: None,
        felix: None,
        flagged_frames: 0,
        flagged: Vec::new(),
        error: None,
    };
    let mut frame = Vec::new();
    loop {
        match reader.next_frame(&mut frame) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                out.error = Some(format!("after {} frames: {e}", out.frames));
                break;
            }
        }
        let felix_findings = felix_walk
            .as_mut()
            .map(|w| w.check(&frame, header.frame_size as usize))
            .unwrap_or_default();
        let record = RawRecord {
            index: out.frames,
            offset: out.bytes,
            frame: &frame,
            verdict: checker.as_mut().map(|c| c.check(&frame).0),
            felix_findings: &felix_findings,
        };
        if let Some(verdict) = record.verdict {
            note(&mut out, &record, verdict);
        }
        if !felix_findings.is_empty() {
            out.flagged_frames += 1;
            if out.flagged.len() < MAX_FLAGGED_LISTED {
                out.flagged.push(FlaggedFrame {
                    frame: record.index,
                    offset: record.offset,
                    timestamp: None,
                    findings: felix_findings.clone(),
                    missing_before: 0,
                });
            }
        }
        on_record(&record);
        out.frames += 1;
        out.bytes += (RECORD_HEADER_SIZE + frame.len()) as u64;
    }
    if let (Some(format), Some(first), Some(last)) =
        (format, out.first_timestamp, out.last_timestamp)
    {
        out.seconds =
            (last + format.ticks_per_frame()).saturating_sub(first) as f64 / format.clock_hz();
    }
    out.checks = checker.map(|c| c.counts);
    out.felix = felix_walk.map(|w| FelixCounts {
        elinks: w.next_sequence.iter().filter(|s| s.is_some()).count() as u64,
        ..w.counts
    });
    Ok(out)
}

/// What the walk of a file's FELIX blocks found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FelixCounts {
    /// `gbt` or `full`, from the first block's marker (and the records' size).
    pub mode: &'static str,
    pub block_bytes: u64,
    /// E-links (FULL mode: links, and the TTC-to-host e-link) with at least one good block.
    pub elinks: u64,
    pub subchunks: u64,
    /// Whole chunks: one-subchunk chunks and the last subchunks of spanning ones.
    pub chunks: u64,
    /// Blocks with another marker or size, or trailers that do not add up (flagged).
    pub corrupt_blocks: u64,
    /// Blocks whose sequence number is not the e-link's next (flagged).
    pub sequence_gaps: u64,
}

/// Walks FELIX blocks as the SW ROD's decoder does, without keeping chunks.
struct FelixWalk {
    layout: Option<BlockLayout>,
    next_sequence: Vec<Option<u8>>,
    index: SubchunkIndex,
    counts: FelixCounts,
}

impl Default for FelixWalk {
    fn default() -> Self {
        Self {
            layout: None,
            next_sequence: vec![None; usize::from(felix::MAX_ELINK) + 1],
            index: SubchunkIndex::default(),
            counts: FelixCounts::default(),
        }
    }
}

impl FelixWalk {
    /// The first block says the layout: its marker, or (`0xABCE`, or no marker known) the
    /// records' size.
    fn layout(&mut self, block: &[u8], frame_size: usize) -> BlockLayout {
        *self.layout.get_or_insert_with(|| {
            let marker = block.get(2..4).map(|m| u16::from_le_bytes([m[0], m[1]]));
            let by_size = || match frame_size {
                felix::BLOCK_SIZE if marker != Some(felix::BLOCK_MARKER_32B) => BlockLayout::GBT,
                n => u16::try_from(n / 1024)
                    .ok()
                    .and_then(|kib| BlockLayout::full(kib).ok())
                    .unwrap_or(BlockLayout::GBT),
            };
            marker
                .and_then(BlockLayout::from_marker)
                .unwrap_or_else(by_size)
        })
    }

    fn check(&mut self, block: &[u8], frame_size: usize) -> Vec<&'static str> {
        let layout = self.layout(block, frame_size);
        self.counts.mode = if layout.is_full_mode() { "full" } else { "gbt" };
        self.counts.block_bytes = layout.block_size() as u64;
        let parsed = match Block::parse_as(layout, block) {
            Ok(b) => b,
            Err(_) => {
                self.counts.corrupt_blocks += 1;
                return vec!["felix_bad_block"];
            }
        };
        if parsed.index(&mut self.index).is_err() {
            self.counts.corrupt_blocks += 1;
            return vec!["felix_bad_trailers"];
        }
        let mut findings = Vec::new();
        let h = parsed.header;
        let next = &mut self.next_sequence[usize::from(h.elink)];
        if next.is_some_and(|want| want != h.sequence) {
            self.counts.sequence_gaps += 1;
            findings.push("felix_sequence_gap");
        }
        *next = Some((h.sequence + 1) % felix::SEQUENCE_MODULO);
        for s in parsed.subchunks(&self.index) {
            self.counts.subchunks += 1;
            self.counts.chunks += u64::from(matches!(
                s.trailer.kind,
                SubchunkKind::Both | SubchunkKind::Last
            ));
        }
        findings
    }
}

/// A checked frame's timestamp in the span, and the frame among the flagged when it is.
fn note(out: &mut RawInspection, record: &RawRecord<'_>, verdict: Verdict) {
    let timestamp = match verdict {
        Verdict::Keep { header, .. } => Some(header.timestamp),
        Verdict::Reject => None,
    };
    if let Some(t) = timestamp {
        out.first_timestamp.get_or_insert(t);
        out.last_timestamp = Some(t);
    }
    let findings = verdict.findings();
    if findings.is_empty() {
        return;
    }
    out.flagged_frames += 1;
    if out.flagged.len() < MAX_FLAGGED_LISTED {
        out.flagged.push(FlaggedFrame {
            frame: record.index,
            offset: record.offset,
            timestamp,
            findings,
            missing_before: match verdict {
                Verdict::Keep { missing_before, .. } => missing_before,
                Verdict::Reject => 0,
            },
        });
    }
}

/// The inspection as text.
pub fn render(r: &RawInspection) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "swdaq raw file: {} frames of {} ({} bytes each, fragment type {}), source {}, run {}, {:.3} GB",
        r.frames,
        r.frame_format.unwrap_or("another kind"),
        r.frame_size,
        r.fragment_type,
        r.source_id,
        r.run_number,
        r.bytes as f64 / 1e9,
    );
    if let (Some(first), Some(last)) = (r.first_timestamp, r.last_timestamp) {
        let _ = writeln!(
            s,
            "  timestamps {first} to {last} ({:.3} s of data); header's first timestamp {}",
            r.seconds, r.header_first_timestamp
        );
    }
    if let Some(f) = &r.felix {
        let _ = writeln!(
            s,
            "  FELIX {} mode blocks of {} bytes: {} e-links, {} chunks in {} subchunks, {} corrupt blocks, {} sequence gaps",
            if f.mode == "full" { "FULL" } else { "GBT" },
            f.block_bytes,
            f.elinks,
            f.chunks,
            f.subchunks,
            f.corrupt_blocks,
            f.sequence_gaps
        );
    }
    if let Some(c) = &r.checks {
        let _ = writeln!(
            s,
            "  continuity: {} missing frames (gaps), {} timestamp jumps, {} sequence errors, {} header errors, {} bad size",
            c.missing_frames, c.timestamp_jumps, c.sequence_errors, c.header_errors, c.bad_size
        );
    }
    for f in r.flagged.iter().take(MAX_FLAGGED_SHOWN) {
        let _ = writeln!(
            s,
            "  frame {} (byte {}), timestamp {}: {}{}",
            f.frame,
            f.offset,
            f.timestamp.map_or("?".into(), |t| t.to_string()),
            f.findings.join(", "),
            if f.missing_before > 0 {
                format!(" ({} frames missing before it)", f.missing_before)
            } else {
                String::new()
            }
        );
    }
    let unshown = r.flagged_frames - r.flagged.len().min(MAX_FLAGGED_SHOWN) as u64;
    if unshown > 0 {
        let _ = writeln!(
            s,
            "  ... and {unshown} more flagged frames (--json lists the first {MAX_FLAGGED_LISTED})"
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(s, "  BAD: {e}");
    }
    s
}

/// Flagged frames the text shows, one a line.
const MAX_FLAGGED_SHOWN: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use swdaq_format::rawfile::{RawFileHeader, RawFileWriter};
    use swdaq_format::wibeth::{self, WibEthHeader};
    use swdaq_format::{FragmentType, SourceId, daq_eth::DaqEthHeader};

    fn frame(i: u64) -> Vec<u8> {
        let mut out = vec![0u8; wibeth::FRAME_SIZE];
        let daq = DaqEthHeader {
            timestamp: i * 2048,
            seq_id: i as u16 & 0xfff,
            ..Default::default()
        };
        wibeth::encode(&daq, &WibEthHeader::healthy(), &[[0; 64]; 64], &mut out);
        out
    }

    #[test]
    fn a_gap_shows_as_missing_frames_and_a_cut_record_is_named() {
        let header = RawFileHeader {
            frame_type: FragmentType::WIBETH,
            frame_size: wibeth::FRAME_SIZE as u32,
            source_id: SourceId::readout(2),
            run_number: 9,
            first_timestamp: 0,
            created_unix_ns: 0,
        };
        let mut w = RawFileWriter::new(Vec::new(), &header).unwrap();
        for i in (0..10).chain(15..20) {
            w.write_frame(&frame(i)).unwrap();
        }
        let mut bytes = w.finish().unwrap();
        let whole = inspect_raw(&bytes[..]).unwrap();
        assert_eq!((whole.frames, whole.bytes), (15, bytes.len() as u64));
        assert_eq!(whole.checks.unwrap().missing_frames, 5);
        assert_eq!(whole.last_timestamp, Some(19 * 2048));
        assert_eq!(whole.error, None);
        // The frame after the gap is the tenth record, behind the header and nine records.
        let record = (RECORD_HEADER_SIZE + wibeth::FRAME_SIZE) as u64;
        assert_eq!(
            (whole.flagged_frames, &whole.flagged[..]),
            (
                1,
                &[FlaggedFrame {
                    frame: 10,
                    offset: RAW_HEADER_SIZE as u64 + 10 * record,
                    timestamp: Some(15 * 2048),
                    findings: vec!["gap_before"],
                    missing_before: 5,
                }][..]
            )
        );
        assert!(render(&whole).contains("5 missing frames"));
        assert!(render(&whole).contains(
            "frame 10 (byte 72144), timestamp 30720: gap_before (5 frames missing before it)"
        ));
        let mut offsets = Vec::new();
        walk_raw(&bytes[..], |r| {
            offsets.push((r.index, r.offset, r.frame.len()))
        })
        .unwrap();
        assert_eq!(offsets.len(), 15);
        assert!(
            offsets
                .iter()
                .enumerate()
                .all(|(i, &(index, offset, len))| index == i as u64
                    && offset == RAW_HEADER_SIZE as u64 + i as u64 * record
                    && len == wibeth::FRAME_SIZE)
        );
        bytes.truncate(bytes.len() - 100);
        let cut = inspect_raw(&bytes[..]).unwrap();
        assert_eq!(cut.frames, 14);
        assert!(cut.error.unwrap().starts_with("after 14 frames"));
        assert!(inspect_raw(&b"SWDAQRAW"[..]).is_err());
    }

    #[test]
    fn felix_full_mode_blocks_are_walked_and_bad_ones_flagged() {
        let layout = BlockLayout::full(4).unwrap();
        let header = RawFileHeader {
            frame_type: felix::RAW_FILE_TYPE,
            frame_size: 4096,
            source_id: SourceId::readout(0),
            run_number: 1,
            first_timestamp: 0,
            created_unix_ns: 0,
        };
        let mut blocks = Vec::new();
        for elink in [0u16, 1] {
            let mut p = felix::BlockPacker::with_layout(layout, elink, 0);
            for i in 0..10u8 {
                p.push(&[i; 5000], felix::ChunkFlags::default(), |b| {
                    blocks.push(b.to_vec())
                });
            }
            p.flush(|b| blocks.push(b.to_vec()));
        }
        let n = blocks.len();
        let mut w = RawFileWriter::new(Vec::new(), &header).unwrap();
        for (i, b) in blocks.iter().enumerate() {
            // Block 3 lost (a sequence gap on its e-link), block 5 with a bad marker.
            match i {
                3 => continue,
                5 => {
                    let mut bad = b.clone();
                    bad[3] = 0;
                    w.write_frame(&bad).unwrap();
                }
                _ => w.write_frame(b).unwrap(),
            }
        }
        let r = inspect_raw(&w.finish().unwrap()[..]).unwrap();
        let f = r.felix.clone().unwrap();
        assert_eq!((f.mode, f.block_bytes, f.elinks), ("full", 4096, 2));
        assert_eq!(
            (f.corrupt_blocks, f.sequence_gaps),
            (1, 2),
            "the gap, and the block after the bad one"
        );
        assert_eq!(r.frames as usize, n - 1);
        assert_eq!(r.flagged_frames, 3);
        assert_eq!(r.flagged[1].findings, vec!["felix_bad_block"]);
        assert!(render(&r).contains("FELIX FULL mode blocks of 4096 bytes: 2 e-links"));
    }

    proptest! {
        /// Any bytes after a valid header: an inspection or a named error, never a panic.
        #[test]
        fn any_file_is_inspected_or_refused(
            frame_type in prop_oneof![Just(12u32), Just(1u32), Just(felix::RAW_FILE_TYPE.0), 0u32..20],
            frame_size in 1u32..9000,
            body in proptest::collection::vec(any::<u8>(), 0..20_000),
        ) {
            let header = RawFileHeader {
                frame_type: FragmentType(frame_type),
                frame_size,
                source_id: SourceId::readout(0),
                run_number: 1,
                first_timestamp: 0,
                created_unix_ns: 0,
            };
            let mut bytes = header.to_bytes().to_vec();
            bytes.extend_from_slice(&body);
            let mut end = RAW_HEADER_SIZE as u64;
            let r = walk_raw(&bytes[..], |record| {
                assert_eq!(record.offset, end);
                end += (RECORD_HEADER_SIZE + record.frame.len()) as u64;
            }).unwrap();
            prop_assert_eq!(r.bytes, end);
            prop_assert!(r.bytes <= bytes.len() as u64);
            prop_assert!(r.flagged.len() as u64 <= r.flagged_frames.min(MAX_FLAGGED_LISTED as u64));
            let _ = render(&r);
            let _ = inspect_raw(&body[..]);
        }
    }
}
