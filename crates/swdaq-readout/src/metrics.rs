//! A link's counters in the monitoring registry. The ingest loop keeps plain counts and
//! publishes the increments every [`PUBLISH_EVERY`] frames (and at the end), so monitoring
//! costs a handful of stores per batch of frames, not per frame.

use crate::checks::CheckCounts;
use crate::link::IngestCounts;
use crate::request::RequestStatus;
use crate::server::{Outcome, RoiCounts};
use std::time::Duration;
use swdaq_format::SourceId;
use swdaq_monitor::{Counter, Gauge, Histogram, MonitorError, Registry};

pub const PUBLISH_EVERY: u64 = 256;

pub struct LinkMetrics {
    counters: [Counter; 9],
    occupancy: Gauge,
    published: [u64; 9],
}

impl LinkMetrics {
    /// Registers the link's metrics in a block of the thread `thread` (e.g. `readout-0`).
    pub fn register(
        registry: &Registry,
        thread: &str,
        link: u32,
        source: SourceId,
    ) -> Result<Self, MonitorError> {
        let (link, source) = (link.to_string(), format!("0x{:08x}", source.id));
        let mut block = registry.block(thread, &[("link", &link), ("source_id", &source)]);
        let mut c = |name: &str, help: &str| block.counter(name, help);
        let counters = [
            c("swdaq_readout_frames_total", "Frames buffered")?,
            c("swdaq_readout_bytes_total", "Bytes buffered")?,
            c(
                "swdaq_readout_dropped_frames_total",
                "Good frames not buffered (slot pinned by a slow reader)",
            )?,
            c(
                "swdaq_readout_missing_frames_total",
                "Frames that never arrived (timestamp/sequence gaps)",
            )?,
            c(
                "swdaq_readout_timestamp_jumps_total",
                "Timestamp steps that are not whole frames",
            )?,
            c(
                "swdaq_readout_sequence_errors_total",
                "Sequence ids out of order",
            )?,
            c(
                "swdaq_readout_header_errors_total",
                "Frames whose header reports an error",
            )?,
            c(
                "swdaq_readout_bad_size_frames_total",
                "Frames of the wrong size, rejected",
            )?,
            c(
                "swdaq_tpg_trigger_primitives_total",
                "Trigger primitives found",
            )?,
        ];
        let occupancy = block.gauge(
            "swdaq_readout_buffer_filled_ratio",
            "Latency buffer slots in use",
        )?;
        Ok(Self {
            counters,
            occupancy,
            published: [0; 9],
        })
    }

    /// Adds what was counted since the last call.
    pub fn publish(
        &mut self,
        ingest: &IngestCounts,
        checks: &CheckCounts,
        tps: u64,
        buffer_filled: f64,
    ) {
        let now = [
            ingest.frames,
            ingest.bytes,
            ingest.dropped,
            checks.missing_frames,
            checks.timestamp_jumps,
            checks.sequence_errors,
            checks.header_errors,
            checks.bad_size,
            tps,
        ];
        for ((counter, last), value) in self.counters.iter().zip(&mut self.published).zip(now) {
            counter.add(value - *last);
            *last = value;
        }
        self.occupancy.set(buffer_filled);
    }
}

/// A request server's counters: requests answered by status, and answer latency.
pub struct ServerMetrics {
    /// Complete, partial, not found, invalid window, unknown source.
    by_status: [Counter; 5],
    latency: Histogram,
    roi: RoiMetrics,
}

/// ROI readout's data volume (zero while ROI readout is off).
struct RoiMetrics {
    fragments: Counter,
    bytes: Counter,
    full_window_bytes: Counter,
    tps_cut: Counter,
}

impl ServerMetrics {
    pub fn register(registry: &Registry, thread: &str) -> Result<Self, MonitorError> {
        let status = |name: &str| {
            registry.block(thread, &[("status", name)]).counter(
                "swdaq_readout_requests_total",
                "Data requests answered, by status",
            )
        };
        let by_status = [
            status("complete")?,
            status("partial")?,
            status("not_found")?,
            status("invalid_window")?,
            status("unknown_source")?,
        ];
        let latency = registry.block(thread, &[]).histogram(
            "swdaq_readout_request_latency_seconds",
            "Data request received to answered",
            &[
                1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0,
            ],
        )?;
        let mut block = registry.block(thread, &[]);
        let roi = RoiMetrics {
            fragments: block.counter(
                "swdaq_readout_roi_fragments_total",
                "Data requests answered with regions of interest",
            )?,
            bytes: block.counter(
                "swdaq_readout_roi_bytes_total",
                "Bytes of the ROI fragments sent",
            )?,
            full_window_bytes: block.counter(
                "swdaq_readout_roi_full_window_bytes_total",
                "Bytes those fragments would have had with every frame of their windows",
            )?,
            tps_cut: block.counter(
                "swdaq_readout_roi_tps_cut_total",
                "ROI fragments answered at the time-out before the link's TPs passed the window",
            )?,
        };
        Ok(Self {
            by_status,
            latency,
            roi,
        })
    }

    pub fn roi_answered(&self, sent: &RoiCounts) {
        self.roi.fragments.add(sent.fragments);
        self.roi.bytes.add(sent.bytes);
        self.roi.full_window_bytes.add(sent.full_window_bytes);
        self.roi.tps_cut.add(sent.tps_cut);
    }

    pub fn answered(&self, outcome: Outcome, latency: Duration) {
        let i = match outcome {
            Outcome::Served(RequestStatus::Complete) => 0,
            Outcome::Served(RequestStatus::Partial) => 1,
            Outcome::Served(RequestStatus::NotFound) => 2,
            Outcome::Served(RequestStatus::InvalidWindow) => 3,
            Outcome::UnknownSource => 4,
        };
        self.by_status[i].inc();
        self.latency.observe(latency.as_secs_f64());
    }
}

/// A burst recorder's counters (one block per recording thread; blocks of later bursts of
/// the same link add to the same series).
pub struct RecorderMetrics {
    /// Frames written, bytes written, frames lost.
    counters: [Counter; 3],
    lag: Gauge,
    published: [u64; 3],
}

impl RecorderMetrics {
    pub fn register(registry: &Registry, thread: &str, link: u32) -> Result<Self, MonitorError> {
        let link = link.to_string();
        let mut block = registry.block(thread, &[("link", &link)]);
        let mut c = |name: &str, help: &str| block.counter(name, help);
        let counters = [
            c(
                "swdaq_recording_frames_total",
                "Frames written to raw burst files",
            )?,
            c(
                "swdaq_recording_bytes_total",
                "Bytes written to raw burst files",
            )?,
            c(
                "swdaq_recording_frames_lost_total",
                "Frames that left the latency buffer before the recorder copied them",
            )?,
        ];
        let lag = block.gauge(
            "swdaq_recording_lag_seconds",
            "Data time published but not yet copied by the recorder, when it last woke",
        )?;
        Ok(Self {
            counters,
            lag,
            published: [0; 3],
        })
    }

    /// Adds what was counted since the last call; `lag_s` is the backlog in data time.
    pub fn publish(&mut self, counts: &crate::record::RecorderCounts, lag_s: f64) {
        let now = [
            counts.frames_written,
            counts.bytes_written,
            counts.frames_lost,
        ];
        for ((counter, last), value) in self.counters.iter().zip(&mut self.published).zip(now) {
            counter.add(value - *last);
            *last = value;
        }
        self.lag.set(lag_s);
    }
}
