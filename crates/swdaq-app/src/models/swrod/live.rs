//! The SW ROD's live figures from its monitoring snapshot: chunks, fragments and events, what
//! is stored, e-link errors, and every ROB.

use crate::live::{
    Figure, Live, Series, SourceMetrics, SourceRow, counter, counters, gauge_max, rate, values,
};
use std::time::Duration;
use swdaq_monitor::Snapshot;

/// A ROB's errors: every e-link error counter of its decoder and aggregator, then the
/// fragments it completed without every e-link (an e-link gone silent shows only there: it
/// sends nothing to count as an error).
const ROB_ERROR_COUNTERS: [&str; 10] = [
    "swdaq_swrod_corrupt_blocks_total",
    "swdaq_swrod_sequence_gaps_total",
    "swdaq_swrod_broken_chunks_total",
    "swdaq_swrod_missing_chunks_total",
    "swdaq_swrod_truncated_chunks_total",
    "swdaq_swrod_out_of_order_chunks_total",
    "swdaq_swrod_crc_error_chunks_total",
    "swdaq_swrod_malformed_chunks_total",
    "swdaq_swrod_bcid_mismatches_total",
    "swdaq_swrod_incomplete_fragments_total",
];

/// The e-link errors alone (the figure and the errors series).
const ERROR_COUNTERS: &[&str] = ROB_ERROR_COUNTERS.split_at(9).0;

/// Fragments a slow consumer had no room for; with applications, events lost with an HLT
/// application that died.
const DROP_COUNTERS: [&str; 2] = [
    "swdaq_swrod_slow_consumer_drops_total",
    "swdaq_swrod_lost_events_total",
];

/// With applications: the time the L1 accepts waited for an HLT application with room.
const BUSY: &str = "swdaq_swrod_trigger_busy_microseconds_total";

/// The SW ROD's `Live` at `elapsed` into the run; `ring_slots` is each ROB's aggregation ring,
/// `block_size` the cards' block size (1 KiB in GBT mode, larger in FULL mode).
pub fn live(s: &Snapshot, elapsed: Duration, ring_slots: usize, block_size: usize) -> Live {
    let (_, blocks_per_s) = counter(s, "swdaq_swrod_blocks_total");
    let (_, events_per_s) = counter(s, "swdaq_swrod_events_total");
    let (_, errors_per_s) = counters(s, ERROR_COUNTERS);
    let figure = Figure::new;
    let open = gauge_max(s, "swdaq_swrod_open_fragments");
    Live {
        model: "swrod",
        elapsed_s: elapsed.as_secs_f64(),
        figures: vec![
            figure(
                "chunks_m_per_s",
                "chunks",
                rate(s, "swdaq_swrod_chunks_total") / 1e6,
                "M/s",
            ),
            figure(
                "fragments_per_s",
                "fragments",
                rate(s, "swdaq_swrod_fragments_total"),
                "/s",
            ),
            figure("events_per_s", "events", events_per_s, "/s"),
            figure(
                "incomplete_per_s",
                "incomplete",
                rate(s, "swdaq_swrod_incomplete_events_total"),
                "/s",
            ),
            figure(
                "stored_per_s",
                "stored",
                rate(s, "swdaq_swrod_stored_events_total"),
                "/s",
            ),
            figure(
                "stored_mb_per_s",
                "stored",
                rate(s, "swdaq_swrod_stored_bytes_total") / 1e6,
                "MB/s",
            ),
            figure("elink_errors_per_s", "e-link errors", errors_per_s, "/s"),
            figure(
                "open_fragments_max",
                "open fragments",
                open.unwrap_or(0.0),
                "",
            ),
        ],
        series: Series {
            // FELIX to-host blocks have one size: blocks are the e-links' bytes.
            input_mb_s: Some(blocks_per_s * block_size as f64 / 1e6),
            event_hz: Some(events_per_s),
            backlog: open.map(|o| o / ring_slots.max(1) as f64),
            // In one process the cards' waits for a full HLT queue are counted at the end.
            throttled: values(s, BUSY)
                .next()
                .map(|_| (rate(s, BUSY) / 1e6).min(1.0)),
            drops_per_s: Some(counters(s, &DROP_COUNTERS).1),
            errors_per_s: Some(errors_per_s),
        },
        sources: robs_of(s, elapsed, block_size),
        apps: Vec::new(),
    }
}

/// One row per ROB: fragments/s, its e-links' MB/s (blocks have one size), errors
/// (incomplete fragments among them), slow-consumer drops.
fn robs_of(s: &Snapshot, elapsed: Duration, block_size: usize) -> Vec<SourceRow> {
    let metrics = SourceMetrics {
        label: "rob",
        rate: "swdaq_swrod_fragments_total",
        data: ("swdaq_swrod_blocks_total", block_size as f64),
        errors: &ROB_ERROR_COUNTERS,
        drops: &DROP_COUNTERS[..1],
    };
    metrics.rows(s, elapsed, None, |rob| format!("ROB {rob}"))
}
