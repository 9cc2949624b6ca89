//! What an FRD file holds, checked: the `RAW_0002` header against the file, every event's
//! CRC32C, and every FED fragment in it (markers, length, CRC-16, level-1 id against the
//! event number). Library side of `swdaq inspect` for `.raw` files.

use serde::Serialize;
use swdaq_format::FormatError;
use swdaq_format::fed::{FED_L1_ID_MASK, FedFragment};
use swdaq_format::frd::{FrdFile, FrdFileHeader, frd_flags};

#[derive(Debug, Clone, Serialize)]
pub struct FedSummary {
    pub source_id: u16,
    pub l1_id: u32,
    pub bx_id: u16,
    pub bytes: usize,
    pub crc_ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    pub event: u32,
    pub lumi: u32,
    pub incomplete: bool,
    pub bytes: u32,
    pub crc_ok: bool,
    pub fed_count: usize,
    /// FED fragments that do not parse, fail their CRC-16 or carry another level-1 id.
    pub bad_feds: usize,
    /// Why the FED fragments could not all be read, if they could not.
    pub fed_error: Option<String>,
    /// Filled for the event asked for only.
    pub feds: Vec<FedSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrdReport {
    pub run: u32,
    pub lumi: u32,
    pub event_count_in_header: u32,
    pub file_size: u64,
    pub events: Vec<EventSummary>,
    pub bad_event_crc: usize,
    pub incomplete: usize,
    /// Why reading stopped before the end of the file, if it did.
    pub error: Option<String>,
}

/// Whether `bytes` start like an FRD file.
pub fn is_frd(bytes: &[u8]) -> bool {
    FrdFileHeader::parse(bytes).is_ok()
}

/// Reads and checks a whole FRD file; `detail` names an event whose FED fragments to list.
pub fn inspect(bytes: &[u8], detail: Option<u32>) -> Result<FrdReport, FormatError> {
    let file = FrdFile::parse(bytes)?;
    let mut report = FrdReport {
        run: file.header.run,
        lumi: file.header.lumi,
        event_count_in_header: file.header.event_count,
        file_size: file.header.file_size,
        events: Vec::new(),
        bad_event_crc: 0,
        incomplete: 0,
        error: None,
    };
    for event in file.events() {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                report.error = Some(e.to_string());
                break;
            }
        };
        let h = event.header;
        let mut summary = EventSummary {
            event: h.event,
            lumi: h.lumi,
            incomplete: h.flags & frd_flags::INCOMPLETE != 0,
            bytes: h.event_size,
            crc_ok: event.crc_ok(),
            fed_count: 0,
            bad_feds: 0,
            fed_error: None,
            feds: Vec::new(),
        };
        let mut rest = event.payload;
        while !rest.is_empty() {
            match FedFragment::parse_last(rest) {
                Ok((f, before)) => {
                    let crc_ok = f.crc_ok();
                    summary.fed_count += 1;
                    summary.bad_feds +=
                        usize::from(!crc_ok || f.header.l1_id != h.event & FED_L1_ID_MASK);
                    if detail == Some(h.event) {
                        summary.feds.push(FedSummary {
                            source_id: f.header.source_id,
                            l1_id: f.header.l1_id,
                            bx_id: f.header.bx_id,
                            bytes: f.bytes.len(),
                            crc_ok,
                        });
                    }
                    rest = before;
                }
                Err(e) => {
                    summary.fed_error = Some(e.to_string());
                    break;
                }
            }
        }
        summary.feds.reverse();
        report.bad_event_crc += usize::from(!summary.crc_ok);
        report.incomplete += usize::from(summary.incomplete);
        report.events.push(summary);
    }
    Ok(report)
}

pub fn render(r: &FrdReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "FRD file: run {} lumi section {}, {} events in the header, {} read, {} bytes; {} with a bad CRC32C, {} incomplete",
        r.run,
        r.lumi,
        r.event_count_in_header,
        r.events.len(),
        r.file_size,
        r.bad_event_crc,
        r.incomplete
    );
    if let Some(e) = &r.error {
        let _ = writeln!(out, "reading stopped: {e}");
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
            let _ = writeln!(
                out,
                "    FED {:>4}  L1 id {:>8}  BX {:>4}  {:>6} bytes  crc16 {}",
                f.source_id,
                f.l1_id,
                f.bx_id,
                f.bytes,
                if f.crc_ok { "ok" } else { "BAD" }
            );
        }
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

    #[test]
    fn reads_back_what_the_writer_wrote_and_finds_corruption() {
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
            events_per_file: 10,
            min_free_bytes: 0,
            disk_full: Default::default(),
            source: "t".into(),
        })
        .unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        for _ in 0..10 {
            emu.next_event(&mut ev, &mut truth);
            let built = build
                .start(ev.event, 1, check.build(&ev), Instant::now())
                .unwrap();
            writer.write(built).unwrap();
        }
        writer.finish().unwrap();
        let mut bytes = std::fs::read(dir.path().join("run000009_ls0001_index000000.raw")).unwrap();
        let report = inspect(&bytes, Some(3)).unwrap();
        assert_eq!(
            (
                report.events.len(),
                report.bad_event_crc,
                report.error.as_deref()
            ),
            (10, 0, None)
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
        let report = inspect(&bytes, None).unwrap();
        assert_eq!(report.bad_event_crc, 1);
        assert_eq!(report.events[0].bad_feds, 1);
    }
}
