//! The filter-farm stand-in's per-event processing (#35): with `[evb.farm.filter]`, a
//! detector's plugin decides for each event of a verified file whether it is kept and in which
//! stream, as CMS's HLT does to the builder units' files. Accepted events are written into
//! one FRD file per input file and stream, `stream<N>/<input file name>` beside the input;
//! rejected ones are counted and written nowhere. The input file is deleted only once every
//! stream file is on disk.
//!
//! The plugin sees each FED fragment's detector payload where there is one
//! (`swdaq_format::fed_detector`), else the whole FED fragment. A filter call that fails loses
//! nothing: its events are kept unfiltered in stream 0 and counted.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use swdaq_format::fed::fed_fragments;
use swdaq_format::fed_detector::detector_payload;
use swdaq_format::frd::{
    FRD_DATA_TYPE_EVENTS, FRD_EVENT_HEADER_SIZE, FRD_FILE_HEADER_SIZE, FrdFile, FrdFileHeader,
};
use swdaq_plugin::{Decision, Event, EventFilter, FragmentRef, Plugin, PluginEventFilter};

/// Events handed to the plugin per call.
const FILTER_BATCH: usize = 64;

/// `[evb.farm.filter]`: the plugin deciding each event's fate, and its own table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterSection {
    /// The plugin's shared library; a relative path is taken from the working directory.
    pub plugin: PathBuf,
    /// The plugin's own table, handed to its `create` as TOML text.
    pub config: toml::Table,
}

impl FilterSection {
    /// One instance of the plugin's `filter_events` (one per farm consumer): a missing file,
    /// a library that is not a plugin or has no filter, or a refused configuration is one
    /// line naming the file.
    pub fn make(&self) -> Result<Box<dyn EventFilter + Send>, String> {
        let fail = |e: &dyn std::fmt::Display| format!("evb.farm.filter: {e}");
        let plugin = Plugin::load(&self.plugin).map_err(|e| fail(&e))?;
        let config = toml::to_string(&self.config).map_err(|e| fail(&e))?;
        let filter = PluginEventFilter::new(&plugin, &config).map_err(|e| fail(&e))?;
        Ok(Box::new(filter))
    }
}

/// What the filter did, over a consumer's files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterCounts {
    pub accepted: u64,
    /// Events the plugin rejected: not written.
    pub rejected: u64,
    /// Events whose filter call failed, kept in stream 0.
    pub unfiltered: u64,
    /// Stream files written.
    pub stream_files: u64,
}

impl FilterCounts {
    pub fn add(&mut self, other: &FilterCounts) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.unfiltered += other.unfiltered;
        self.stream_files += other.stream_files;
    }
}

/// The accepted events of one input file, by stream: each event's bytes, header included.
#[derive(Default)]
struct Streams {
    events: BTreeMap<u32, (Vec<u8>, u32)>,
}

impl Streams {
    fn keep(&mut self, stream: u32, event: &[u8]) {
        let (bytes, count) = self.events.entry(stream).or_default();
        bytes.extend_from_slice(event);
        *count += 1;
    }
}

/// Filters the events of a verified FRD file `raw` (found at `path`) and writes the stream
/// files; returns what it did, or why a stream file could not be written (the input must
/// then be kept).
pub fn filter_file(
    filter: &mut dyn EventFilter,
    raw: &[u8],
    path: &Path,
    counts: &mut FilterCounts,
) -> Result<(), String> {
    let file = FrdFile::parse(raw).map_err(|e| e.to_string())?;
    // A verified file's events all parse: its verdict walked them.
    let events: Vec<_> = file.events().map_while(Result::ok).collect();
    let mut streams = Streams::default();
    let mut decisions = Vec::with_capacity(FILTER_BATCH);
    for batch in events.chunks(FILTER_BATCH) {
        // The batch's fragments in one vector, each event a range of it.
        let mut fragments = Vec::new();
        let ranges: Vec<std::ops::Range<usize>> = batch
            .iter()
            .map(|e| {
                let start = fragments.len();
                push_fragments(u64::from(e.header.event), e.payload, &mut fragments);
                start..fragments.len()
            })
            .collect();
        let plugin_events: Vec<Event<'_>> = batch
            .iter()
            .zip(ranges)
            .map(|(e, range)| Event {
                event_number: u64::from(e.header.event),
                fragments: &fragments[range],
            })
            .collect();
        let decided = filter.filter(&plugin_events, &mut decisions);
        for (i, event) in batch.iter().enumerate() {
            let bytes = event_bytes(raw, event.payload);
            match (&decided, decisions.get(i)) {
                (Ok(()), Some(Decision::Accept { stream })) => {
                    counts.accepted += 1;
                    streams.keep(*stream, bytes);
                }
                (Ok(()), Some(Decision::Reject)) => counts.rejected += 1,
                _ => {
                    counts.unfiltered += 1;
                    streams.keep(0, bytes);
                }
            }
        }
    }
    for (stream, (bytes, count)) in &streams.events {
        write_stream_file(path, *stream, &file.header, bytes, *count)?;
        counts.stream_files += 1;
    }
    Ok(())
}

/// An event's bytes in the file, its FRD header included (`payload` lies within `raw`).
fn event_bytes<'a>(raw: &'a [u8], payload: &'a [u8]) -> &'a [u8] {
    let payload_at = payload.as_ptr() as usize - raw.as_ptr() as usize;
    &raw[payload_at - FRD_EVENT_HEADER_SIZE..payload_at + payload.len()]
}

/// Appends an event's FED fragments to `out` as the plugin sees them, in file order.
fn push_fragments<'a>(event_number: u64, payload: &'a [u8], out: &mut Vec<FragmentRef<'a>>) {
    let first = out.len();
    out.extend(fed_fragments(payload).map_while(Result::ok).map(
        |(_, fed)| match detector_payload(&fed) {
            Ok(Some(detector)) => FragmentRef {
                data: detector.bytes,
                source_id: u32::from(fed.header.source_id),
                event_number,
                timestamp: detector.words.timestamp,
                flags: detector.words.flags,
            },
            _ => FragmentRef {
                data: fed.bytes,
                source_id: u32::from(fed.header.source_id),
                event_number,
                timestamp: 0,
                flags: 0,
            },
        },
    ));
    // The walk finds them last first.
    out[first..].reverse();
}

/// The stream file of input `path` for `stream`: `stream<N>/<input name>` beside the input,
/// written as `.tmp`, synced and linked to its name; never replacing a file.
fn write_stream_file(
    path: &Path,
    stream: u32,
    input: &FrdFileHeader,
    events: &[u8],
    count: u32,
) -> Result<(), String> {
    let name = path.file_name().ok_or("an input file without a name")?;
    let directory = path
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("stream{stream}"));
    let target = directory.join(name);
    let temporary = target.with_extension("raw.tmp");
    let header = FrdFileHeader {
        data_type: FRD_DATA_TYPE_EVENTS,
        event_count: count,
        run: input.run,
        lumi: input.lumi,
        file_size: (FRD_FILE_HEADER_SIZE + events.len()) as u64,
    };
    let written = std::fs::create_dir_all(&directory)
        .and_then(|()| {
            let mut out = std::fs::File::create_new(&temporary)?;
            out.write_all(&header.to_bytes())?;
            out.write_all(events)?;
            out.sync_data()
        })
        // A link, unlike a rename, refuses a name that exists: nothing is ever replaced.
        .and_then(|()| std::fs::hard_link(&temporary, &target));
    let _ = std::fs::remove_file(&temporary);
    written.map_err(|e| format!("cannot write {}: {e}", target.display()))
}
