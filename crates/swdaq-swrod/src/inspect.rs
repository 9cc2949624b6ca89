//! What a SW ROD run's file holds (`swdaq inspect swrod_run…raw`): a swdaq raw file whose
//! records are ATLAS full events. Every event is checked — its marker, header and fragment
//! sizes, and each ROB's marker, sizes and ROD (`eformat::RobFragment::parse`), each ROD's
//! L1 ID against the event's — and its status shown (missing ROBs, ROB status bits). A bad
//! event is named with why and the others still listed; a record whose length is damaged is
//! skipped by resynchronising on the next record that holds a whole event.

use serde::Serialize;
use std::fmt::Write as _;
use swdaq_format::FormatError;
use swdaq_format::eformat::status;
use swdaq_format::eformat_event::{EVENT_FIXED_HEADER_WORDS, EVENT_MARKER, FullEvent};
use swdaq_format::rawfile::{RAW_HEADER_SIZE, RECORD_HEADER_SIZE, RawFileHeader, record_at};

const WORD: usize = 4;

#[derive(Debug, Clone, Serialize)]
pub struct SwrodFileReport {
    /// The raw file header's run number, `None` when the header does not decode.
    pub run_number: Option<u32>,
    pub file_size: u64,
    /// The good events, in file order.
    pub events: Vec<EventSummary>,
    /// Events that carry status (missing ROBs, ROB status bits): listed, not bad.
    pub flagged: usize,
    /// Everything wrong, each named: the header, bad events, damaged records. Empty for a
    /// good file.
    pub problems: Vec<SwrodProblem>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    /// Index of the record among the file's whole records.
    pub record: usize,
    /// Where the record starts in the file.
    pub offset: usize,
    pub l1_id: u32,
    pub bc_id: u32,
    pub global_id: u32,
    pub bytes: usize,
    pub robs: usize,
    pub missing_robs: Vec<u32>,
    /// ROBs with status bits set: source id and the bits' names.
    pub rob_status: Vec<(u32, Vec<&'static str>)>,
    /// The event asked for only: each ROB's source id and bytes of ROD data.
    pub rob_data: Vec<(u32, usize)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwrodProblem {
    pub offset: usize,
    pub bytes: usize,
    /// The record's index, when the record itself was whole.
    pub record: Option<usize>,
    /// The event's L1 ID, when its header was read.
    pub l1_id: Option<u32>,
    pub reason: String,
}

/// Reads and checks a whole SW ROD file, however damaged; `detail` names an L1 ID whose ROBs
/// to list.
pub fn inspect(bytes: &[u8], detail: Option<u32>) -> SwrodFileReport {
    let mut report = SwrodFileReport {
        run_number: None,
        file_size: bytes.len() as u64,
        events: Vec::new(),
        flagged: 0,
        problems: Vec::new(),
    };
    match RawFileHeader::decode(bytes) {
        Ok(h) => report.run_number = Some(h.run_number),
        Err(e) => report.problems.push(SwrodProblem {
            offset: 0,
            bytes: RAW_HEADER_SIZE.min(bytes.len()),
            record: None,
            l1_id: None,
            reason: format!("{e}; records read from byte {RAW_HEADER_SIZE} on"),
        }),
    }
    let mut at = RAW_HEADER_SIZE;
    let mut record = 0;
    while at < bytes.len() {
        let whole = record_at(bytes, at).ok().filter(|e| holds_one_event(e));
        let Some(event) = whole else {
            // The record's length or the event's size word is wrong: its end is unknown.
            let next = next_event_record(bytes, at).unwrap_or(bytes.len());
            let why = match record_at(bytes, at) {
                Err(e) => e.to_string(),
                Ok(_) => "the event's size word disagrees with the record length".into(),
            };
            report.problems.push(SwrodProblem {
                offset: at,
                bytes: next - at,
                record: None,
                l1_id: None,
                reason: format!("damaged record, skipped to the next whole event: {why}"),
            });
            at = next;
            continue;
        };
        match check_event(event, detail) {
            Ok(mut summary) => {
                (summary.record, summary.offset) = (record, at);
                let has_status = !summary.missing_robs.is_empty() || !summary.rob_status.is_empty();
                report.flagged += usize::from(has_status);
                report.events.push(summary);
            }
            Err((l1_id, reason)) => report.problems.push(SwrodProblem {
                offset: at,
                bytes: RECORD_HEADER_SIZE + event.len(),
                record: Some(record),
                l1_id,
                reason,
            }),
        }
        record += 1;
        at += RECORD_HEADER_SIZE + event.len();
    }
    report
}

/// Whether the event's size word covers `frame` exactly: the record's length and the event
/// agree, so the record's end is trustworthy (a damaged marker is named with the event).
fn holds_one_event(frame: &[u8]) -> bool {
    frame.len() >= EVENT_FIXED_HEADER_WORDS * WORD
        && (word(frame, 1) as usize).checked_mul(WORD) == Some(frame.len())
}

/// The next record start after `from` (records are whole words) that holds a whole event
/// with an intact marker.
fn next_event_record(bytes: &[u8], from: usize) -> Option<usize> {
    (from + WORD..bytes.len()).step_by(WORD).find(|&at| {
        record_at(bytes, at).is_ok_and(|e| holds_one_event(e) && word(e, 0) == EVENT_MARKER)
    })
}

fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// One event checked whole: its summary, or its L1 ID (when read) and why it is bad.
fn check_event(bytes: &[u8], detail: Option<u32>) -> Result<EventSummary, (Option<u32>, String)> {
    let event = FullEvent::parse(bytes).map_err(|e| (None, e.to_string()))?;
    let h = event.header;
    let bad = |reason: String| (Some(h.l1_id), reason);
    let mut summary = EventSummary {
        record: 0,
        offset: 0,
        l1_id: h.l1_id,
        bc_id: h.bc_id,
        global_id: h.global_id,
        bytes: bytes.len(),
        robs: 0,
        missing_robs: event.missing_robs(),
        rob_status: Vec::new(),
        rob_data: Vec::new(),
    };
    let mut at = bytes.len() - event.payload().len();
    for rob in event.robs() {
        let rob = rob.map_err(|e: FormatError| {
            bad(format!(
                "ROB {} (byte {at} of the event): {e}",
                summary.robs
            ))
        })?;
        if rob.rod.l1_id != h.l1_id {
            return Err(bad(format!(
                "ROB 0x{:08x}: its ROD's L1 ID is 0x{:08x}, the event's 0x{:08x}",
                rob.source_id, rob.rod.l1_id, h.l1_id
            )));
        }
        let first_status = rob.status().next().unwrap_or(0);
        if first_status != 0 {
            summary
                .rob_status
                .push((rob.source_id, status::names(first_status)));
        }
        if detail == Some(h.l1_id) {
            summary.rob_data.push((rob.source_id, rob.data.len()));
        }
        summary.robs += 1;
        at += WORD * word(&bytes[at..], 1) as usize;
    }
    Ok(summary)
}

/// The report as text: one line for the file, one per event, one per problem.
pub fn render(r: &SwrodFileReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "SW ROD file: run {}, {} bytes; {} good events ({} with status), {} problems",
        r.run_number.map_or("?".into(), |n| n.to_string()),
        r.file_size,
        r.events.len(),
        r.flagged,
        r.problems.len()
    );
    for e in &r.events {
        let _ = write!(
            s,
            "event L1 ID 0x{:08x}  BCID {:>4}  global {:>8}  {:>8} bytes  {} ROBs",
            e.l1_id, e.bc_id, e.global_id, e.bytes, e.robs
        );
        if !e.missing_robs.is_empty() {
            let missing: Vec<String> = e
                .missing_robs
                .iter()
                .map(|m| format!("0x{m:08x}"))
                .collect();
            let _ = write!(s, "  missing {}", missing.join(","));
        }
        for (source, names) in &e.rob_status {
            let _ = write!(s, "  ROB 0x{source:08x} {}", names.join(","));
        }
        s.push('\n');
        for (source, data) in &e.rob_data {
            let _ = writeln!(s, "    ROB 0x{source:08x}  {data:>6} bytes of ROD data");
        }
    }
    for p in &r.problems {
        let what = match (p.record, p.l1_id) {
            (Some(n), Some(l1)) => format!("record {n} (event L1 ID 0x{l1:08x})"),
            (Some(n), None) => format!("record {n}"),
            _ => "file".to_string(),
        };
        let _ = writeln!(
            s,
            "BAD {what} at bytes {}..{}: {}",
            p.offset,
            p.offset + p.bytes,
            p.reason
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use swdaq_format::SourceId;
    use swdaq_format::eformat::{RobFragment, RodHeader};
    use swdaq_format::eformat_event::{EventHeader, RAW_FILE_TYPE, encode_event, event_status};
    use swdaq_format::rawfile::RawFileWriter;

    fn event(l1_id: u32, robs: u32) -> Vec<u8> {
        let robs: Vec<Vec<u8>> = (0..robs)
            .map(|s| {
                let rod = RodHeader {
                    source_id: 0x0071_0000 + s,
                    l1_id,
                    ..Default::default()
                };
                RobFragment::assemble(0x0071_0000 + s, &[0], &rod, &[s as u8; 40])
            })
            .collect();
        let refs: Vec<&[u8]> = robs.iter().map(Vec::as_slice).collect();
        let header = EventHeader {
            l1_id,
            global_id: l1_id,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_event(&mut out, &header, &event_status(&[]), &refs);
        out
    }

    fn file(events: u32) -> (Vec<u8>, Vec<usize>) {
        let header = RawFileHeader {
            frame_type: RAW_FILE_TYPE,
            frame_size: 4096,
            source_id: SourceId::readout(0),
            run_number: 5,
            first_timestamp: 0,
            created_unix_ns: 0,
        };
        let mut w = RawFileWriter::new(Vec::new(), &header).unwrap();
        let mut starts = Vec::new();
        let mut at = RAW_HEADER_SIZE;
        for l1 in 0..events {
            let e = event(l1, 3);
            starts.push(at);
            at += RECORD_HEADER_SIZE + e.len();
            w.write_frame(&e).unwrap();
        }
        (w.finish().unwrap(), starts)
    }

    #[test]
    fn a_good_file_lists_every_event() {
        let (bytes, _) = file(10);
        let r = inspect(&bytes, Some(4));
        assert_eq!(
            (r.events.len(), r.problems.len(), r.run_number),
            (10, 0, Some(5))
        );
        assert_eq!(r.events[4].rob_data.len(), 3);
        assert!(render(&r).contains("10 good events"));
    }

    /// Issue #22: `swdaq inspect` of a SW ROD file did not check markers or payloads.
    #[test]
    fn bad_markers_sizes_and_l1_ids_are_named_and_the_rest_listed() {
        let (bytes, starts) = file(10);
        let event_at = |k: usize| starts[k] + RECORD_HEADER_SIZE;
        let rob_at = |k: usize| event_at(k) + (EVENT_FIXED_HEADER_WORDS + 1) * WORD;
        let cases: [(usize, usize, &str); 5] = [
            (event_at(2), 0, "bad magic"),           // full-event marker
            (event_at(2), 8, "header size"),         // event header size
            (rob_at(2), 0, "ROB 0 "),                // first ROB's marker
            (rob_at(2), 4, "ROB 0 "),                // first ROB's size
            (rob_at(2) + 8 * WORD + 20, 0, "L1 ID"), // first ROD's L1 ID
        ];
        for (at, byte, why) in cases {
            let mut bad = bytes.clone();
            bad[at + byte] ^= 0x10;
            let r = inspect(&bad, None);
            assert_eq!(r.events.len(), 9, "{why}: {:?}", r.problems);
            assert_eq!(r.problems.len(), 1, "{why}");
            assert_eq!(r.problems[0].record, Some(2));
            assert!(
                r.problems[0].reason.contains(why),
                "{why}: {:?}",
                r.problems
            );
            assert!(render(&r).contains("BAD record 2"));
        }
        // A damaged record length: skipped to the next whole event.
        let mut bad = bytes.clone();
        bad[starts[3] + 1] ^= 0x40;
        let r = inspect(&bad, None);
        assert_eq!(r.events.len(), 9, "{:?}", r.problems);
        assert_eq!(r.problems[0].offset, starts[3]);
        // Cut short: the last event named, the others listed.
        let r = inspect(&bytes[..bytes.len() - 3], None);
        assert_eq!((r.events.len(), r.problems.len()), (9, 1));
    }

    proptest! {
        /// Any bytes after a good header, or none: a report, never a panic.
        #[test]
        fn inspect_never_panics(body in proptest::collection::vec(any::<u8>(), 0..3000), keep_header: bool) {
            let (good, _) = file(1);
            let mut bytes = if keep_header { good[..RAW_HEADER_SIZE].to_vec() } else { Vec::new() };
            bytes.extend(body);
            let r = inspect(&bytes, Some(0));
            let _ = render(&r);
        }

        /// A good file with one flipped byte: every other event still listed.
        #[test]
        fn one_flipped_byte_costs_at_most_one_event(at: proptest::sample::Index, flip in 1u8..=255) {
            let (bytes, _) = file(6);
            let mut bad = bytes.clone();
            let i = RAW_HEADER_SIZE + at.index(bytes.len() - RAW_HEADER_SIZE);
            bad[i] ^= flip;
            let r = inspect(&bad, None);
            prop_assert!(r.events.len() >= 5, "{:?}", r.problems);
        }
    }
}
