//! What an FRD file holds, checked: the `RAW_0002` header against the file, every event's
//! CRC32C, and every FED fragment in it (markers, length, CRC-16, level-1 id against the
//! event number). Library side of `swdaq inspect` for `.raw` files.
//!
//! A damaged file is read as far as it goes: the events are walked with
//! [`FrdScan`], which resynchronises on the next intact event after a corrupt header or a
//! wrong size, so every intact event is listed and every damaged span, header disagreement
//! and bad CRC is named in [`FrdReport::problems`] with where and why.

use serde::Serialize;
use std::path::Path;
use swdaq_format::fed::{FED_L1_ID_MASK, fed_fragments};
use swdaq_format::fed_detector::detector_payload;
use swdaq_format::frd::{
    FRD_EVENT_HEADER_SIZE, FRD_FILE_HEADER_SIZE, FrdEvent, FrdFileHeader, FrdItem, FrdScan,
    frd_flags,
};
use swdaq_format::input_file::OnePass;
use swdaq_format::provenance::Provenance;

#[derive(Debug, Clone, Serialize)]
pub struct FedSummary {
    pub source_id: u16,
    pub l1_id: u32,
    pub bx_id: u16,
    pub bytes: usize,
    pub crc_ok: bool,
    /// A detector's own payload (`fed_detector`): what its extension words say.
    pub detector: Option<DetectorSummary>,
    /// Why the detector payload words cannot be believed, if they cannot.
    pub detector_error: Option<String>,
}

/// A detector payload's extension words (#35).
#[derive(Debug, Clone, Serialize)]
pub struct DetectorSummary {
    pub payload_bytes: usize,
    /// The detector's clock, when its decoder gave one.
    pub timestamp: Option<u64>,
    /// The decoder's flags (`SWDAQ_FRAGMENT_*`, the detector's own in bits 16..32).
    pub flags: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    /// Where the event's header starts in the file.
    pub offset: usize,
    pub event: u32,
    pub lumi: u32,
    pub incomplete: bool,
    pub bytes: u32,
    pub crc_ok: bool,
    pub fed_count: usize,
    /// FED fragments that do not parse, fail their CRC-16, carry another level-1 id or a
    /// detector payload longer than themselves.
    pub bad_feds: usize,
    /// FED fragments whose level-1 id is not the event number's.
    pub feds_with_other_l1_id: usize,
    /// Why the FED fragments could not all be read, if they could not.
    pub fed_error: Option<String>,
    /// Filled for the event asked for only.
    pub feds: Vec<FedSummary>,
}

/// The `RAW_0002` header's fields.
#[derive(Debug, Clone, Serialize)]
pub struct HeaderSummary {
    pub run: u32,
    pub lumi: u32,
    pub event_count: u32,
    /// The file size the header declares, header included.
    pub file_size: u64,
}

/// Something wrong with the file: where (bytes from its start) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrdProblem {
    pub offset: usize,
    /// Bytes the problem covers (a damaged span); 0 for a disagreement about the whole file.
    pub bytes: usize,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrdReport {
    /// The file header, `None` when it does not parse (named in `problems`).
    pub header: Option<HeaderSummary>,
    /// Bytes in the file.
    pub file_size: u64,
    /// Every event found, intact or with a bad CRC32C, in file order.
    pub events: Vec<EventSummary>,
    pub bad_event_crc: usize,
    pub incomplete: usize,
    /// Everything wrong, each named: header, damaged spans, events whose CRC32C fails.
    /// Empty for a good file.
    pub problems: Vec<FrdProblem>,
    /// The run and the software, from the `.jsn` beside the file ([`provenance_beside`]: the
    /// `.raw` has no place for them); `None` without one, or from an older swdaq.
    pub provenance: Option<Provenance>,
}

/// The provenance of the `.jsn` the builder unit wrote beside `raw`, if it has one; a
/// missing or unreadable `.jsn` has none (the `.raw` is inspected all the same).
pub fn provenance_beside(raw: &Path) -> Option<Provenance> {
    let text = std::fs::read_to_string(raw.with_extension("jsn")).ok()?;
    crate::jsn::provenance(&text).ok().flatten()
}

/// Reads and checks a whole FRD file in one pass, however damaged and large (a mapped file's
/// pages are handed back behind it); `detail` names an event whose FED fragments to list.
pub fn inspect(file: &(impl OnePass + ?Sized), detail: Option<u32>) -> FrdReport {
    let bytes = file.bytes();
    let mut problems = Vec::new();
    let header = match FrdFileHeader::parse(bytes) {
        Ok(h) => Some(h),
        Err(e) => {
            let unwritten = bytes.len() >= FRD_FILE_HEADER_SIZE
                && bytes[..FRD_FILE_HEADER_SIZE].iter().all(|&b| b == 0);
            problems.push(FrdProblem {
                offset: 0,
                bytes: FRD_FILE_HEADER_SIZE.min(bytes.len()),
                reason: if unwritten {
                    "file header not written (all zero): the writer writes it when it closes the file; events found by scanning".into()
                } else {
                    format!("{e}; events found by scanning")
                },
            });
            None
        }
    };
    let mut report = FrdReport {
        header: header.map(|h| HeaderSummary {
            run: h.run,
            lumi: h.lumi,
            event_count: h.event_count,
            file_size: h.file_size,
        }),
        file_size: bytes.len() as u64,
        events: Vec::new(),
        bad_event_crc: 0,
        incomplete: 0,
        problems: Vec::new(),
        provenance: None,
    };
    for item in FrdScan::new(bytes, FRD_FILE_HEADER_SIZE, header.map(|h| h.run)).telling(file) {
        match item {
            FrdItem::Event { offset, event } => {
                let summary = summarise(offset, &event, detail);
                let bytes = FRD_EVENT_HEADER_SIZE + summary.bytes as usize;
                for why in event_header_doubts(&event, &summary, header.as_ref()) {
                    problems.push(FrdProblem {
                        offset,
                        bytes,
                        reason: format!("event {}: {why}", summary.event),
                    });
                }
                report.bad_event_crc += usize::from(!summary.crc_ok);
                report.incomplete += usize::from(summary.incomplete);
                report.events.push(summary);
            }
            FrdItem::Damaged { offset, len, error } => problems.push(FrdProblem {
                offset,
                bytes: len,
                reason: format!("no intact event: {error}"),
            }),
        }
    }
    if let Some(h) = header {
        if h.file_size != report.file_size {
            problems.push(FrdProblem {
                offset: 0,
                bytes: 0,
                reason: format!(
                    "the header says the file holds {} bytes, it holds {}",
                    h.file_size, report.file_size
                ),
            });
        }
        if h.event_count as usize != report.events.len() {
            problems.push(FrdProblem {
                offset: 0,
                bytes: 0,
                reason: format!(
                    "the header says {} events, {} found",
                    h.event_count,
                    report.events.len()
                ),
            });
        }
    }
    problems.sort_by_key(|p| p.offset);
    report.problems = problems;
    report
}

/// The file's last event (however damaged the file, or while it is still written), with its
/// FED fragments listed: the newest stored event, as the operator's console shows it. One
/// pass, as [`inspect`]'s.
pub fn newest_event(file: &(impl OnePass + ?Sized)) -> Option<EventSummary> {
    let bytes = file.bytes();
    let run = FrdFileHeader::parse(bytes).ok().map(|h| h.run);
    FrdScan::new(bytes, FRD_FILE_HEADER_SIZE, run)
        .telling(file)
        .filter_map(|item| match item {
            FrdItem::Event { offset, event } => Some((offset, event)),
            FrdItem::Damaged { .. } => None,
        })
        .last()
        .map(|(offset, event)| summarise(offset, &event, Some(event.header.event)))
}

/// What is wrong with an event the scan found whole: its CRC32C, and the header fields the
/// CRC does not cover, checked against the file header, the flags CMS defines and its FEDs.
fn event_header_doubts(
    event: &FrdEvent<'_>,
    summary: &EventSummary,
    file: Option<&FrdFileHeader>,
) -> Vec<String> {
    let h = event.header;
    let mut doubts = Vec::new();
    if !summary.crc_ok {
        doubts.push("CRC32C of its payload fails".to_string());
    }
    if let Some(f) = file
        && (h.run, h.lumi) != (f.run, f.lumi)
    {
        doubts.push(format!(
            "run {} lumi section {}, the file's are {} and {}",
            h.run, h.lumi, f.run, f.lumi
        ));
    }
    let unknown_flags = h.flags & !(frd_flags::GENERATED | frd_flags::INCOMPLETE);
    if unknown_flags != 0 {
        doubts.push(format!("unassigned flag bits 0x{unknown_flags:04x} set"));
    }
    if summary.fed_count > 0 && summary.feds_with_other_l1_id == summary.fed_count {
        doubts.push(format!(
            "none of its {} FEDs carries its level-1 id (event number corrupt?)",
            summary.fed_count
        ));
    }
    doubts
}

/// One event's summary with its FED fragments walked (listed when it is `detail`).
fn summarise(offset: usize, event: &FrdEvent<'_>, detail: Option<u32>) -> EventSummary {
    let h = event.header;
    let mut summary = EventSummary {
        offset,
        event: h.event,
        lumi: h.lumi,
        incomplete: h.flags & frd_flags::INCOMPLETE != 0,
        bytes: h.event_size,
        crc_ok: event.crc_ok(),
        fed_count: 0,
        bad_feds: 0,
        feds_with_other_l1_id: 0,
        fed_error: None,
        feds: Vec::new(),
    };
    for fed in fed_fragments(event.payload) {
        match fed {
            Ok((_, f)) => {
                let crc_ok = f.crc_ok();
                let other_l1_id = f.header.l1_id != h.event & FED_L1_ID_MASK;
                let detector = detector_payload(&f);
                summary.fed_count += 1;
                summary.bad_feds += usize::from(!crc_ok || other_l1_id || detector.is_err());
                summary.feds_with_other_l1_id += usize::from(other_l1_id);

                if detail == Some(h.event) {
                    let (detector, detector_error) = match detector {
                        Ok(payload) => (payload, None),
                        Err(e) => (None, Some(e.to_string())),
                    };
                    summary.feds.push(FedSummary {
                        source_id: f.header.source_id,
                        l1_id: f.header.l1_id,
                        bx_id: f.header.bx_id,
                        bytes: f.bytes.len(),
                        crc_ok,
                        detector: detector.map(|d| DetectorSummary {
                            payload_bytes: d.bytes.len(),
                            timestamp: d.words.timestamp(),
                            flags: d.words.flags,
                        }),
                        detector_error,
                    });
                }
            }
            Err(e) => summary.fed_error = Some(e.to_string()),
        }
    }
    summary.feds.reverse();
    summary
}

pub fn render(r: &FrdReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let header = r
        .header
        .as_ref()
        .map_or("header unreadable".to_string(), |h| {
            format!(
                "run {} lumi section {}, {} events and {} bytes in the header",
                h.run, h.lumi, h.event_count, h.file_size
            )
        });
    let _ = writeln!(
        out,
        "FRD file: {header}; {} events read, {} bytes; {} with a bad CRC32C, {} incomplete",
        r.events.len(),
        r.file_size,
        r.bad_event_crc,
        r.incomplete
    );
    if let Some(p) = &r.provenance {
        let run_number = p.run_number.to_string();
        let facts = p
            .texts()
            .into_iter()
            .chain([("run_number", run_number.as_str())]);
        out += &swdaq_format::provenance::render(facts);
    }
    for e in &r.events {
        let _ = writeln!(
            out,
            "event {:>10}  ls {:>4}  {:>8} bytes  crc32c {}  {} FEDs{}{}{}",
            e.event,
            e.lumi,
            e.bytes,
            if e.crc_ok { "ok" } else { "BAD" },
            e.fed_count,
            if e.bad_feds > 0 {
                format!(" ({} bad)", e.bad_feds)
            } else {
                String::new()
            },
            if e.incomplete { "  INCOMPLETE" } else { "" },
            e.fed_error
                .as_ref()
                .map_or(String::new(), |m| format!("  FED data unreadable: {m}")),
        );
        for f in &e.feds {
            let detector = match (&f.detector, &f.detector_error) {
                (Some(d), _) => format!(
                    "  detector payload {} bytes, timestamp {}, flags {:#x}",
                    d.payload_bytes,
                    d.timestamp.map_or("-".to_string(), |t| t.to_string()),
                    d.flags
                ),
                (None, Some(error)) => format!("  detector payload BAD: {error}"),
                (None, None) => String::new(),
            };
            let _ = writeln!(
                out,
                "    FED {:>4}  L1 id {:>8}  BX {:>4}  {:>6} bytes  crc16 {}{detector}",
                f.source_id,
                f.l1_id,
                f.bx_id,
                f.bytes,
                if f.crc_ok { "ok" } else { "BAD" }
            );
        }
    }
    for p in &r.problems {
        let span = if p.bytes > 0 {
            format!("bytes {}..{}", p.offset, p.offset + p.bytes)
        } else {
            "file".to_string()
        };
        let _ = writeln!(out, "BAD {span}: {}", p.reason);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::EventBuilder;
    use crate::check::SuperFragmentBuilder;
    use crate::files::{FileWriter, WriterConfig};
    use std::time::{Duration, Instant};
    use swdaq_sim::fed::{FedEmulator, FedEvent, FedSimConfig};

    /// A closed file of `n` events of three FEDs each, as a builder unit writes it.
    fn written_file(n: u32) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let fed_config = FedSimConfig {
            feds: FedSimConfig::uniform(5, 3, 256, 0),
            trigger_rate_hz: 1e5,
            poisson: false,
            seed: 1,
            faults: Default::default(),
        };
        let mut emu = FedEmulator::new(fed_config).unwrap();
        let mut check = SuperFragmentBuilder::new(0, vec![5, 6, 7]);
        let mut build = EventBuilder::new(9, 1, Duration::from_secs(1));
        let mut writer = FileWriter::new(WriterConfig {
            directory: dir.path().to_owned(),
            run: 9,
            events_per_file: n,
            min_free_bytes: 0,
            disk_full: Default::default(),
            source: "t".into(),
            provenance: None,
        })
        .unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        for _ in 0..n {
            emu.next_event(&mut ev, &mut truth);
            let built = build
                .start(ev.event, 1, check.build(&ev), Instant::now())
                .unwrap();
            writer.write(built).unwrap();
        }
        writer.finish(None).unwrap();
        std::fs::read(
            dir.path()
                .join("run000009/run000009_ls0001_index000000.raw"),
        )
        .unwrap()
    }

    fn intact(r: &FrdReport) -> usize {
        r.events.iter().filter(|e| e.crc_ok).count()
    }

    #[test]
    fn reads_back_what_the_writer_wrote_and_finds_corruption() {
        let mut bytes = written_file(10);
        let report = inspect(&bytes, Some(3));
        assert_eq!(
            (
                report.events.len(),
                report.bad_event_crc,
                &report.problems[..]
            ),
            (10, 0, &[][..])
        );
        assert!(
            report
                .events
                .iter()
                .all(|e| e.fed_count == 3 && e.bad_feds == 0)
        );
        assert_eq!(
            report.events[2]
                .feds
                .iter()
                .map(|f| f.source_id)
                .collect::<Vec<_>>(),
            vec![5, 6, 7]
        );
        assert!(render(&report).contains("FED    6"));
        // A flipped payload byte in the first event: its CRC32C and that FED's CRC-16 fail.
        bytes[32 + 24 + 100] ^= 1;
        let report = inspect(&bytes, None);
        assert_eq!(report.bad_event_crc, 1);
        assert_eq!(report.events[0].bad_feds, 1);
        assert_eq!(report.problems.len(), 1);
        assert!(render(&report).contains("BAD bytes 32.."));
    }

    /// Issue #22: a file cut by one byte showed none of its intact events.
    #[test]
    fn a_cut_file_shows_every_whole_event_and_names_the_cut_one() {
        let bytes = written_file(100);
        let cut = &bytes[..bytes.len() - 1];
        let report = inspect(cut, None);
        assert_eq!((report.events.len(), intact(&report)), (99, 99));
        let reasons: Vec<&str> = report.problems.iter().map(|p| p.reason.as_str()).collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(
            reasons.iter().any(|r| r.contains("buffer holds")),
            "{reasons:?}"
        );
        assert!(reasons.iter().any(|r| r.contains("100 events, 99 found")));
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("holds 1 bytes") || r.contains("bytes, it holds"))
        );
    }

    #[test]
    fn the_newest_event_is_the_last_whole_one_with_its_feds() {
        let bytes = written_file(10);
        let newest = newest_event(&bytes).unwrap();
        let listed = inspect(&bytes, Some(newest.event));
        assert_eq!(newest.offset, listed.events.last().unwrap().offset);
        let feds: Vec<u16> = newest.feds.iter().map(|f| f.source_id).collect();
        assert_eq!(feds, [5, 6, 7]);
        assert!(newest.feds.iter().all(|f| f.crc_ok && f.bytes > 0));
        // While written (header not yet there) or cut: the last whole event.
        let mut open = bytes.clone();
        open[..FRD_FILE_HEADER_SIZE].fill(0);
        let cut = &open[..open.len() - 1];
        let before_last = &listed.events[listed.events.len() - 2];
        assert_eq!(newest_event(cut).unwrap().offset, before_last.offset);
        assert!(newest_event(&bytes[..FRD_FILE_HEADER_SIZE]).is_none());
    }

    /// Issue #22: a flipped bit in the first event's header hid all 100 events.
    #[test]
    fn a_corrupt_event_header_hides_only_that_event() {
        let bytes = written_file(100);
        // Version, flags, run, lumi, event number, size, CRC32C.
        let flips = [
            (0, 1),
            (1, 7),
            (2, 1),
            (4, 0),
            (8, 2),
            (12, 0),
            (14, 5),
            (16, 0),
            (18, 3),
            (19, 7),
            (20, 4),
        ];
        for (byte, bit) in flips {
            let mut bad = bytes.clone();
            bad[FRD_FILE_HEADER_SIZE + byte] ^= 1 << bit;
            let report = inspect(&bad, None);
            let others = report
                .events
                .iter()
                .filter(|e| e.offset > FRD_FILE_HEADER_SIZE);
            assert_eq!(
                others.filter(|e| e.crc_ok).count(),
                99,
                "byte {byte} bit {bit}"
            );
            assert_eq!(report.events.last().map(|e| e.event), Some(100));
            assert!(
                report
                    .problems
                    .iter()
                    .any(|p| p.offset == FRD_FILE_HEADER_SIZE),
                "{:?}",
                report.problems
            );
        }
    }

    /// Issue #22: a flipped event count in the file header went unnoticed.
    #[test]
    fn a_wrong_event_count_or_header_is_named() {
        let mut bytes = written_file(5);
        bytes[12] ^= 1 << 3;
        let report = inspect(&bytes, None);
        assert_eq!(intact(&report), 5);
        assert_eq!(report.problems.len(), 1);
        assert!(report.problems[0].reason.contains("13 events, 5 found"));
        // A header the writer never wrote (a killed writer's .tmp): the events still read.
        bytes[..FRD_FILE_HEADER_SIZE].fill(0);
        let report = inspect(&bytes, None);
        assert!(report.header.is_none());
        assert_eq!(intact(&report), 5);
        assert!(report.problems[0].reason.contains("not written"));
    }

    proptest::proptest! {
        /// Any bytes: a report, never a panic; every event listed lies inside the file.
        #[test]
        fn inspect_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000)) {
            let report = inspect(&bytes, Some(0));
            for e in &report.events {
                proptest::prop_assert!(e.offset + 24 + e.bytes as usize <= bytes.len());
            }
            let _ = render(&report);
        }
    }
}
