//! What `swdaq inspect` shows: a file's attributes and records, and one record's fragments
//! decoded (frame headers, trigger primitives).

use crate::error::Result;
use crate::reader::{FileAttributes, RecordFileReader};
use serde::Serialize;
use std::path::Path;
use swdaq_format::daq_eth::SEQ_ID_MODULUS;
use swdaq_format::fragment::fragment_error;
use swdaq_format::roi::RoiPayload;
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_format::{FragmentHeader, FragmentType, TriggerPrimitive, TriggerRecordHeader};

#[derive(Debug, Serialize)]
pub struct FileReport {
    pub attributes: FileAttributes,
    pub records: Vec<RecordSummary>,
    /// Records and fragments that could not be read, each with why; the rest is listed.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Serialize)]
pub struct Problem {
    pub record: String,
    /// The fragment dataset, when the record itself was read.
    pub fragment: Option<String>,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct RecordSummary {
    pub name: String,
    pub trigger_number: u64,
    pub trigger_timestamp: u64,
    pub trigger_type: u64,
    pub status_bits: u32,
    pub bytes: usize,
    pub requested_components: usize,
    pub fragments: Vec<FragmentSummary>,
}

#[derive(Debug, Serialize)]
pub struct FragmentSummary {
    pub source: String,
    pub fragment_type: &'static str,
    pub window_begin: u64,
    pub window_end: u64,
    pub bytes: u64,
    pub errors: Vec<&'static str>,
    /// Decoded content, with `--record` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    WibEthFrames {
        frames: usize,
        first_timestamp: Option<u64>,
        last_timestamp: Option<u64>,
        /// Frames whose WIB header reports an error (CRC, link, sync, not ready).
        header_errors: usize,
        /// Frames whose timestamp or sequence id does not follow the previous frame's.
        discontinuities: usize,
        bad_frames: usize,
        /// Detector, crate, slot and stream of the first frame's DAQ Ethernet header.
        address: Option<String>,
    },
    TriggerPrimitives(Vec<TriggerPrimitive>),
    /// An ROI fragment: its regions, and the size the whole window would have had.
    Regions {
        full_window_bytes: u64,
        regions: Vec<RegionSummary>,
    },
    Undecoded,
}

#[derive(Debug, Serialize)]
pub struct RegionSummary {
    pub channel_group: u32,
    pub channel_ids: Vec<u32>,
    pub first_timestamp: u64,
    pub samples: usize,
    /// Bytes of its ADCs.
    pub adc_bytes: usize,
}

fn fragment_summary(h: &FragmentHeader, payload: Option<&[u8]>) -> FragmentSummary {
    FragmentSummary {
        source: h.element_id.to_string(),
        fragment_type: h.fragment_type.name(),
        window_begin: h.window_begin,
        window_end: h.window_end,
        bytes: h.size,
        errors: fragment_error::names(h.error_bits),
        content: payload.map(|p| decode_payload(h.fragment_type, p)),
    }
}

fn summarise(
    name: String,
    header: &TriggerRecordHeader,
    fragments: Vec<FragmentSummary>,
) -> RecordSummary {
    RecordSummary {
        name,
        trigger_number: header.trigger_number,
        trigger_timestamp: header.trigger_timestamp,
        trigger_type: header.trigger_type,
        status_bits: header.status_bits,
        bytes: header.encoded_len() + fragments.iter().map(|f| f.bytes as usize).sum::<usize>(),
        requested_components: header.components.len(),
        fragments,
    }
}

fn decode_payload(kind: FragmentType, payload: &[u8]) -> Content {
    match kind {
        FragmentType::WIBETH => {
            let frames: Vec<_> = payload
                .chunks(wibeth::FRAME_SIZE)
                .map(WibEthFrame::parse)
                .collect();
            let good: Vec<_> = frames.iter().filter_map(|f| f.as_ref().ok()).collect();
            Content::WibEthFrames {
                frames: frames.len(),
                first_timestamp: good.first().map(|f| f.timestamp()),
                last_timestamp: good.last().map(|f| f.timestamp()),
                header_errors: good.iter().filter(|f| f.wib_header().has_error()).count(),
                discontinuities: good
                    .windows(2)
                    .filter(|p| {
                        let (a, b) = (p[0].daq_header(), p[1].daq_header());
                        b.timestamp != a.timestamp + wibeth::TICKS_PER_FRAME
                            || b.seq_id != (a.seq_id + 1) % SEQ_ID_MODULUS
                    })
                    .count(),
                bad_frames: frames.len() - good.len(),
                address: good.first().map(|f| {
                    let h = f.daq_header();
                    format!(
                        "det {} crate {} slot {} stream {}",
                        h.det_id, h.crate_id, h.slot_id, h.stream_id
                    )
                }),
            }
        }
        FragmentType::TRIGGER_PRIMITIVE => match TriggerPrimitive::decode_all(payload) {
            Ok(tps) => Content::TriggerPrimitives(tps),
            Err(_) => Content::Undecoded,
        },
        FragmentType::ROI => match RoiPayload::parse(payload) {
            Ok(roi) => Content::Regions {
                full_window_bytes: roi.full_window_bytes,
                regions: roi
                    .regions()
                    .map(|r| RegionSummary {
                        channel_group: r.channel_group,
                        channel_ids: r.channel_ids().collect(),
                        first_timestamp: r.first_timestamp,
                        samples: r.samples,
                        adc_bytes: r.adc_bytes().len(),
                    })
                    .collect(),
            },
            Err(_) => Content::Undecoded,
        },
        _ => Content::Undecoded,
    }
}

/// The file's attributes and a summary of every record; `record` selects one trigger number
/// whose fragments are also decoded.
pub fn inspect(path: &Path, record: Option<u64>) -> Result<FileReport> {
    let reader = RecordFileReader::open(path)?;
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for id in reader.record_ids()? {
        if record.is_some_and(|n| n != id.trigger_number) {
            continue;
        }
        // Headers first, whether listing or decoding: a bad fragment is reported by name and
        // the record's other fragments are still shown.
        let headers = match reader.read_headers(&id) {
            Ok(h) => h,
            Err(e) => {
                problems.push(Problem {
                    record: id.group,
                    fragment: None,
                    reason: e.reason(),
                });
                continue;
            }
        };
        problems.extend(headers.bad_fragments.iter().map(|bad| Problem {
            record: id.group.clone(),
            fragment: Some(bad.dataset.clone()),
            reason: bad.reason.clone(),
        }));
        let fragments = match record {
            // Listing: headers only, however large the records.
            None => headers
                .fragments
                .iter()
                .map(|f| fragment_summary(f, None))
                .collect(),
            // The bad fragments were reported from the headers above.
            Some(_) => match reader.read_record_skipping_bad(&id) {
                Ok((r, _)) => r
                    .fragments()
                    .filter_map(|f| f.ok())
                    .map(|f| fragment_summary(&f.header, Some(f.payload)))
                    .collect(),
                Err(e) => {
                    problems.push(Problem {
                        record: id.group.clone(),
                        fragment: None,
                        reason: e.reason(),
                    });
                    continue;
                }
            },
        };
        records.push(summarise(id.group, &headers.header, fragments));
    }
    Ok(FileReport {
        attributes: reader.attributes(),
        records,
        problems,
    })
}

impl FileReport {
    /// Whether the writer closed the file; one it did not (a `.writing` file) was stopped or
    /// killed, and holds the records it had flushed.
    pub fn closed(&self) -> bool {
        self.attributes.closing_timestamp.is_some()
    }

    /// Everything named bad: unreadable records and fragments, and file attributes missing
    /// or of the wrong type.
    pub fn bad_items(&self) -> usize {
        self.problems.len() + self.attributes.problems.len()
    }

    /// Records listed with none of their fragments bad.
    pub fn readable_records(&self) -> usize {
        self.records
            .iter()
            .filter(|r| !self.problems.iter().any(|p| p.record == r.name))
            .count()
    }
}

/// An attribute's value, `?` when it could not be read.
fn shown<T: std::fmt::Display>(value: &Option<T>) -> String {
    value.as_ref().map_or("?".into(), T::to_string)
}

/// A human-readable rendering of a report.
pub fn render(report: &FileReport) -> String {
    let a = &report.attributes;
    let mut out = String::new();
    if !report.closed() {
        out += &format!(
            "not closed (writer stopped or killed), {} records readable\n",
            report.readable_records()
        );
    }
    out += &format!(
        "run {} file {} ({} by {}, layout {}), {} records, {} bytes recorded\n",
        shown(&a.run_number),
        shown(&a.file_index),
        shown(&a.record_type),
        shown(&a.application_name),
        shown(&a.filelayout_version),
        report.records.len(),
        shown(&a.recorded_size)
    );
    out += &swdaq_format::provenance::render(
        (a.provenance.iter()).map(|(name, value)| (name.as_str(), value.as_str())),
    );
    for r in &report.records {
        out += &format!(
            "{}  trigger {} at {}  type 0x{:x}  status 0x{:x}  {} bytes  {} fragments of {} requested\n",
            r.name,
            r.trigger_number,
            r.trigger_timestamp,
            r.trigger_type,
            r.status_bits,
            r.bytes,
            r.fragments.len(),
            r.requested_components
        );
        for f in &r.fragments {
            out += &format!(
                "    {:<32} {:<18} [{}, {})  {} bytes  {}\n",
                f.source,
                f.fragment_type,
                f.window_begin,
                f.window_end,
                f.bytes,
                if f.errors.is_empty() {
                    "ok".to_string()
                } else {
                    f.errors.join(",")
                }
            );
            match &f.content {
                Some(Content::WibEthFrames {
                    frames,
                    first_timestamp,
                    last_timestamp,
                    header_errors,
                    discontinuities,
                    bad_frames,
                    address,
                }) => {
                    let stamps = match (first_timestamp, last_timestamp) {
                        (Some(a), Some(b)) => format!("timestamps {a}..={b}"),
                        _ => "no readable frame".into(),
                    };
                    out += &format!(
                        "        {frames} WIBEth frames ({}), {stamps}, {header_errors} with header errors, {discontinuities} discontinuities, {bad_frames} unreadable\n",
                        address.as_deref().unwrap_or("-")
                    );
                }
                Some(Content::TriggerPrimitives(tps)) => {
                    for tp in tps {
                        out += &format!(
                            "        TP channel {} start {} over {} peak {} at +{} integral {} flags 0x{:x}\n",
                            tp.channel,
                            tp.time_start,
                            tp.samples_over_threshold,
                            tp.adc_peak,
                            tp.samples_to_peak,
                            tp.adc_integral,
                            tp.flags
                        );
                    }
                }
                Some(Content::Regions {
                    full_window_bytes,
                    regions,
                }) => {
                    out += &format!(
                        "        {} regions of interest, {:.2}% of the whole window's {full_window_bytes} bytes\n",
                        regions.len(),
                        100.0 * f.bytes as f64 / *full_window_bytes as f64
                    );
                    for r in regions {
                        out += &format!(
                            "        region group {} channels {}..={} ({}) from {} x {} samples, {} ADC bytes\n",
                            r.channel_group,
                            r.channel_ids.first().copied().unwrap_or(0),
                            r.channel_ids.last().copied().unwrap_or(0),
                            r.channel_ids.len(),
                            r.first_timestamp,
                            r.samples,
                            r.adc_bytes
                        );
                    }
                }
                Some(Content::Undecoded) | None => {}
            }
        }
    }
    for p in &a.problems {
        out += &format!(
            "BAD attribute {}: expected {}, found {}\n",
            p.name, p.expected, p.found
        );
    }
    for p in &report.problems {
        out += &match &p.fragment {
            Some(fragment) => format!("BAD {} fragment {}: {}\n", p.record, fragment, p.reason),
            None => format!("BAD {}: {}\n", p.record, p.reason),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RecordFileWriter, StoreConfig};
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::roi::RoiPayloadWriter;
    use swdaq_format::wibeth::WibEthHeader;
    use swdaq_format::{Fragment, SourceId, Subsystem, TriggerRecord};

    fn fragment(kind: FragmentType, source: SourceId, payload: &[u8], error_bits: u32) -> Vec<u8> {
        let header = FragmentHeader {
            size: 0,
            trigger_number: 7,
            trigger_timestamp: 4096,
            window_begin: 0,
            window_end: 8192,
            run_number: 1,
            error_bits,
            fragment_type: kind,
            sequence_number: 0,
            detector_id: 3,
            element_id: source,
        };
        Fragment::assemble(header, [payload])
    }

    #[test]
    fn a_record_is_listed_and_decoded() {
        let dir = std::env::temp_dir().join(format!("swdaq-inspect-{}", std::process::id()));
        let mut frames = vec![0u8; 4 * wibeth::FRAME_SIZE];
        for (i, f) in frames.chunks_exact_mut(wibeth::FRAME_SIZE).enumerate() {
            let daq = DaqEthHeader {
                timestamp: i as u64 * 2048,
                seq_id: i as u16,
                ..Default::default()
            };
            wibeth::encode(&daq, &WibEthHeader::healthy(), &[[900; 64]; 64], f);
        }
        let tp = TriggerPrimitive {
            channel: 1601,
            time_start: 4096,
            samples_over_threshold: 3,
            adc_integral: 90,
            adc_peak: 40,
            ..Default::default()
        };
        let mut roi = RoiPayloadWriter::new(32);
        roi.push(4096, 100, &[1600, 1601], 3, &[1, 2, 3, 4, 5, 6]);
        let record = TriggerRecord {
            header: TriggerRecordHeader {
                trigger_number: 7,
                trigger_timestamp: 4096,
                run_number: 1,
                status_bits: 0,
                trigger_type: 2,
                sequence_number: 0,
                max_sequence_number: 0,
                element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
                components: vec![],
            },
            fragments: vec![
                fragment(
                    FragmentType::WIBETH,
                    SourceId::readout(1),
                    &frames,
                    fragment_error::INCOMPLETE,
                ),
                fragment(
                    FragmentType::TRIGGER_PRIMITIVE,
                    SourceId::trigger(0),
                    &tp.to_bytes(),
                    0,
                ),
                fragment(
                    FragmentType::ROI,
                    SourceId::readout(2),
                    &roi.finish(28872),
                    0,
                ),
            ],
        };
        let mut w = RecordFileWriter::new(StoreConfig {
            directory: dir.clone(),
            min_free_bytes: 0,
            ..Default::default()
        })
        .unwrap();
        w.write(&record).unwrap();
        w.close().unwrap();
        let path = w.closed_files()[0].clone();
        let listing = inspect(&path, None).unwrap();
        assert_eq!(listing.records.len(), 1);
        assert!(
            listing.records[0]
                .fragments
                .iter()
                .all(|f| f.content.is_none())
        );
        let one = inspect(&path, Some(7)).unwrap();
        let text = render(&one);
        assert!(
            text.contains("4 WIBEth frames (det 0 crate 0 slot 0 stream 0), timestamps 0..=6144, 0 with header errors, 0 discontinuities"),
            "{text}"
        );
        assert!(text.contains("Incomplete"));
        assert!(text.contains("TP channel 1601 start 4096 over 3 peak 40"));
        assert!(
            text.contains("1 regions of interest, 0.50% of the whole window's 28872 bytes"),
            "{text}"
        );
        assert!(
            text.contains(
                "region group 100 channels 1600..=1601 (2) from 4096 x 3 samples, 12 ADC bytes"
            ),
            "{text}"
        );
        assert!(inspect(&path, Some(8)).unwrap().records.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
