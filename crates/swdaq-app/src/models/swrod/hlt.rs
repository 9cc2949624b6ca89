//! The HLT side of a SW ROD run, the same in one process and in an `hlt` application: the
//! HLT asks every ROB's request server (`RobPort`) for each L1 ID it is given and builds
//! the full event; one event in `hlt_accept_every` (by its number in the run) is accepted
//! and stored in raw files by the storage thread.

use super::config::SwrodSettings;
use super::storage::{EventFiles, StoredFile};
use crossbeam_channel::{Receiver, Sender};
use std::time::Duration;
use swdaq_format::eformat::RobFragment;
use swdaq_format::eformat_event::{EventHeader, encode_event, event_status};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::hlt::{AssembledEvent, HltConfig, HltCounts, MissingRob, RobPort, assemble_events};

pub(super) struct HltMetrics {
    events: Counter,
    incomplete: Counter,
    not_yet: Counter,
    gone: Counter,
    published: HltCounts,
}

pub(super) struct StoreMetrics {
    events: Counter,
    bytes: Counter,
}

impl HltMetrics {
    pub(super) fn register(
        registry: &Registry,
    ) -> Result<(Self, StoreMetrics), swdaq_monitor::MonitorError> {
        let mut b = registry.block("hlt", &[]);
        Ok((
            Self {
                events: b.counter("swdaq_swrod_events_total", "Events the HLT built")?,
                incomplete: b.counter(
                    "swdaq_swrod_incomplete_events_total",
                    "Events built with ROBs missing",
                )?,
                not_yet: b.counter(
                    "swdaq_swrod_not_yet_answers_total",
                    "Requests answered not yet (asked again)",
                )?,
                gone: b.counter(
                    "swdaq_swrod_gone_answers_total",
                    "Requests for fragments the ROB no longer had",
                )?,
                published: HltCounts::default(),
            },
            StoreMetrics {
                events: b.counter("swdaq_swrod_stored_events_total", "Events written to files")?,
                bytes: b.counter("swdaq_swrod_stored_bytes_total", "Bytes of events written")?,
            },
        ))
    }

    fn publish(&mut self, now: &HltCounts) {
        let last = self.published;
        self.events.add(now.events - last.events);
        self.incomplete
            .add(now.incomplete_events - last.incomplete_events);
        self.not_yet.add(now.not_yet - last.not_yet);
        self.gone.add(now.gone - last.gone);
        self.published = *now;
    }
}

/// Incomplete events named in the report, at most.
pub(super) const INCOMPLETE_EXAMPLES: usize = 20;

/// An event built with ROBs missing: its L1 ID and each missing ROB's source id with why.
pub(super) type IncompleteExample = (u32, Vec<(u32, MissingRob)>);

/// An accepted event for storage, by its number in the run.
pub(super) struct ToStore {
    pub(super) global_id: u64,
    pub(super) bytes: Vec<u8>,
}

/// What the HLT did.
pub(super) struct HltResult {
    pub(super) counts: HltCounts,
    pub(super) incomplete_examples: Vec<IncompleteExample>,
    pub(super) cpu_s: f64,
}

/// Builds an event for every L1 ID `l1_ids` brings (until it closes and every event is
/// settled) from the ROBs behind `ports`; `global_id_of(l1_id)` is the event's number in the
/// run, and the event is accepted when that number is the first or every
/// `hlt_accept_every`-th after it. Accepted events go to `to_storage`; `built(global_id,
/// accepted)` hears of every event once built.
pub(super) fn hlt_thread(
    s: &SwrodSettings,
    l1_ids: Receiver<u32>,
    ports: Vec<RobPort>,
    to_storage: Sender<ToStore>,
    (mut metrics, stored): (HltMetrics, StoreMetrics),
    mut global_id_of: impl FnMut(u32) -> u64,
    mut built: impl FnMut(u64, bool),
) -> HltResult {
    let cpu = cpu_time::ThreadTime::now();
    let config = HltConfig {
        max_in_flight: s.hlt_max_in_flight,
        retry_after: Duration::from_micros(s.hlt_retry_us),
        give_up_after: Duration::from_millis(s.hlt_give_up_ms),
    };
    let mut examples = Vec::new();
    let mut out = |e: AssembledEvent| {
        if !e.missing.is_empty() && examples.len() < INCOMPLETE_EXAMPLES {
            examples.push((e.l1_id, e.missing.clone()));
        }
        let global_id = global_id_of(e.l1_id);
        let accepted = (global_id.max(1) - 1).is_multiple_of(s.hlt_accept_every);
        if accepted {
            let bytes = full_event(s.run_number, global_id as u32, &e);
            stored.events.inc();
            stored.bytes.add(bytes.len() as u64);
            let _ = to_storage.send(ToStore { global_id, bytes });
        }
        built(global_id, accepted);
    };
    let counts = assemble_events(l1_ids, &ports, config, &mut out, |c| metrics.publish(c));
    drop(ports);
    HltResult {
        counts,
        incomplete_examples: examples,
        cpu_s: cpu.elapsed().as_secs_f64(),
    }
}

fn full_event(run_number: u32, global_id: u32, e: &AssembledEvent) -> Vec<u8> {
    let bc_id = e
        .robs
        .first()
        .and_then(|r| RobFragment::parse(r.bytes()).ok())
        .map_or(0, |r| r.rod.bc_id);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let header = EventHeader {
        bc_time_seconds: now.as_secs() as u32,
        bc_time_nanoseconds: now.subsec_nanos(),
        global_id,
        run_type: 0,
        run_number,
        lumi_block: 0,
        l1_id: e.l1_id,
        bc_id,
        l1_trigger_type: 0,
    };
    let missing: Vec<u32> = e.missing.iter().map(|m| m.0).collect();
    let robs: Vec<&[u8]> = e.robs.iter().map(|r| r.bytes()).collect();
    let mut out = Vec::with_capacity(robs.iter().map(|r| r.len()).sum::<usize>() + 128);
    encode_event(&mut out, &header, &event_status(&missing), &robs);
    out
}

/// What storage did.
pub(super) struct Stored {
    pub(super) events: u64,
    pub(super) bytes: u64,
    pub(super) files: Vec<StoredFile>,
    pub(super) unwritten: u64,
    pub(super) error: Option<String>,
}

/// Stores every event it is given; after a failure the rest are counted unwritten, so each
/// event is stored (in a closed file) or unwritten, never neither. `settled` hears the
/// events of each file once it is closed, by number; `failed` hears the first failure at
/// once.
pub(super) fn write_events(
    mut files: EventFiles,
    events: Receiver<ToStore>,
    mut settled: impl FnMut(Vec<u64>),
    mut failed: impl FnMut(&str),
) -> Stored {
    let mut error = None;
    let mut after_failure = 0;
    // The events of the open file: `EventFiles` closes a file only when the next event
    // would not fit (before writing it), or at the end.
    let mut in_open_file = Vec::new();
    for event in events.iter() {
        if error.is_some() {
            after_failure += 1;
            continue;
        }
        let closed_before = files.closed.len();
        let written = files.write(&event.bytes);
        if files.closed.len() > closed_before {
            settled(std::mem::take(&mut in_open_file));
        }
        match written {
            Ok(()) => in_open_file.push(event.global_id),
            Err(e) => {
                failed(&e.to_string());
                error = Some(e.to_string());
            }
        }
    }
    let (files, unwritten, closed) = files.finish();
    match closed {
        Ok(()) if error.is_none() => settled(in_open_file),
        Ok(()) => {}
        Err(e) => {
            if error.is_none() {
                failed(&e.to_string());
            }
            error.get_or_insert(e.to_string());
        }
    }
    Stored {
        events: files.iter().map(|f| f.events).sum(),
        bytes: files.iter().map(|f| f.bytes).sum(),
        unwritten: unwritten + after_failure,
        files,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each closed file's events are settled once, when it closes; the events of a file
    /// that could not be closed never are.
    #[test]
    fn storage_settles_each_event_when_its_file_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        // 104 bytes a record after a 64-byte header: 9 events a file of 1000 bytes.
        for global_id in 1..=20 {
            tx.send(ToStore {
                global_id,
                bytes: vec![global_id as u8; 96],
            })
            .unwrap();
        }
        drop(tx);
        let files = EventFiles::new(dir.path(), 1, 1000, 100).unwrap();
        let mut batches = Vec::new();
        let stored = write_events(files, rx, |ids| batches.push(ids), |e| panic!("{e}"));
        assert_eq!(
            batches,
            [
                (1..=9).collect::<Vec<_>>(),
                (10..=18).collect(),
                vec![19, 20]
            ]
        );
        assert_eq!((stored.events, stored.unwritten), (20, 0));

        let out = dir.path().join("out");
        let (tx, rx) = crossbeam_channel::unbounded();
        for global_id in 1..=12 {
            tx.send(ToStore {
                global_id,
                bytes: vec![0; 96],
            })
            .unwrap();
        }
        drop(tx);
        let files = EventFiles::new(&out, 2, 1000, 100).unwrap();
        // The directory is gone before the first file can close: nothing settles.
        std::fs::remove_dir(&out).unwrap();
        let (mut settled, mut failures) = (Vec::new(), 0);
        let stored = write_events(files, rx, |ids| settled.extend(ids), |_| failures += 1);
        assert!(settled.is_empty(), "{settled:?}");
        assert_eq!(failures, 1, "told once, at once");
        assert_eq!(stored.events + stored.unwritten, 12);
        assert!(stored.error.is_some());
    }
}
