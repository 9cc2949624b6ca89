//! A builder unit that died (or was declared gone) settled its last events where nobody heard
//! it: the event manager lists as lost every event it gave the unit and was not told was
//! settled, which is an upper bound. This reads the unit's directory back after the run —
//! the events in its closed files (`.raw`, read with [`crate::inspect`]) are written, every
//! other unsettled one is lost — so the summary's counts are exact: written + lost =
//! assigned, each event number in exactly one of them. Files the unit left open (`.tmp`)
//! are named, and none of their events counts as written.
//!
//! Why the disk and not a report from the unit at each file close: a kill can land between
//! the rename that closes a file and the report leaving the process (or while the report sits
//! in ZeroMQ's queue), so no message can make the account exact; only what is on disk can.
//! The directory must be readable where the summary is made: on the launcher's machine,
//! which holds for one host and for `ip netns exec` hosts (namespaces share the file
//! system), not for `ssh` hosts. Where it cannot be read, the event manager's upper bound
//! stands and the summary says why.

use crate::EvbSummary;
use crate::bu::WriterOutcome;
use crate::files::WriterCounts;
use crate::inspect::inspect;
use crate::jsn::{files_of_run, run_directory};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
pub use swdaq_dataflow::credit::LeftOnDisk;
use swdaq_dataflow::credit::settle_with_disk;

/// Reads back what run `run` left in its run directory under `dir`: files named
/// `run<NNNNNN>_...` only.
pub fn read_left(dir: &Path, run: u32) -> std::io::Result<LeftOnDisk> {
    let mut left = LeftOnDisk::default();
    for name in files_of_run(dir, run)? {
        if name.ends_with(".tmp") {
            left.partial.push(name);
            continue;
        }
        if !name.ends_with(".raw") {
            continue;
        }
        let bytes = std::fs::read(run_directory(dir, run).join(&name))?;
        let report = inspect(&bytes, None);
        let why: Vec<&str> = report.problems.iter().map(|p| p.reason.as_str()).collect();
        // Without a header it is not an FRD file the unit closed.
        if report.header.is_none() {
            if !why.is_empty() {
                left.unreadable.push(format!("{name}: {}", why.join("; ")));
            }
            continue;
        }
        let events = report.events.iter().map(|e| u64::from(e.event));
        left.add_closed(&name, bytes.len() as u64, &why, events);
    }
    Ok(left)
}

/// A builder unit whose account the event manager could not close, read back.
#[derive(Debug, Clone, Serialize)]
pub struct ReadBack {
    pub bu: u16,
    /// Its report (with its writer's counts) reached the summary.
    pub reported: bool,
    /// What it left, or why its directory could not be read.
    pub left: Result<LeftOnDisk, String>,
}

impl EvbSummary {
    /// Settles, with what they left on disk, the builder units the event manager declared
    /// gone and those in `reported` marked false (they ended without a report, so their
    /// writer's counts are unknown). `dir_of(bu)` is a unit's directory, or why it cannot be
    /// read back; `run` the run.
    /// Afterwards `evm.lost` holds exactly the events in no closed file, and `writers` counts
    /// what the unreported units wrote.
    pub fn settle_with_disk(
        &mut self,
        run: u32,
        reported: &[bool],
        dir_of: impl Fn(u16) -> Result<PathBuf, String>,
    ) {
        let mut lost: BTreeSet<u64> = self.evm.lost.iter().copied().collect();
        let gone: Vec<usize> = self.evm.gone.iter().map(|&bu| bu as usize).collect();
        let read = settle_with_disk(
            &mut lost,
            &self.evm.accounts,
            &gone,
            reported,
            |bu| dir_of(bu as u16).and_then(|dir| read_left(&dir, run).map_err(|e| e.to_string())),
            |left| &left.events,
        );
        for r in read {
            if let (Ok(l), false) = (&r.left, r.reported) {
                self.writers.push(WriterOutcome {
                    counts: WriterCounts {
                        events: l.events.len() as u64,
                        files: l.files,
                        bytes: l.bytes,
                        ..Default::default()
                    },
                    error: None,
                });
            }
            self.read_back.push(ReadBack {
                bu: r.unit as u16,
                reported: r.reported,
                left: r.left,
            });
        }
        self.evm.lost = lost.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::EventBuilder;
    use crate::evm::EvmReport;
    use crate::files::{FileWriter, WriterConfig};
    use std::time::{Duration, Instant};

    const RUN: u32 = 7;

    /// A writer of 10-event files under `dir`, and events `events` through it; `finish`
    /// closes the last file, otherwise it is left open as a killed unit leaves it.
    fn write(dir: &Path, events: impl IntoIterator<Item = u64>, finish: bool) {
        let mut writer = FileWriter::new(WriterConfig {
            directory: dir.to_owned(),
            run: RUN,
            events_per_file: 10,
            min_free_bytes: 0,
            disk_full: Default::default(),
            source: "bu".into(),
            provenance: None,
        })
        .unwrap();
        let mut builder = EventBuilder::new(RUN, 1, Duration::from_secs(1));
        for event in events {
            let fragment = crate::build::test_part(0, event, event as u32);
            let built = builder.start(event, 1, fragment, Instant::now()).unwrap();
            writer.write(built).unwrap();
        }
        if finish {
            writer.finish(None).unwrap();
        }
    }

    #[test]
    fn closed_files_count_and_open_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1..=25, false);
        // Another run's file and a file that is not FRD: neither counted, the second named.
        let run_dir = run_directory(dir.path(), RUN);
        std::fs::write(run_dir.join("run000008_ls0001_index000000.raw"), b"x").unwrap();
        std::fs::write(run_dir.join("run000007_ls0009_index000000.raw"), b"x").unwrap();
        let left = read_left(dir.path(), RUN).unwrap();
        assert_eq!(left.events, (1..=20).collect());
        assert_eq!((left.files, left.duplicates.len()), (2, 0));
        assert_eq!(left.partial, ["run000007_ls0001_index000002.raw.tmp"]);
        assert_eq!(left.unreadable.len(), 1, "{:?}", left.unreadable);
        assert!(left.unreadable[0].starts_with("run000007_ls0009_index000000.raw: "));
        assert!(read_left(&dir.path().join("none"), RUN).is_err());
    }

    fn summary(lost: Vec<u64>, gone: Vec<u16>, unsettled: [&[u64]; 2]) -> EvbSummary {
        let accounts = unsettled
            .iter()
            .map(|u| crate::evm::BuAccount {
                requested: 100,
                assigned: 50,
                alive: true,
                unsettled: u.iter().copied().collect(),
            })
            .collect();
        EvbSummary {
            evm: EvmReport {
                assigned: 100,
                lost,
                gone,
                accounts,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_killed_unit_s_closed_files_are_written_and_the_rest_lost_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let bu1 = dir.path().join("bu1");
        // Unit 1 closed events 1..=30 (only 1..=10 reported settled), left 31..=35 open.
        write(&bu1, 1..=35, false);
        let mut s = summary((11..=40).collect(), vec![1], [&[], &[]]);
        s.settle_with_disk(RUN, &[true, false], |bu| {
            Ok(dir.path().join(format!("bu{bu}")))
        });
        assert_eq!(s.evm.lost, (31..=40).collect::<Vec<_>>());
        assert_eq!(s.written(), 30, "the unreported unit's closed files");
        assert_eq!(s.read_back.len(), 1);
        let left = s.read_back[0].left.as_ref().unwrap();
        assert_eq!(left.partial, ["run000007_ls0001_index000003.raw.tmp"]);
    }

    #[test]
    fn a_unit_gone_that_still_reported_is_not_counted_twice() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("bu0"), 1..=20, true);
        let mut s = summary((5..=20).collect(), vec![0], [&[], &[]]);
        s.settle_with_disk(RUN, &[true, true], |bu| {
            Ok(dir.path().join(format!("bu{bu}")))
        });
        assert!(s.evm.lost.is_empty());
        assert_eq!(s.written(), 0, "its own report counts what it wrote");
    }

    #[test]
    fn a_unit_ending_without_a_report_after_the_event_manager_loses_its_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        // Unit 1 closed 1..=10 and left 11 open.
        write(&dir.path().join("bu1"), 1..=11, false);
        let mut s = summary(Vec::new(), Vec::new(), [&[3], &[8, 9, 10, 11]]);
        s.settle_with_disk(RUN, &[true, false], |bu| {
            Ok(dir.path().join(format!("bu{bu}")))
        });
        assert_eq!(s.evm.lost, [11], "bu 0 reported: its account is its own");
        let mut s = summary(vec![4], vec![1], [&[], &[]]);
        s.settle_with_disk(RUN, &[true, false], |_| Ok(dir.path().join("none")));
        assert_eq!(s.evm.lost, [4], "unreadable: the upper bound stands");
        assert!(s.read_back[0].left.is_err());
    }
}
