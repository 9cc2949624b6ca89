//! The chain's live figures from a monitoring snapshot (its own, or the one the launcher
//! merges from its applications): readout, trigger, records, and every link.

use crate::live::{
    Figure, Live, Series, SourceMetrics, SourceRow, counter, counters, gauge_max, rate,
};
use std::time::Duration;
use swdaq_monitor::Snapshot;

/// Every readout error counter (one per kind of continuity or format check, and a board's
/// decoder's).
const ERROR_COUNTERS: [&str; 6] = [
    "swdaq_readout_missing_frames_total",
    "swdaq_readout_timestamp_jumps_total",
    "swdaq_readout_sequence_errors_total",
    "swdaq_readout_header_errors_total",
    "swdaq_readout_bad_size_frames_total",
    "swdaq_readout_decode_errors_total",
];

/// Every drop counter: frames the latency buffer had no room for, decisions dropped busy.
const DROP_COUNTERS: [&str; 2] = [
    "swdaq_readout_dropped_frames_total",
    "swdaq_trigger_dropped_busy_total",
];

/// The chain's `Live` at `elapsed` into the run, for its `links` links.
pub fn live(s: &Snapshot, elapsed: Duration, links: u32) -> Live {
    let (frames, frames_per_s) = counter(s, "swdaq_readout_frames_total");
    let (_, bytes_per_s) = counter(s, "swdaq_readout_bytes_total");
    let (decisions, decisions_per_s) = counter(s, "swdaq_trigger_decisions_total");
    let (records, _) = counter(s, "swdaq_dataflow_records_total");
    let (drops, drops_per_s) = counters(s, &DROP_COUNTERS);
    let (errors, errors_per_s) = counters(s, &ERROR_COUNTERS);
    let figure = Figure::new;
    let mut figures = vec![
        figure("frames", "frames", frames as f64, ""),
        figure("frames_per_s", "frames", frames_per_s, "/s"),
        figure(
            "tps_per_s",
            "TPs",
            rate(s, "swdaq_tpg_trigger_primitives_total"),
            "/s",
        ),
        figure("triggers", "triggers", decisions as f64, ""),
        figure("records", "records", records as f64, ""),
        figure(
            "record_mb_per_s",
            "records",
            rate(s, "swdaq_dataflow_record_bytes_total") / 1e6,
            "MB/s",
        ),
        figure("drops", "drops", drops as f64, ""),
        figure("errors", "errors", errors as f64, ""),
    ];
    let full = counter(s, "swdaq_readout_roi_full_window_bytes_total").0;
    if full > 0 {
        let roi = counter(s, "swdaq_readout_roi_bytes_total").0 as f64 / full as f64;
        figures.push(figure(
            "roi_bytes_percent",
            "roi",
            100.0 * roi,
            "% of window bytes",
        ));
    }
    let (bursts, _) = counter(s, "swdaq_recording_bursts_total");
    if bursts > 0 {
        figures.push(figure("bursts", "bursts", bursts as f64, ""));
        figures.push(figure(
            "burst_mb_per_s",
            "bursts",
            rate(s, "swdaq_recording_bytes_total") / 1e6,
            "MB/s",
        ));
        figures.push(figure(
            "burst_frames_lost",
            "burst frames lost",
            counter(s, "swdaq_recording_frames_lost_total").0 as f64,
            "",
        ));
    }
    Live {
        model: "chain",
        elapsed_s: elapsed.as_secs_f64(),
        figures,
        series: Series {
            input_mb_s: Some(bytes_per_s / 1e6),
            event_hz: Some(decisions_per_s),
            // The storage writer's queue: a slow disk fills it, then the trigger is inhibited.
            // (A latency buffer is full once it has wrapped, keeping its last seconds: its
            // fill is no backlog.)
            backlog: gauge_max(s, "swdaq_store_queue_filled_ratio"),
            // The trigger counts decisions dropped while inhibited, not the time inhibited.
            throttled: None,
            drops_per_s: Some(drops_per_s),
            errors_per_s: Some(errors_per_s),
        },
        sources: links_of(s, elapsed, links),
        apps: Vec::new(),
    }
}

/// One row per link: frames/s, MB/s, its errors and dropped frames.
fn links_of(s: &Snapshot, elapsed: Duration, links: u32) -> Vec<SourceRow> {
    let metrics = SourceMetrics {
        label: "link",
        rate: "swdaq_readout_frames_total",
        data: ("swdaq_readout_bytes_total", 1.0),
        errors: &ERROR_COUNTERS,
        drops: &DROP_COUNTERS[..1],
    };
    let keys = (0..links).map(|l| l.to_string()).collect();
    metrics.rows(s, elapsed, Some(keys), |link| format!("link {link}"))
}
