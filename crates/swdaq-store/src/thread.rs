//! The writer thread: records arrive through a bounded queue, so a slow disk shows up as a
//! full queue (back-pressure: [`StorageThread::try_submit`] gives the record back and the
//! record builder answers "busy", or [`StorageThread::submit`] waits, by the caller's policy),
//! never as lost data. A malformed or duplicate record is refused and counted; after any other
//! error (disk, HDF5, free space) the thread stops writing, keeps accepting records and counts
//! them as not written; [`StorageThread::failed`] tells at once, the report says why.
//! Several writers (distinct `file_prefix`es) spread records over threads and disks. While no
//! record comes, the thread still wakes up to flush the open file by its flush interval, so a
//! kill loses nothing older than that ([`crate::durable`]).

use crate::writer::{RecordFileWriter, StoreConfig};
use crossbeam_channel::{RecvTimeoutError, Sender, TrySendError, bounded};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use swdaq_format::TriggerRecord;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct StoreReport {
    pub records_written: u64,
    pub bytes_written: u64,
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
    /// Starts a writer thread with room for `queue_depth` records in flight.
    pub fn spawn(config: StoreConfig, queue_depth: usize) -> crate::error::Result<Self> {
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
                    let record = match next {
                        Ok(record) => record,
                        Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {
                            if let Err(e) = writer.flush_if_due() {
                                report.error = Some(e.to_string());
                                failed_flag.store(true, Ordering::Relaxed);
                            }
                            continue;
                        }
                    };
                    if report.error.is_some() {
                        report.records_not_written += 1;
                        continue;
                    }
                    match writer.write(&record) {
                        Ok(()) => {
                            report.records_written += 1;
                            report.bytes_written += record.size_bytes() as u64;
                        }
                        Err(e) if e.is_record_error() => {
                            report.records_not_written += 1;
                            report.first_rejected.get_or_insert(e.to_string());
                        }
                        Err(e) => {
                            report.records_not_written += 1;
                            report.error = Some(e.to_string());
                            failed_flag.store(true, Ordering::Relaxed);
                        }
                    }
                }
                if let Err(e) = writer.close() {
                    report.error.get_or_insert(e.to_string());
                }
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

    #[test]
    fn an_idle_writer_flushes_by_the_interval() {
        let dir =
            std::env::temp_dir().join(format!("swdaq-store-thread-idle-{}", std::process::id()));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                flush_interval_ms: 20,
                flush_every_records: 0,
                ..Default::default()
            },
            4,
        )
        .unwrap();
        for t in 1..=3 {
            store.submit(empty_record(t)).unwrap();
        }
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
        let dir = std::env::temp_dir().join(format!(
            "swdaq-store-thread-no-flush-{}",
            std::process::id()
        ));
        let store = StorageThread::spawn(
            StoreConfig {
                directory: dir.clone(),
                min_free_bytes: 0,
                flush_interval_ms: 0,
                flush_every_records: 0,
                ..Default::default()
            },
            4,
        )
        .unwrap();
        for t in 1..=3 {
            store.submit(empty_record(t)).unwrap();
        }
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
