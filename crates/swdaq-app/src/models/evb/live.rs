//! The event builder's live figures from a monitoring snapshot (its own, or the one the
//! launcher merges from its applications): built events, FED input, queues, every FED.

use crate::live::{
    Figure, Live, Series, SourceMetrics, SourceRow, counter, counters, gauge_max, rate,
};
use std::time::Duration;
use swdaq_evb::EvbConfig;
use swdaq_evb::check::FedCheckFailure;
use swdaq_monitor::Snapshot;

/// Every per-FED error counter: each failed check, and reads that ended a link.
fn fed_error_counters() -> Vec<String> {
    FedCheckFailure::ALL
        .iter()
        .map(|f| format!("swdaq_evb_fed_{}_total", f.name()))
        .chain([
            "swdaq_evb_fed_oversized_total".into(),
            "swdaq_evb_fed_truncated_total".into(),
            "swdaq_evb_fed_too_short_total".into(),
        ])
        .collect()
}

/// Data dropped: FED datagrams the kernel dropped, events a full disk shed.
const DROP_COUNTERS: [&str; 2] = [
    "swdaq_evb_fed_kernel_dropped_total",
    "swdaq_evb_shed_events_total",
];

/// The event builder's `Live` at `elapsed` into the run of `config`.
pub fn live(s: &Snapshot, elapsed: Duration, config: &EvbConfig) -> Live {
    let errors = fed_error_counters();
    let errors: Vec<&str> = errors.iter().map(String::as_str).collect();
    let (_, built_per_s) = counter(s, "swdaq_evb_events_built_total");
    let (_, fed_bytes_per_s) = counter(s, "swdaq_evb_fed_bytes_total");
    let figure = Figure::new;
    let ru_buffered = gauge_max(s, "swdaq_evb_ru_buffered");
    let bu_open = gauge_max(s, "swdaq_evb_bu_open_events");
    let mut figures = vec![
        figure("built_per_s", "built", built_per_s, "/s"),
        figure(
            "written_gb_per_s",
            "written",
            rate(s, "swdaq_evb_written_bytes_total") / 1e9,
            "GB/s",
        ),
        figure(
            "incomplete_per_s",
            "incomplete",
            rate(s, "swdaq_evb_events_incomplete_total"),
            "/s",
        ),
        figure(
            "fed_errors_per_s",
            "FED errors",
            counters(s, &errors).1,
            "/s",
        ),
        figure(
            "ru_buffered_max",
            "RU buffered",
            ru_buffered.unwrap_or(0.0),
            "",
        ),
        figure("bu_open_max", "BU open", bu_open.unwrap_or(0.0), ""),
        figure(
            "writer_queue_max",
            "writer queue",
            gauge_max(s, "swdaq_evb_bu_writer_queue").unwrap_or(0.0),
            "",
        ),
    ];
    if let Some(backlog) = gauge_max(s, "swdaq_evb_farm_backlog_files") {
        figures.push(figure(
            "farm_verified_per_s",
            "farm verified",
            rate(s, "swdaq_evb_farm_events_verified_total"),
            "/s",
        ));
        figures.push(figure(
            "farm_bad_events",
            "farm bad",
            counter(s, "swdaq_evb_farm_bad_events_total").0 as f64,
            "",
        ));
        figures.push(figure(
            "farm_backlog_files",
            "farm backlog",
            backlog,
            " files",
        ));
    }
    // The fullest buffer: a readout unit's events or a builder unit's open events.
    let backlog = [
        ru_buffered.map(|b| b / config.ru_capacity.max(1) as f64),
        bu_open.map(|b| b / f64::from(config.bu_capacity.max(1))),
    ]
    .into_iter()
    .flatten()
    .reduce(f64::max);
    Live {
        model: "evb",
        elapsed_s: elapsed.as_secs_f64(),
        figures,
        series: Series {
            input_mb_s: Some(fed_bytes_per_s / 1e6),
            event_hz: Some(built_per_s),
            backlog,
            // The event manager counts throttled episodes, not the time throttled.
            throttled: None,
            drops_per_s: Some(counters(s, &DROP_COUNTERS).1),
            errors_per_s: Some(counters(s, &errors).1),
        },
        sources: feds_of(s, elapsed, &errors),
        apps: Vec::new(),
    }
}

/// One row per FED seen (FED ids are unique across readout units): fragments/s, MB/s,
/// errors, kernel drops.
fn feds_of(s: &Snapshot, elapsed: Duration, errors: &[&str]) -> Vec<SourceRow> {
    let metrics = SourceMetrics {
        label: "fed",
        rate: "swdaq_evb_fed_fragments_total",
        data: ("swdaq_evb_fed_bytes_total", 1.0),
        errors,
        drops: &DROP_COUNTERS[..1],
    };
    metrics.rows(s, elapsed, None, |fed| format!("FED {fed}"))
}
