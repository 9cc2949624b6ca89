//! What an ATLAS EventStorage file holds (`swdaq inspect FILE.data`), whoever wrote it: a
//! SW ROD run or ATLAS's own SFOs. The head (file start, names, metadata, run parameters)
//! is read and shown; every event is checked — its full-event header (marker, sizes,
//! version, lists, stream tags), each ROB's marker, version, sizes and ROD, each ROD's L1 ID
//! against the event's, the event's run and luminosity block against the file's — and its
//! status shown (stand-in ROBs for ones not collected, ROB status bits). The end record's
//! counts are checked against the events found, and the file name against the head. A bad
//! event or damaged span is named with why and the rest still listed.

use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use swdaq_format::FormatError;
use swdaq_format::eformat::status;
use swdaq_format::eformat_event::FullEvent;
use swdaq_format::eventstorage::{FileEnd, FileHead, RawFileName, Record, Records, megabytes};
use swdaq_format::input_file::OnePass;

#[derive(Debug, Clone, Serialize)]
pub struct EventStorageReport {
    pub file_size: u64,
    /// The head, `None` when it does not read.
    pub head: Option<HeadSummary>,
    /// The good events, in file order.
    pub events: Vec<EventSummary>,
    /// Events that carry status (ROBs missing or with status bits): listed, not bad.
    pub flagged: usize,
    pub end: Option<EndSummary>,
    /// Everything wrong, each named. Empty for a good file.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeadSummary {
    pub version: u32,
    pub file_number: u32,
    pub app_name: String,
    pub file_name_core: String,
    pub metadata: Vec<String>,
    pub run_number: u32,
    /// The `LumiBlock=` metadata.
    pub lumi_block: Option<u32>,
    /// The `Stream=` metadata.
    pub stream: Option<String>,
    /// swdaq's provenance metadata (`swdaq_version=`, ...) by name, values decoded; empty in
    /// older files and ATLAS's own.
    pub provenance: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndSummary {
    pub events_in_file: u32,
    pub data_in_file_mb: u32,
    pub events_in_sequence: u32,
    pub last_in_sequence: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    /// The data separator's block number.
    pub block: u32,
    /// Where the data separator starts in the file.
    pub offset: usize,
    pub global_id: u64,
    pub l1_id: u32,
    pub bc_id: u32,
    pub lumi_block: u32,
    pub l1_trigger_type: u32,
    pub bytes: usize,
    pub robs: usize,
    /// `type_name` of each stream tag.
    pub streams: Vec<String>,
    /// Source ids of stand-in ROBs (`DUMMY_FRAGMENT`: the ROB was not collected).
    pub missing_robs: Vec<u32>,
    /// ROBs with status bits set: source id and the bits' names.
    pub rob_status: Vec<(u32, Vec<&'static str>)>,
    /// The event asked for only: each ROB's source id and bytes of ROD data.
    pub rob_data: Vec<(u32, usize)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub offset: usize,
    pub bytes: usize,
    /// The event's block number, when its record was whole.
    pub block: Option<u32>,
    /// The event's L1 ID, when its header was read.
    pub l1_id: Option<u32>,
    pub reason: String,
}

/// What each event is checked against: the file's run and luminosity block and stream.
#[derive(Default)]
struct Expect {
    run_number: Option<u32>,
    lumi_block: Option<u32>,
    stream: Option<(String, String)>,
    /// The writer compressed every data block (`Compression=` other than `NONE`).
    compressed: bool,
}

/// Reads and checks a whole EventStorage file named `name` in one pass, however damaged and
/// large (a mapped file's pages are handed back behind it); `detail` names an L1 ID whose
/// ROBs to list.
pub fn inspect(
    file: &(impl OnePass + ?Sized),
    name: &str,
    detail: Option<u32>,
) -> EventStorageReport {
    let bytes = file.bytes();
    let mut report = EventStorageReport {
        file_size: bytes.len() as u64,
        head: None,
        events: Vec::new(),
        flagged: 0,
        end: None,
        problems: Vec::new(),
    };
    let (expect, body) = match FileHead::parse(bytes) {
        Ok((head, len)) => {
            let expect = check_head(&head, name, &mut |why| problem(&mut report, 0, len, why));
            report.head = Some(summarise(&head));
            (expect, len)
        }
        Err(e) => {
            // The walk below names the unreadable head as a damaged span.
            problem(&mut report, 0, 0, format!("file head: {e}"));
            (Expect::default(), 0)
        }
    };
    let mut previous_block = None;
    let mut event_bytes = 0u64;
    let mut compressed_blocks = 0;
    let block_ok: fn(&[u8]) -> bool = if expect.compressed {
        |_: &[u8]| true
    } else {
        holds_one_event
    };
    for record in Records::checking(bytes, body, block_ok).telling(file) {
        match record {
            Record::Event {
                offset,
                block_number,
                data,
            } => {
                if report.end.is_some() {
                    problem(
                        &mut report,
                        offset,
                        16 + data.len(),
                        "an event after the file end record".into(),
                    );
                }
                if let Some(p) = previous_block
                    && block_number != p + 1
                {
                    problem(
                        &mut report,
                        offset,
                        16,
                        format!("data block number {block_number} follows {p}"),
                    );
                }
                previous_block = Some(block_number);
                event_bytes += data.len() as u64;
                if expect.compressed {
                    compressed_blocks += 1;
                    continue;
                }
                match check_event(data, &expect, detail) {
                    Ok(mut e) => {
                        (e.block, e.offset) = (block_number, offset);
                        let has_status = !e.missing_robs.is_empty() || !e.rob_status.is_empty();
                        report.flagged += usize::from(has_status);
                        report.events.push(e);
                    }
                    Err((l1_id, reason)) => report.problems.push(Problem {
                        offset,
                        bytes: 16 + data.len(),
                        block: Some(block_number),
                        l1_id,
                        reason,
                    }),
                }
            }
            Record::End { offset, end } => {
                if report.end.is_some() {
                    problem(&mut report, offset, 40, "a second file end record".into());
                    continue;
                }
                let records = compressed_blocks
                    + report.events.len()
                    + report.problems.iter().filter(|p| p.block.is_some()).count();
                for why in check_end(&end, records, event_bytes) {
                    problem(&mut report, offset, 40, why);
                }
                report.end = Some(EndSummary {
                    events_in_file: end.events_in_file,
                    data_in_file_mb: end.data_in_file_mb,
                    events_in_sequence: end.events_in_sequence,
                    last_in_sequence: end.status == 1,
                });
            }
            Record::Damaged { offset, len, why } => problem(
                &mut report,
                offset,
                len,
                format!("damaged span, skipped to the next record: {why}"),
            ),
        }
    }
    if report.end.is_none() {
        problem(
            &mut report,
            bytes.len(),
            0,
            "no file end record: the file was never closed (its writer was killed or is still writing) or it was cut".into(),
        );
    }
    report
}

fn problem(report: &mut EventStorageReport, offset: usize, bytes: usize, reason: String) {
    report.problems.push(Problem {
        offset,
        bytes,
        block: None,
        l1_id: None,
        reason,
    })
}

/// Whether a data block is one full event by its own size word: a separator's size and the
/// event agree, so the block's end is trustworthy (a damaged marker is named with the event).
fn holds_one_event(block: &[u8]) -> bool {
    block.len() >= 8
        && u32::from_le_bytes([block[4], block[5], block[6], block[7]]) as usize * 4 == block.len()
}

/// The head against the file name; what events are checked against.
fn check_head(head: &FileHead, name: &str, problem: &mut impl FnMut(String)) -> Expect {
    let lumi_block = head
        .metadata_value("LumiBlock")
        .and_then(|v| v.parse().ok());
    let stream = head
        .metadata_value("Stream")
        .and_then(|s| s.split_once('_'))
        .map(|(t, n)| (t.to_string(), n.to_string()));
    if let Some(n) = RawFileName::parse(name) {
        let mut differ = |what: &str, file: String, head: String| {
            if file != head {
                problem(format!(
                    "the file name's {what} is {file}, the head's {head}"
                ));
            }
        };
        differ(
            "run",
            n.run_number.to_string(),
            head.run.run_number.to_string(),
        );
        differ("core", n.core(), head.file_name_core.clone());
        differ(
            "file number",
            n.sequence.to_string(),
            head.start.file_number.to_string(),
        );
        differ(
            "luminosity block",
            n.lumi_block.to_string(),
            lumi_block.map_or("(none)".into(), |l: u32| l.to_string()),
        );
    }
    let compression = head.metadata_value("Compression").filter(|c| *c != "NONE");
    if let Some(c) = compression {
        problem(format!(
            "the events are compressed ({c}): swdaq reads uncompressed events only; the records are walked and counted, the events not checked"
        ));
    }
    Expect {
        run_number: Some(head.run.run_number),
        lumi_block,
        stream,
        compressed: compression.is_some(),
    }
}

fn summarise(head: &FileHead) -> HeadSummary {
    HeadSummary {
        version: head.start.version,
        file_number: head.start.file_number,
        app_name: head.app_name.clone(),
        file_name_core: head.file_name_core.clone(),
        metadata: head.metadata.clone(),
        run_number: head.run.run_number,
        lumi_block: head
            .metadata_value("LumiBlock")
            .and_then(|v| v.parse().ok()),
        stream: head.metadata_value("Stream").map(str::to_string),
        provenance: (head.provenance().into_iter())
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
    }
}

/// The end record's counts against the `records` data blocks and `event_bytes` found.
fn check_end(end: &FileEnd, records: usize, event_bytes: u64) -> Vec<String> {
    let mut why = Vec::new();
    if end.events_in_file as usize != records {
        why.push(format!(
            "the file end record counts {} events, the file holds {records}",
            end.events_in_file
        ));
    }
    if end.data_in_file_mb != megabytes(event_bytes) {
        why.push(format!(
            "the file end record counts {} MB of data, the events hold {event_bytes} bytes",
            end.data_in_file_mb
        ));
    }
    if end.events_in_sequence < end.events_in_file {
        why.push(format!(
            "the file end record counts {} events in its sequence, fewer than in the file",
            end.events_in_sequence
        ));
    }
    if end.status > 1 {
        why.push(format!("file end status {}", end.status));
    }
    why
}

/// The file's last event (also while the file is still written), checked whole, with each
/// ROB's bytes of ROD data: the newest stored event, as the operator's console shows it.
/// `Ok(None)`: no event yet; `Err`: the head does not read, its events are compressed, or
/// the last event is bad (why). One pass, as [`inspect`]'s.
pub fn newest_event(
    file: &(impl OnePass + ?Sized),
    name: &str,
) -> Result<Option<EventSummary>, String> {
    let bytes = file.bytes();
    let (head, body) = FileHead::parse(bytes).map_err(|e| format!("file head: {e}"))?;
    let expect = check_head(&head, name, &mut |_| {});
    if expect.compressed {
        return Err("its events are compressed: not read back".into());
    }
    let last = Records::checking(bytes, body, holds_one_event)
        .telling(file)
        .filter_map(|record| match record {
            Record::Event {
                offset,
                block_number,
                data,
            } => Some((offset, block_number, data)),
            _ => None,
        })
        .last();
    let Some((offset, block_number, data)) = last else {
        return Ok(None);
    };
    let l1_id = FullEvent::parse(data)
        .map_err(|e| e.to_string())?
        .header
        .l1_id;
    let mut event = check_event(data, &expect, Some(l1_id))
        .map_err(|(_, why)| format!("the last event (L1 ID {l1_id}): {why}"))?;
    (event.block, event.offset) = (block_number, offset);
    Ok(Some(event))
}

/// One event checked whole: its summary, or its L1 ID (when read) and why it is bad.
fn check_event(
    bytes: &[u8],
    expect: &Expect,
    detail: Option<u32>,
) -> Result<EventSummary, (Option<u32>, String)> {
    let event = FullEvent::parse(bytes).map_err(|e| (None, e.to_string()))?;
    let h = event.header;
    let bad = |reason: String| (Some(h.l1_id), reason);
    let tags = event.stream_tags().map_err(|e| bad(e.to_string()))?;
    if tags.is_empty() {
        return Err(bad("no stream tag".into()));
    }
    if let Some((kind, name)) = &expect.stream
        && !tags.iter().any(|t| &t.kind == kind && &t.name == name)
    {
        return Err(bad(format!(
            "no stream tag for the file's stream {kind}_{name}"
        )));
    }
    if let Some(run) = expect.run_number
        && h.run_number != run
    {
        return Err(bad(format!("run {}, the file's run {run}", h.run_number)));
    }
    if let Some(lb) = expect.lumi_block
        && tags.iter().any(|t| t.obeys_lumiblock)
        && h.lumi_block != lb
    {
        return Err(bad(format!(
            "luminosity block {}, the file's {lb}",
            h.lumi_block
        )));
    }
    let mut summary = EventSummary {
        block: 0,
        offset: 0,
        global_id: h.global_id,
        l1_id: h.l1_id,
        bc_id: h.bc_id,
        lumi_block: h.lumi_block,
        l1_trigger_type: h.l1_trigger_type,
        bytes: bytes.len(),
        robs: 0,
        streams: tags
            .iter()
            .map(|t| format!("{}_{}", t.kind, t.name))
            .collect(),
        missing_robs: Vec::new(),
        rob_status: Vec::new(),
        rob_data: Vec::new(),
    };
    let mut sources = BTreeSet::new();
    for rob in event.robs() {
        let rob = rob.map_err(|e: FormatError| bad(format!("ROB {}: {e}", summary.robs)))?;
        if !sources.insert(rob.source_id) {
            return Err(bad(format!("ROB 0x{:08x} twice", rob.source_id)));
        }
        if rob.rod.l1_id != h.l1_id {
            return Err(bad(format!(
                "ROB 0x{:08x}: its ROD's L1 ID is 0x{:08x}, the event's 0x{:08x}",
                rob.source_id, rob.rod.l1_id, h.l1_id
            )));
        }
        let first_status = rob.status().next().unwrap_or(0);
        if first_status & status::DUMMY_FRAGMENT != 0 {
            summary.missing_robs.push(rob.source_id);
        }
        if first_status != 0 {
            summary
                .rob_status
                .push((rob.source_id, status::names(first_status)));
        }
        if detail == Some(h.l1_id) {
            summary.rob_data.push((rob.source_id, rob.data.len()));
        }
        summary.robs += 1;
    }
    Ok(summary)
}

/// The report as text: the head, one line per event, the end, one line per problem.
pub fn render(r: &EventStorageReport) -> String {
    let mut s = String::new();
    match &r.head {
        Some(h) => {
            let _ = writeln!(
                s,
                "EventStorage v{}: run {}, {} (luminosity block {}), file {} of {}, written by {}; {} bytes",
                h.version,
                h.run_number,
                h.stream.as_deref().unwrap_or("no stream"),
                h.lumi_block.map_or("?".into(), |l| l.to_string()),
                h.file_number,
                h.file_name_core,
                h.app_name,
                r.file_size
            );
            s += &swdaq_format::provenance::render(
                (h.provenance.iter()).map(|(name, value)| (name.as_str(), value.as_str())),
            );
        }
        None => {
            let _ = writeln!(
                s,
                "EventStorage file with an unreadable head; {} bytes",
                r.file_size
            );
        }
    }
    let _ = writeln!(
        s,
        "{} good events ({} with status), {} problems",
        r.events.len(),
        r.flagged,
        r.problems.len()
    );
    for e in &r.events {
        let _ = write!(
            s,
            "event {:>8}  L1 ID 0x{:08x}  BCID {:>4}  LB {:>4}  {:>8} bytes  {} ROBs  {}",
            e.global_id,
            e.l1_id,
            e.bc_id,
            e.lumi_block,
            e.bytes,
            e.robs,
            e.streams.join(",")
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
    if let Some(end) = &r.end {
        let _ = writeln!(
            s,
            "end: {} events, {} MB in the file; {} events in its sequence{}",
            end.events_in_file,
            end.data_in_file_mb,
            end.events_in_sequence,
            if end.last_in_sequence {
                " (its last file)"
            } else {
                ""
            }
        );
    }
    for p in &r.problems {
        let what = match (p.block, p.l1_id) {
            (Some(n), Some(l1)) => format!("event block {n} (L1 ID 0x{l1:08x})"),
            (Some(n), None) => format!("event block {n}"),
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
    use crate::event::stream_tag;
    use proptest::prelude::*;
    use swdaq_format::eformat::{RobFragment, RodHeader};
    use swdaq_format::eformat_event::{EventHeader, EventLists, encode_event, encode_stream_tags};
    use swdaq_format::eventstorage::{FileStart, RunParameters, data_separator};

    const NAME: &str = "data_test.00000005.physics_Main.daq.RAW._lb0002._SFO-1._0001.data";

    fn event(l1_id: u32, robs: u32) -> Vec<u8> {
        let robs: Vec<Vec<u8>> = (0..robs)
            .map(|s| {
                let rod = RodHeader {
                    source_id: 0x0071_0000 + s,
                    l1_id,
                    run_number: 5,
                    ..Default::default()
                };
                RobFragment::assemble(0x0071_0000 + s, &[0], &rod, &[s as u8; 40])
            })
            .collect();
        let refs: Vec<&[u8]> = robs.iter().map(Vec::as_slice).collect();
        let header = EventHeader {
            l1_id,
            global_id: u64::from(l1_id) + 1,
            run_number: 5,
            lumi_block: 2,
            ..Default::default()
        };
        let tags = encode_stream_tags(&[stream_tag()]);
        let lists = EventLists {
            stream_tags: &tags,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_event(&mut out, &header, &[0], &lists, &refs);
        out
    }

    /// A file of `events` events; the offsets of their data separators.
    fn file(events: u32) -> (Vec<u8>, Vec<usize>) {
        let head = FileHead {
            start: FileStart {
                version: 6,
                file_number: 1,
                ..Default::default()
            },
            app_name: "SFO-1".into(),
            file_name_core: NAME.rsplit_once("._").unwrap().0.into(),
            metadata: vec![
                "Stream=physics_Main".into(),
                "Project=data_test".into(),
                "LumiBlock=2".into(),
            ],
            run: RunParameters {
                run_number: 5,
                ..Default::default()
            },
        };
        let mut b = head.to_bytes();
        let mut starts = Vec::new();
        let mut data = 0;
        for l1 in 0..events {
            let e = event(l1, 3);
            starts.push(b.len());
            b.extend(data_separator(l1 + 1, e.len() as u32));
            data += e.len() as u64;
            b.extend(e);
        }
        b.extend(
            FileEnd {
                events_in_file: events,
                events_in_sequence: events,
                data_in_file_mb: megabytes(data),
                data_in_sequence_mb: megabytes(data),
                status: 1,
                ..Default::default()
            }
            .to_bytes(),
        );
        (b, starts)
    }

    #[test]
    fn the_newest_event_is_the_last_one_with_its_robs() {
        let (bytes, starts) = file(10);
        let newest = newest_event(&bytes, NAME).unwrap().unwrap();
        assert_eq!((newest.l1_id, newest.offset), (9, starts[9]));
        assert_eq!(newest.rob_data.len(), 3);
        // While written: no end record yet, the last event cut short.
        let open = &bytes[..starts[9] + 20];
        assert_eq!(newest_event(open, NAME).unwrap().unwrap().l1_id, 8);
        assert!(newest_event(&bytes[..starts[0]], NAME).unwrap().is_none());
        assert!(newest_event(&bytes[..10], NAME).is_err());
    }

    #[test]
    fn a_good_file_lists_every_event() {
        let (bytes, _) = file(10);
        let r = inspect(&bytes, NAME, Some(4));
        assert_eq!(
            (r.events.len(), r.problems.len()),
            (10, 0),
            "{:?}",
            r.problems
        );
        assert_eq!(r.head.as_ref().unwrap().lumi_block, Some(2));
        assert_eq!(r.events[4].rob_data.len(), 3);
        assert_eq!(r.events[4].streams, vec!["physics_Main"]);
        assert!(render(&r).contains("10 good events"));
        assert!(r.end.unwrap().last_in_sequence);
    }

    #[test]
    fn bad_markers_sizes_ids_and_counts_are_named_and_the_rest_listed() {
        let (bytes, starts) = file(10);
        let event_at = |k: usize| starts[k] + 16;
        // Full-event header: 23 words, one status word, 4 stream tag words.
        let rob_at = |k: usize| event_at(k) + (23 + 1 + 4) * 4;
        let cases: [(usize, &str); 6] = [
            (event_at(2), "bad magic"),                // full-event marker
            (event_at(2) + 8, "header size"),          // event header size
            (event_at(2) + 14, "unsupported version"), // eformat v4
            (rob_at(2), "ROB 0"),                      // first ROB's marker
            (rob_at(2) + 4, "ROB 0"),                  // first ROB's size
            (rob_at(2) + 8 * 4 + 20, "L1 ID"),         // first ROD's L1 ID
        ];
        for (at, why) in cases {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let r = inspect(&bad, NAME, None);
            assert_eq!(r.events.len(), 9, "{why}: {:?}", r.problems);
            assert_eq!(r.problems.len(), 1, "{why}: {:?}", r.problems);
            assert_eq!(r.problems[0].block, Some(3));
            assert!(
                r.problems[0].reason.contains(why),
                "{why}: {:?}",
                r.problems
            );
            assert!(render(&r).contains("BAD event block 3"));
        }
        // A damaged data separator: its span skipped, the end record's count then disagrees.
        let mut bad = bytes.clone();
        bad[starts[3]] ^= 0x40;
        let r = inspect(&bad, NAME, None);
        assert_eq!(r.events.len(), 9, "{:?}", r.problems);
        assert_eq!(r.problems[0].offset, starts[3]);
        assert!(
            r.problems
                .iter()
                .any(|p| p.reason.contains("counts 10 events"))
        );
        // Cut short: the last event and the missing end record named, the others listed.
        let r = inspect(&bytes[..bytes.len() - 43], NAME, None);
        assert_eq!(r.events.len(), 9);
        assert!(
            r.problems
                .iter()
                .any(|p| p.reason.contains("no file end record"))
        );
        // Compressed by the writer: named once, the records still counted.
        let mut head = FileHead::parse(&bytes).unwrap().0;
        head.metadata.push("Compression=ZLIB".into());
        let mut zipped = head.to_bytes();
        zipped.extend_from_slice(&bytes[starts[0]..]);
        let r = inspect(&zipped, NAME, None);
        assert_eq!(
            (r.events.len(), r.problems.len()),
            (0, 1),
            "{:?}",
            r.problems
        );
        assert!(r.problems[0].reason.contains("compressed (ZLIB)"));
        // A name that disagrees with the head.
        let r = inspect(&bytes, &NAME.replace("_lb0002", "_lb0003"), None);
        assert!(
            r.problems
                .iter()
                .any(|p| p.reason.contains("luminosity block is 3, the head's 2")),
            "{:?}",
            r.problems
        );
    }

    proptest! {
        /// Any bytes after a good head, or none: a report, never a panic.
        #[test]
        fn inspect_never_panics(body in proptest::collection::vec(any::<u8>(), 0..3000), keep_head: bool) {
            let (good, starts) = file(1);
            let mut bytes = if keep_head { good[..starts[0]].to_vec() } else { Vec::new() };
            bytes.extend(body);
            let r = inspect(&bytes, NAME, Some(0));
            let _ = render(&r);
        }

        /// A good file with one flipped byte: every other event still listed.
        #[test]
        fn one_flipped_byte_costs_at_most_one_event(at: proptest::sample::Index, flip in 1u8..=255) {
            let (bytes, starts) = file(6);
            let mut bad = bytes.clone();
            let i = starts[0] + at.index(bytes.len() - starts[0]);
            bad[i] ^= flip;
            let r = inspect(&bad, NAME, None);
            prop_assert!(r.events.len() >= 5, "{:?}", r.problems);
        }
    }
}
