//! The writer thread: records arrive through a bounded queue, so a slow disk shows up as a
//! full queue (back-pressure: [`StorageThread::try_submit`] gives the record back and the
//! record builder answers "busy", or [`StorageThread::submit`] waits, by the caller's policy),
//! never as lost data. A malformed or duplicate record is refused and counted; after any other
//! error (disk, HDF5, free space) the thread stops writing, keeps accepting records and counts
//! them as not written; [`StorageThread::failed`] tells at once, the report says why.
//! Several writers (distinct `file_prefix`es) spread records over threads and disks. While no
//! record comes, the thread still wakes up to flush the open file by its flush interval, so a
//! kill loses nothing older than that ([`crate::durable`]). What it writes is counted in the
//! monitoring registry as it goes ([`StoreMetrics`]) and in the report at the end.

use crate::metrics::StoreMetrics;
use crate::writer::{RecordFileWriter, StoreConfig};
use crossbeam_channel::{RecvTimeoutError, Sender, TrySendError, bounded};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;
use swdaq_format::TriggerRecord;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct StoreReport {
    pub records_written: u64,
    /// Bytes of the records written (headers and fragments).
    pub bytes_written: u64,
    /// Bytes the files took on disk: the records plus HDF5's metadata.
    pub file_bytes: u64,
    /// Flushes of open files (crash safety, and one at each close).
    pub flushes: u64,
    /// Time spent writing records, with the file openings, rollovers and flushes they caused.
    pub write_seconds: f64,
    pub files: Vec<PathBuf>,
    pub records_not_written: u64,
    /// The first record refused for its own fault (malformed, duplicate); writing went on.
    pub first_rejected: Option<String>,
    /// The error that stopped writing, if any.
    pub error: Option<String>,
}

impl StoreReport {
    /// Adds another writer's report (several builders, one summary).
    pub fn add(&mut self, o: StoreReport) {
        self.records_written += o.records_written;
        self.bytes_written += o.bytes_written;
        self.file_bytes += o.file_bytes;
        self.flushes += o.flushes;
        self.write_seconds += o.write_seconds;
        self.files.extend(o.files);
        self.records_not_written += o.records_not_written;
        self.first_rejected = self.first_rejected.take().or(o.first_rejected);
        self.error = self.error.take().or(o.error);
    }
}

pub struct StorageThread {
    queue: Sender<TriggerRecord>,
    thread: JoinHandle<StoreReport>,
    failed: Arc<AtomicBool>,
}

impl StorageThread {
    /// Starts a writer thread with room for `queue_depth` records in flight, counting what it
    /// writes in `metrics`.
    pub fn spawn(
        config: StoreConfig,
        queue_depth: usize,
        mut metrics: StoreMetrics,
    ) -> crate::error::Result<Self> {
        let mut writer = RecordFileWriter::new(config)?;
        let (queue, records) = bounded::<TriggerRecord>(queue_depth.max(1));
        let failed = Arc::new(AtomicBool::new(false));
        let failed_flag = Arc::clone(&failed);
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                let mut report = StoreReport::default();
                loop {
                    // While idle, wake up to flush what waits (crash safety), unless stopped.
                    let deadline = writer.flush_deadline().filter(|_| report.error.is_none());
                    let next = match deadline {
                        Some(at) => records.recv_deadline(at),
                        None => records.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    metrics.queue(records.len(), queue_depth.max(1));
                    let record = match next {
                        Ok(record) => record,
                        Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {
                            if let Err(e) = writer.flush_if_due() {
                                report.error = Some(e.to_string());
                                failed_flag.store(true, Ordering::Relaxed);
                            }
                            metrics.publish(writer.counts());
                            continue;
                        }
                    };
                    if report.error.is_some() {
                        report.records_not_written += 1;
                        metrics.not_written();
                        continue;
                    }
                    let started = Instant::now();
                    let written = writer.write(&record);
                    let took = started.elapsed();
                    match written {
                        Ok(()) => {
                            report.write_seconds += took.as_secs_f64();
                            metrics.wrote(took);
                        }
                        Err(e) if e.is_record_error() => {
                            report.records_not_written += 1;
                            metrics.not_written();
                            report.first_rejected.get_or_insert(e.to_string());
                        }
                        Err(e) => {
                            report.records_not_written += 1;
                            metrics.not_written();
                            report.error = Some(e.to_string());
                            failed_flag.store(true, Ordering::Relaxed);
                        }
                    }
                    metrics.publish(writer.counts());
                }
                if let Err(e) = writer.close() {
                    report.error.get_or_insert(e.to_string());
                }
                let counts = writer.counts();
                metrics.publish(counts);
                report.records_written = counts.records;
                report.bytes_written = counts.record_bytes;
                report.file_bytes = counts.file_bytes;
                report.flushes = counts.flushes;
                report.files = writer.closed_files().to_vec();
                report
            })
            .map_err(|source| crate::StoreError::Io {
                what: "cannot start the writer thread for",
                path: PathBuf::from("store-writer"),
                source,
            })?;
        Ok(Self {
            queue,
            thread,
            failed,
        })
    }

    /// Queues a record, waiting while the queue is full; gives it back only if the writer
    /// thread is gone.
    pub fn submit(&self, record: TriggerRecord) -> Result<(), TriggerRecord> {
        self.queue.send(record).map_err(|e| e.0)
    }

    /// Whether writing has stopped on an error (records are then counted, not written).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// A flag that turns on when writing stops on an error, for watchers on other threads.
    pub fn failure_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.failed)
    }

    /// Queues a record without waiting; gives it back when the queue is full (the disk is
    /// behind: the caller holds or sheds it by its policy).
    pub fn try_submit(&self, record: TriggerRecord) -> Result<(), TriggerRecord> {
        self.queue.try_send(record).map_err(|e| match e {
            TrySendError::Full(r) | TrySendError::Disconnected(r) => r,
        })
    }

    /// Records waiting to be written.
    pub fn backlog(&self) -> usize {
        self.queue.len()
    }

    /// Writes what is queued, closes the files and reports.
    pub fn finish(self) -> StoreReport {
        drop(self.queue);
        self.thread.join().unwrap_or_else(|_| StoreReport {
            error: Some("the writer thread panicked".into()),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::{SourceId, Subsystem, TriggerRecordHeader};
    use swdaq_monitor::Registry;

    fn unmetered() -> StoreMetrics {
        StoreMetrics::register(&Registry::new()).unwrap()
    }

    fn empty_record(trigger: u64) -> TriggerRecord {
        TriggerRecord {
            header: TriggerRecordHeader {
                trigger_number: trigger,
                trigger_timestamp: trigger,
                run_number: 1,
                status_bits: 0,
                trigger_type: 0,
                sequence_number: 0,
                max_sequence_number: 0,
                element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
                components: vec![],
            },
            fragments: vec![],
        }
    }

    #[test]
    fn a_full_queue_gives_the_record_back_and_everything_queued_is_written() {
        let dir = std::env::temp_dir().join(format!("swdaq-store-thread-{}", std::process::id()));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                ..Default::default()
            },
            2,
            unmetered(),
        )
        .unwrap();
        let (mut accepted, mut refused) = (0, 0);
        for t in 1..=200 {
            match store.try_submit(empty_record(t)) {
                Ok(()) => accepted += 1,
                Err(r) => {
                    assert_eq!(r.header.trigger_number, t, "the refused record comes back");
                    refused += 1;
                }
            }
        }
        let report = store.finish();
        assert_eq!(report.records_written, accepted);
        assert_eq!(accepted + refused, 200);
        assert!(report.error.is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn after_a_write_error_records_are_counted_not_written() {
        let dir =
            std::env::temp_dir().join(format!("swdaq-store-thread-full-{}", std::process::id()));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: u64::MAX / 2,
                ..Default::default()
            },
            16,
            unmetered(),
        )
        .unwrap();
        for t in 1..=5 {
            store.submit(empty_record(t)).unwrap();
        }
        while store.backlog() > 0 {
            std::thread::yield_now();
        }
        assert!(store.failed());
        let report = store.finish();
        assert_eq!((report.records_written, report.records_not_written), (0, 5));
        assert!(report.error.unwrap().contains("not enough free space"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn counter_total(snapshot: &swdaq_monitor::Snapshot, name: &str) -> u64 {
        let family = snapshot.families.iter().find(|f| f.name == name).unwrap();
        match family.series[..] {
            [
                swdaq_monitor::Series {
                    value: swdaq_monitor::Value::Counter { total, .. },
                    ..
                },
            ] => total,
            _ => panic!("{name} is not one counter series"),
        }
    }

    #[test]
    fn the_metrics_count_what_reached_the_disk() {
        let dir =
            std::env::temp_dir().join(format!("swdaq-store-thread-metrics-{}", std::process::id()));
        let registry = Registry::new();
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                max_records_per_file: 4,
                flush_every_records: 3,
                ..Default::default()
            },
            4,
            StoreMetrics::register(&registry).unwrap(),
        )
        .unwrap();
        let records: Vec<_> = (1..=10)
            .map(|t| crate::sample::track_record(t).record)
            .collect();
        for record in &records {
            store.submit(record.clone()).unwrap();
        }
        let mut malformed = empty_record(11);
        malformed.fragments.push(vec![0; 10]);
        store.submit(malformed).unwrap();
        let report = store.finish();
        let on_disk: u64 = report
            .files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum();
        let record_bytes: u64 = records.iter().map(|r| r.size_bytes() as u64).sum();
        assert_eq!(report.files.len(), 3);
        assert_eq!(report.file_bytes, on_disk);
        assert_eq!(report.bytes_written, record_bytes);
        assert!(
            on_disk > record_bytes,
            "HDF5 metadata comes on top of the records"
        );
        // Files of 4, 4 and 2 records: a flush at each file's creation and close, and one after
        // the third record of each full file.
        assert_eq!(report.flushes, 3 * 2 + 2);
        let snapshot = swdaq_monitor::Collector::new(registry).collect();
        let total = |name| counter_total(&snapshot, name);
        assert_eq!(total("swdaq_store_records_total"), 10);
        assert_eq!(total("swdaq_store_record_bytes_total"), record_bytes);
        assert_eq!(total("swdaq_store_written_bytes_total"), on_disk);
        assert_eq!(total("swdaq_store_files_opened_total"), 3);
        assert_eq!(total("swdaq_store_files_closed_total"), 3);
        assert_eq!(total("swdaq_store_flushes_total"), report.flushes);
        assert_eq!(total("swdaq_store_records_not_written_total"), 1);
        let write_time = snapshot
            .families
            .iter()
            .find(|f| f.name == "swdaq_store_record_write_seconds")
            .unwrap();
        let swdaq_monitor::Value::Histogram { count, sum, .. } = write_time.series[0].value else {
            panic!("not a histogram");
        };
        assert_eq!(count, 10);
        assert!((sum - report.write_seconds).abs() < 1e-9);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// What a kill at this moment would leave: the `.writing` file's bytes as they lie.
    fn snapshot_of_the_open_file(dir: &std::path::Path) -> PathBuf {
        let writing = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".writing"))
            .unwrap();
        let copy = dir.join("snapshot.hdf5");
        std::fs::copy(writing, &copy).unwrap();
        copy
    }

    /// A writer thread in its own directory, flushing by `flush_interval_ms` only (0: never
    /// while open), handed three empty records.
    fn three_records(tag: &str, flush_interval_ms: u64) -> (std::path::PathBuf, StorageThread) {
        let dir =
            std::env::temp_dir().join(format!("swdaq-store-thread-{tag}-{}", std::process::id()));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                flush_interval_ms,
                flush_every_records: 0,
                ..Default::default()
            },
            4,
            unmetered(),
        )
        .unwrap();
        for t in 1..=3 {
            store.submit(empty_record(t)).unwrap();
        }
        (dir, store)
    }

    #[test]
    fn an_idle_writer_flushes_by_the_interval() {
        let (dir, store) = three_records("idle", 20);
        // No more records come: the thread must wake up by itself to flush.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let snapshot = snapshot_of_the_open_file(&dir);
        let reader = crate::RecordFileReader::open(&snapshot).unwrap();
        assert_eq!(reader.record_ids().unwrap().len(), 3);
        drop(reader);
        assert_eq!(store.finish().records_written, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_flushes_the_open_file_is_not_readable() {
        let (dir, store) = three_records("no-flush", 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let snapshot = snapshot_of_the_open_file(&dir);
        let listed = crate::RecordFileReader::open(&snapshot).and_then(|r| r.record_ids());
        assert!(listed.is_err(), "{listed:?}");
        assert_eq!(store.finish().records_written, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_malformed_record_is_refused_and_writing_goes_on() {
        let dir =
            std::env::temp_dir().join(format!("swdaq-store-thread-bad-{}", std::process::id()));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                ..Default::default()
            },
            4,
            unmetered(),
        )
        .unwrap();
        let mut bad = empty_record(1);
        bad.fragments.push(vec![0; 10]);
        store.submit(bad).unwrap();
        store.submit(empty_record(2)).unwrap();
        let report = store.finish();
        assert_eq!((report.records_written, report.records_not_written), (1, 1));
        assert!(report.first_rejected.unwrap().contains("fragment header"));
        assert!(report.error.is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
