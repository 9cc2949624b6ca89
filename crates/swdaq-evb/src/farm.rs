//! A stand-in for the CMS filter farm, which reads the builder units' files off the RAM
//! disk: consumer threads take each closed file (renamed, its `.jsn` written), read it back,
//! verify every event's CRC32C, that every event carries the file's run and lumi section,
//! and the file's event count and size against its header and `.jsn`; they count events,
//! bytes and bad events and delete the file and its `.jsn`, so a long run never fills the
//! RAM disk. A file with anything wrong is never deleted: it is kept renamed `NAME.raw.bad`
//! (its `.jsn` `NAME.jsn.bad`), counted, and named in the report, for a physicist to look at.
//!
//! Writers hand their closed files over a channel rather than the farm polling the
//! directories: each file is then consumed exactly once whatever the number of consumers,
//! and the channel's length is the backlog. A file is mapped, not read: the copy out of the
//! RAM disk was a third of the farm's CPU.

use crate::farm_filter::{FilterCounts, FilterSection, filter_file};
use crate::jsn::{FileJsn, JsnError};
use crate::metrics::{CounterSet, queue_gauge, thread_cpu_ns};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use swdaq_format::FormatError;
use swdaq_format::frd::{FRD_DATA_TYPE_EVENTS, FrdFile};
use swdaq_monitor::{Gauge, MonitorError, Registry};
use swdaq_plugin::EventFilter;

/// `[evb.farm]`: the filter-farm stand-in, off unless `consumers` is at least 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FarmConfig {
    /// Consumer threads (0: no farm; files stay where the writers put them).
    pub consumers: u16,
    /// A detector's plugin deciding each event's fate and stream (`farm_filter`).
    pub filter: Option<FilterSection>,
}

impl FarmConfig {
    /// Each consumer's filter instance (`None` without `[evb.farm.filter]`): instances are
    /// never shared between consumers.
    pub fn filters(&self) -> Result<Vec<Option<Box<dyn EventFilter + Send>>>, String> {
        (0..self.consumers)
            .map(|_| self.filter.as_ref().map(FilterSection::make).transpose())
            .collect()
    }
}

/// A file a writer has closed: the raw file and the `.jsn` that describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedFile {
    pub raw: PathBuf,
    pub jsn: PathBuf,
    pub run: u32,
    pub lumi: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FarmCounts {
    /// Files taken off the disk: deleted when good, kept as `.bad` otherwise.
    pub files: u64,
    /// Events whose CRC32C, run and lumi section checked out.
    pub events: u64,
    /// Bytes of the files read, headers included.
    pub bytes: u64,
    /// Events with a wrong CRC32C, run or lumi section, or that could not be read (the
    /// `.jsn`'s count minus the good events, when the file is cut or garbled).
    pub bad_events: u64,
    /// Files kept as `.bad`.
    pub bad_files: u64,
    /// What `[evb.farm.filter]` did with the good files' events.
    #[serde(default)]
    pub filter: FilterCounts,
}

impl FarmCounts {
    fn add(&mut self, other: &FarmCounts) {
        self.files += other.files;
        self.events += other.events;
        self.bytes += other.bytes;
        self.bad_events += other.bad_events;
        self.bad_files += other.bad_files;
        self.filter.add(&other.filter);
    }
}

/// What the farm's consumers did, over all of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FarmReport {
    pub counts: FarmCounts,
    /// CPU seconds of the consumer threads (apart from the event builder's).
    pub cpu_seconds: f64,
    /// Files kept as `.bad`, with why.
    pub kept: Vec<(PathBuf, String)>,
    /// Files that could not be read, deleted or renamed (they stay as they were).
    pub errors: Vec<String>,
}

impl FarmReport {
    pub fn merge(&mut self, other: FarmReport) {
        self.counts.add(&other.counts);
        self.cpu_seconds += other.cpu_seconds;
        self.kept.extend(other.kept);
        self.errors.extend(other.errors);
    }
}

/// Why a file is kept.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FileProblem {
    #[error("its .jsn: {0}")]
    Jsn(String),
    #[error("not a readable FRD file: {0}")]
    Format(#[from] FormatError),
    #[error("{bad} of its events bad (CRC32C, run or lumi section)")]
    BadEvents { bad: u64 },
    #[error(
        "{found} events read, the file header says {header} and the .jsn {jsn} events of {jsn_bytes} bytes ({bytes} read)"
    )]
    Count {
        found: u64,
        header: u64,
        jsn: u64,
        jsn_bytes: u64,
        bytes: u64,
    },
    #[error("run {run} lumi section {lumi} in the file header, the file's name says {expected:?}")]
    WrongRunOrLumi {
        run: u32,
        lumi: u32,
        expected: (u32, u32),
    },
}

impl From<JsnError> for FileProblem {
    fn from(e: JsnError) -> Self {
        Self::Jsn(e.to_string())
    }
}

/// The verdict on one file: its good and bad events, and what is wrong with it if anything.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    pub good: u64,
    pub bad: u64,
    pub problem: Option<FileProblem>,
}

/// Checks a file's bytes against its `.jsn` text and the run and lumi section its name says.
pub fn verify(raw: &[u8], jsn: &str, run: u32, lumi: u32) -> Verdict {
    let jsn = match FileJsn::parse(jsn) {
        Ok(j) => j,
        Err(e) => {
            return Verdict {
                good: 0,
                bad: 0,
                problem: Some(e.into()),
            };
        }
    };
    // Whatever cannot be read of what the .jsn promised is bad.
    let unreadable = |good: u64, bad: u64, problem: FileProblem| Verdict {
        good,
        bad: jsn.events.saturating_sub(good).max(bad),
        problem: Some(problem),
    };
    let file = match FrdFile::parse(raw) {
        Ok(f) => f,
        Err(e) => return unreadable(0, 0, e.into()),
    };
    if file.header.data_type != FRD_DATA_TYPE_EVENTS {
        let problem = FileProblem::Format(FormatError::Inconsistent {
            what: "FRD file",
            field: "data type",
            value: u64::from(file.header.data_type),
        });
        return unreadable(0, 0, problem);
    }
    if (file.header.run, file.header.lumi) != (run, lumi) {
        let problem = FileProblem::WrongRunOrLumi {
            run: file.header.run,
            lumi: file.header.lumi,
            expected: (run, lumi),
        };
        return unreadable(0, 0, problem);
    }
    let (mut good, mut bad) = (0u64, 0u64);
    for event in file.events() {
        match event {
            Ok(e) if e.crc_ok() && e.header.run == run && e.header.lumi == lumi => good += 1,
            Ok(_) => bad += 1,
            Err(e) => return unreadable(good, bad, e.into()),
        }
    }
    let found = good + bad;
    let header = u64::from(file.header.event_count);
    let bytes = raw.len() as u64;
    let problem = if found != header || found != jsn.events || bytes != jsn.bytes {
        Some(FileProblem::Count {
            found,
            header,
            jsn: jsn.events,
            jsn_bytes: jsn.bytes,
            bytes,
        })
    } else if bad > 0 {
        Some(FileProblem::BadEvents { bad })
    } else {
        None
    };
    match problem {
        Some(p) => unreadable(good, bad, p),
        None => Verdict {
            good,
            bad,
            problem: None,
        },
    }
}

/// A kept file's name: `NAME.raw.bad` (and `NAME.jsn.bad`).
pub fn kept_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bad");
    PathBuf::from(name)
}

/// One consumer's counters in the monitoring registry.
pub struct FarmMetrics {
    counters: CounterSet,
    backlog: Gauge,
}

impl FarmMetrics {
    pub fn register(registry: &Registry, consumer: u16) -> Result<Self, MonitorError> {
        let thread = format!("farm-{consumer}");
        let id = consumer.to_string();
        let labels = [("consumer", id.as_str())];
        let counters = CounterSet::register(
            registry,
            &thread,
            &labels,
            &[
                (
                    "swdaq_evb_farm_files_total",
                    "Files the filter-farm stand-in took off the disk (deleted, or kept as .bad)",
                ),
                (
                    "swdaq_evb_farm_events_verified_total",
                    "Events read back with their CRC32C, run and lumi section right",
                ),
                (
                    "swdaq_evb_farm_bytes_total",
                    "Bytes of files read back by the filter-farm stand-in",
                ),
                (
                    "swdaq_evb_farm_bad_events_total",
                    "Events read back bad or missing from their file",
                ),
                ("swdaq_evb_farm_bad_files_total", "Files kept as .bad"),
            ],
        )?;
        let backlog = queue_gauge(
            registry,
            &thread,
            &labels,
            "swdaq_evb_farm_backlog_files",
            "Closed files waiting for the filter-farm stand-in",
        )?;
        Ok(Self { counters, backlog })
    }

    fn publish(&mut self, c: &FarmCounts, backlog: usize) {
        self.counters
            .publish(&[c.files, c.events, c.bytes, c.bad_events, c.bad_files]);
        self.backlog.set(backlog as f64);
    }
}

/// One consumer thread's loop: every closed file until every writer has hung up.
pub fn run_consumer(
    files: crossbeam_channel::Receiver<ClosedFile>,
    mut metrics: FarmMetrics,
    mut filter: Option<Box<dyn EventFilter + Send>>,
) -> FarmReport {
    let cpu_start = thread_cpu_ns();
    let mut report = FarmReport::default();
    for file in files.iter() {
        consume(&file, &mut report, filter.as_mut());
        metrics.publish(&report.counts, files.len());
    }
    metrics.publish(&report.counts, 0);
    report.cpu_seconds = (thread_cpu_ns() - cpu_start) / 1e9;
    report
}

/// A closed file's bytes, mapped with its pages in place (`None`: the file is empty, which
/// cannot be mapped).
fn map(path: &Path) -> std::io::Result<Option<memmap2::Mmap>> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: a closed file is the farm's alone: its writer renamed it and wrote nothing
    // after, and nothing else in swdaq writes or truncates it; the map lives only while the
    // file is checked, before it is deleted or renamed. Another program truncating it
    // meanwhile would fault, as it would any reader of the RAM disk.
    unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map(Some)
}

fn consume(
    file: &ClosedFile,
    report: &mut FarmReport,
    filter: Option<&mut Box<dyn EventFilter + Send>>,
) {
    let read = map(&file.raw).and_then(|raw| Ok((raw, std::fs::read_to_string(&file.jsn)?)));
    let (mapped, jsn) = match read {
        Ok(read) => read,
        Err(e) => {
            report
                .errors
                .push(format!("cannot read {}: {e}", file.raw.display()));
            return;
        }
    };
    let raw = mapped.as_deref().unwrap_or_default();
    let verdict = verify(raw, &jsn, file.run, file.lumi);
    let c = &mut report.counts;
    c.files += 1;
    c.bytes += raw.len() as u64;
    c.events += verdict.good;
    c.bad_events += verdict.bad;
    let filtered = match (filter, &verdict.problem) {
        (Some(filter), None) => filter_file(filter.as_mut(), raw, &file.raw, &mut c.filter),
        _ => Ok(()),
    };
    drop(mapped);
    if let Err(e) = filtered {
        // Its events are not all in stream files: the input stays where it is.
        report.errors.push(e);
        return;
    }
    let outcome = match verdict.problem {
        None => std::fs::remove_file(&file.raw).and_then(|()| std::fs::remove_file(&file.jsn)),
        Some(problem) => {
            c.bad_files += 1;
            report
                .kept
                .push((kept_name(&file.raw), problem.to_string()));
            std::fs::rename(&file.raw, kept_name(&file.raw))
                .and_then(|()| std::fs::rename(&file.jsn, kept_name(&file.jsn)))
        }
    };
    if let Err(e) = outcome {
        report.errors.push(format!(
            "cannot remove or rename {}: {e}",
            file.raw.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::BuiltEvent;
    use crate::config::DiskFullPolicy;
    use crate::files::{FileWriter, WriterConfig};
    use proptest::prelude::*;
    use swdaq_format::frd::{FRD_EVENT_HEADER_SIZE, FRD_FILE_HEADER_SIZE};

    const RUN: u32 = 3;
    const LUMI: u32 = 1;

    fn event(event: u64, size: usize) -> BuiltEvent {
        let payload: Vec<u8> = (0..size).map(|i| (i as u64 * 7 + event) as u8).collect();
        BuiltEvent::of_payload(RUN, LUMI, event, payload)
    }

    /// Writes one closed file of events of these payload sizes; returns what the writer said.
    fn closed_file(dir: &Path, sizes: &[usize]) -> ClosedFile {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut w = FileWriter::new(WriterConfig {
            directory: dir.to_owned(),
            run: RUN,
            events_per_file: sizes.len() as u32,
            min_free_bytes: 0,
            disk_full: DiskFullPolicy::Stop,
            source: "bu0".into(),
            provenance: None,
        })
        .unwrap()
        .notify_closed(tx);
        for (i, &size) in sizes.iter().enumerate() {
            w.write(event(i as u64 + 1, size)).unwrap();
        }
        w.end_lumi(LUMI, sizes.len() as u64).unwrap();
        w.finish(Some(LUMI)).unwrap();
        rx.try_recv().unwrap()
    }

    /// What is left in the run's directory under `dir`.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(crate::jsn::run_directory(dir, RUN))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_good_file_is_verified_event_by_event_then_deleted_with_its_jsn() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[100, 0, 8192, 3]);
        let mut report = FarmReport::default();
        consume(&file, &mut report, None);
        assert_eq!(
            report.counts,
            FarmCounts {
                files: 1,
                events: 4,
                bytes: (FRD_FILE_HEADER_SIZE + 4 * FRD_EVENT_HEADER_SIZE + 8295) as u64,
                bad_events: 0,
                bad_files: 0,
                filter: FilterCounts::default(),
            }
        );
        assert!(report.kept.is_empty() && report.errors.is_empty());
        // Only the definitions, the lumi section's EoLS and the run's EoR stay.
        assert_eq!(
            names(dir.path()),
            [
                "jsd",
                "run000003_ls0000_EoR.jsn",
                "run000003_ls0001_EoLS.jsn"
            ]
        );
    }

    #[test]
    fn a_flipped_byte_is_a_bad_event_and_the_file_is_kept_named_bad() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[64, 64, 64]);
        let mut bytes = std::fs::read(&file.raw).unwrap();
        // A byte of the second event's payload.
        bytes[FRD_FILE_HEADER_SIZE + 64 + 2 * FRD_EVENT_HEADER_SIZE + 10] ^= 0x40;
        std::fs::write(&file.raw, &bytes).unwrap();
        let mut report = FarmReport::default();
        consume(&file, &mut report, None);
        let c = report.counts;
        assert_eq!((c.files, c.events, c.bad_events, c.bad_files), (1, 2, 1, 1));
        assert_eq!(report.kept.len(), 1);
        assert!(
            report.kept[0].1.contains("1 of its events bad"),
            "{report:?}"
        );
        assert_eq!(
            names(dir.path()),
            [
                "jsd",
                "run000003_ls0000_EoR.jsn",
                "run000003_ls0001_EoLS.jsn",
                "run000003_ls0001_index000000.jsn.bad",
                "run000003_ls0001_index000000.raw.bad",
            ]
        );
        assert_eq!(std::fs::read(kept_name(&file.raw)).unwrap(), bytes);
    }

    /// An emptied data file (it cannot be mapped) is bad, all its events counted, and kept.
    #[test]
    fn an_empty_file_is_kept_with_every_event_bad() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[64, 64]);
        std::fs::write(&file.raw, b"").unwrap();
        let mut report = FarmReport::default();
        consume(&file, &mut report, None);
        let c = report.counts;
        assert_eq!((c.files, c.events, c.bad_events, c.bad_files), (1, 0, 2, 1));
        assert!(report.errors.is_empty(), "{report:?}");
        assert!(kept_name(&file.raw).exists());
    }

    #[test]
    fn a_cut_file_or_a_jsn_that_disagrees_is_kept_with_its_unread_events_bad() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[64, 64, 64]);
        let raw = std::fs::read(&file.raw).unwrap();
        let jsn = std::fs::read_to_string(&file.jsn).unwrap();
        let cut = verify(&raw[..raw.len() - 10], &jsn, RUN, LUMI);
        // The cut shows first as a file size that disagrees with the header: nothing is read.
        assert_eq!((cut.good, cut.bad), (0, 3));
        assert!(matches!(cut.problem, Some(FileProblem::Format(_))));
        let other_count = FileJsn {
            events: 4,
            bytes: raw.len() as u64,
        }
        .render(Path::new("/r"), &crate::jsn::Writer::named("bu0"));
        let v = verify(&raw, &other_count, RUN, LUMI);
        assert_eq!((v.good, v.bad), (3, 1));
        assert!(matches!(
            v.problem,
            Some(FileProblem::Count { found: 3, .. })
        ));
        let v = verify(&raw, &jsn, RUN, LUMI + 1);
        assert!(matches!(
            v.problem,
            Some(FileProblem::WrongRunOrLumi { .. })
        ));
        let v = verify(&raw, "{}", RUN, LUMI);
        assert!(matches!(v.problem, Some(FileProblem::Jsn(_))));
        assert_eq!(verify(&raw, &jsn, RUN, LUMI).problem, None);
    }

    /// Accepts even events into stream 2, rejects odd ones; or fails every call.
    struct EvenEvents {
        fail: bool,
    }

    impl EventFilter for EvenEvents {
        fn filter(
            &mut self,
            events: &[swdaq_plugin::Event<'_>],
            decisions: &mut Vec<swdaq_plugin::Decision>,
        ) -> Result<(), swdaq_plugin::PluginError> {
            if self.fail {
                return Err(swdaq_plugin::PluginError {
                    plugin: "even".into(),
                    kind: swdaq_plugin::ErrorKind::Reported("no".into()),
                });
            }
            decisions.clear();
            decisions.extend(events.iter().map(|e| {
                if e.event_number % 2 == 0 {
                    swdaq_plugin::Decision::Accept { stream: 2 }
                } else {
                    swdaq_plugin::Decision::Reject
                }
            }));
            Ok(())
        }
    }

    /// The events of the stream file of `file` for `stream`, by number.
    fn stream_events(file: &ClosedFile, stream: u32) -> Vec<u32> {
        let path = file
            .raw
            .parent()
            .unwrap()
            .join(format!("stream{stream}"))
            .join(file.raw.file_name().unwrap());
        let bytes = std::fs::read(path).unwrap();
        let stream_file = swdaq_format::frd::FrdFile::parse(&bytes).unwrap();
        assert_eq!(
            (stream_file.header.run, stream_file.header.lumi),
            (RUN, LUMI)
        );
        stream_file
            .events()
            .map(|e| {
                let e = e.unwrap();
                assert!(e.crc_ok());
                e.header.event
            })
            .collect()
    }

    #[test]
    fn a_filter_keeps_its_accepted_events_in_their_stream_and_the_input_goes() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[10, 20, 30, 40, 50]);
        let mut report = FarmReport::default();
        let mut filter: Box<dyn EventFilter + Send> = Box::new(EvenEvents { fail: false });
        consume(&file, &mut report, Some(&mut filter));
        let counts = report.counts.filter;
        assert_eq!(
            (counts.accepted, counts.rejected, counts.unfiltered),
            (2, 3, 0)
        );
        assert_eq!(stream_events(&file, 2), [2, 4]);
        assert!(!file.raw.exists() && report.errors.is_empty());
    }

    #[test]
    fn a_failing_filter_loses_nothing_its_events_stay_unfiltered_in_stream_0() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[10, 20, 30]);
        let mut report = FarmReport::default();
        let mut filter: Box<dyn EventFilter + Send> = Box::new(EvenEvents { fail: true });
        consume(&file, &mut report, Some(&mut filter));
        assert_eq!(report.counts.filter.unfiltered, 3);
        assert_eq!(stream_events(&file, 0), [1, 2, 3]);
    }

    #[test]
    fn a_stream_file_that_exists_is_never_replaced_and_the_input_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = closed_file(dir.path(), &[10, 20]);
        let stream = file.raw.parent().unwrap().join("stream2");
        std::fs::create_dir_all(&stream).unwrap();
        let existing = stream.join(file.raw.file_name().unwrap());
        std::fs::write(&existing, b"someone else's").unwrap();
        let mut report = FarmReport::default();
        let mut filter: Box<dyn EventFilter + Send> = Box::new(EvenEvents { fail: false });
        consume(&file, &mut report, Some(&mut filter));
        assert_eq!(std::fs::read(&existing).unwrap(), b"someone else's");
        assert!(file.raw.exists(), "the input stays");
        assert!(
            report.errors[0].contains("cannot write"),
            "{:?}",
            report.errors
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any byte flipped in an event's payload makes exactly that event bad, and any
        /// flipped byte but an event's flags or number (which nothing can check) makes the
        /// file bad.
        #[test]
        fn every_flipped_byte_is_caught(
            sizes in proptest::collection::vec(0usize..300, 1..6),
            at in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let file = closed_file(dir.path(), &sizes);
            let mut raw = std::fs::read(&file.raw).unwrap();
            let jsn = std::fs::read_to_string(&file.jsn).unwrap();
            let at = at.index(raw.len());
            raw[at] ^= mask;
            let verdict = verify(&raw, &jsn, RUN, LUMI);
            let mut start = FRD_FILE_HEADER_SIZE;
            let mut unchecked = false;
            for &size in &sizes {
                let payload = start + FRD_EVENT_HEADER_SIZE..start + FRD_EVENT_HEADER_SIZE + size;
                if payload.contains(&at) {
                    prop_assert_eq!(verdict.good, sizes.len() as u64 - 1);
                    prop_assert_eq!(&verdict.problem, &Some(FileProblem::BadEvents { bad: 1 }));
                }
                // Event header bytes 2..4 (flags) and 12..16 (event number).
                unchecked |= (start + 2..start + 4).contains(&at) || (start + 12..start + 16).contains(&at);
                start = payload.end;
            }
            prop_assert_eq!(verdict.problem.is_none(), unchecked);
        }
    }
}
