//! Storage behind the record builder: the HDF5 writer thread, or nothing (storage off), and
//! with `[dqm]` the sampler handing every N-th built record to online monitoring.

use super::config::RunConfig;
use anyhow::Context;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use swdaq_dataflow::{RecordSink, SinkError};
use swdaq_dqm::sample::{SampleCounts, Sampler};
use swdaq_format::TriggerRecord;
use swdaq_monitor::Registry;
use swdaq_store::{StorageThread, StoreConfig, StoreMetrics, StoreReport};

pub struct StorageSink {
    writer: Option<StorageThread>,
    /// Set by the writer when it stops on an error; off forever without storage.
    failed: Arc<AtomicBool>,
    /// Online monitoring's: offered every record the builder hands on, stored or not.
    sampler: Option<Sampler<TriggerRecord>>,
}

impl StorageSink {
    /// Files are named `PREFIX_runNNNNNN_NNNN.hdf5` and carry `application` as their
    /// `application_name` attribute; the writer's counters go to `registry` (`swdaq_store_*`).
    pub fn start(
        config: &RunConfig,
        prefix: &str,
        application: &str,
        registry: &Registry,
    ) -> anyhow::Result<Self> {
        let s = &config.storage;
        if !s.enabled {
            return Ok(Self {
                writer: None,
                failed: Arc::default(),
                sampler: None,
            });
        }
        let store = StoreConfig {
            directory: config.run.output_dir.clone(),
            file_prefix: prefix.into(),
            application_name: application.into(),
            run_number: config.run.number,
            max_file_bytes: s.max_file_mb << 20,
            max_records_per_file: s.max_records_per_file,
            min_free_bytes: s.min_free_mb << 20,
            flush_interval_ms: s.flush_interval_ms,
            flush_every_records: s.flush_every_records,
            sync_to_disk: s.sync_to_disk,
            provenance: Some(config.run.provenance()),
        };
        let metrics = StoreMetrics::register(registry)?;
        let writer = StorageThread::spawn(store, s.queue_depth, metrics).with_context(|| {
            format!(
                "run.output_dir = {:?}: cannot start storage",
                config.run.output_dir
            )
        })?;
        Ok(Self {
            failed: writer.failure_flag(),
            writer: Some(writer),
            sampler: None,
        })
    }

    pub fn failure_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.failed)
    }

    /// Every record offered from now on is also offered to `sampler` (online monitoring).
    pub fn sampled_by(&mut self, sampler: Sampler<TriggerRecord>) {
        self.sampler = Some(sampler);
    }

    /// What the sampler sent to online monitoring and dropped (none without one).
    pub fn sample_counts(&self) -> SampleCounts {
        self.sampler
            .as_ref()
            .map(Sampler::counts)
            .unwrap_or_default()
    }

    /// Writes what is queued, closes the files and reports (`None` without storage). The
    /// sampler goes with it, so the monitoring thread can end.
    pub fn finish(self) -> Option<StoreReport> {
        self.writer.map(StorageThread::finish)
    }
}

impl RecordSink for StorageSink {
    fn offer(&mut self, record: TriggerRecord) -> Result<(), SinkError> {
        // Never waits: a full monitoring queue is a counted drop, and the record is copied
        // only when it is sent.
        if let Some(sampler) = &mut self.sampler {
            sampler.offer(|| record.clone());
        }
        match &self.writer {
            None => Ok(()),
            Some(w) => w.try_submit(record).map_err(SinkError::Full),
        }
    }
}
