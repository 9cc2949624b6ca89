//! What `swdaq run` prints: a live view on a terminal (plain periodic lines otherwise), and
//! the closing summary.

use super::chain::{RunReport, Status};
use super::inputs::SourceLabel;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use swdaq_dataflow::builder::source_list;
use swdaq_format::SourceId;
use swdaq_monitor::{Snapshot, Value};
use swdaq_readout::request::RequestStatus;
use swdaq_readout::server::Outcome;

/// Sum over series of a counter: (total, rate per second).
fn counter(snapshot: &Snapshot, name: &str) -> (u64, f64) {
    let mut out = (0, 0.0);
    for f in snapshot.families.iter().filter(|f| f.name == name) {
        for s in &f.series {
            if let Value::Counter {
                total,
                rate_per_second,
                ..
            } = s.value
            {
                out.0 += total;
                out.1 += rate_per_second;
            }
        }
    }
    out
}

/// The largest value of gauge `name` over its series; `None` without the gauge.
fn gauge_max(snapshot: &Snapshot, name: &str) -> Option<f64> {
    snapshot
        .families
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| &f.series)
        .filter_map(|s| match s.value {
            Value::Gauge { value } => Some(value),
            _ => None,
        })
        .reduce(f64::max)
}

/// Per link (label `link`): the counter's rate or the gauge's value.
fn per_link(snapshot: &Snapshot, name: &str) -> BTreeMap<u32, f64> {
    per_link_of(snapshot, &[name], |v| match v {
        Value::Counter {
            rate_per_second, ..
        } => Some(*rate_per_second),
        Value::Gauge { value } => Some(*value),
        Value::Histogram { .. } => None,
    })
}

/// Per link (label `link`): the counters' totals, summed over `names`.
fn per_link_totals(snapshot: &Snapshot, names: &[&str]) -> BTreeMap<u32, f64> {
    per_link_of(snapshot, names, |v| match v {
        Value::Counter { total, .. } => Some(*total as f64),
        _ => None,
    })
}

/// Per link (label `link`): `value` of each series of the families `names`, summed.
fn per_link_of(
    snapshot: &Snapshot,
    names: &[&str],
    value: impl Fn(&Value) -> Option<f64>,
) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    for f in snapshot
        .families
        .iter()
        .filter(|f| names.contains(&&*f.name))
    {
        for s in &f.series {
            let Some(link) = s.labels.get("link").and_then(|l| l.parse().ok()) else {
                continue;
            };
            if let Some(v) = value(&s.value) {
                *out.entry(link).or_default() += v;
            }
        }
    }
    out
}

/// The counters' rates per link, summed over `names`.
fn per_link_rates(snapshot: &Snapshot, names: &[&str]) -> BTreeMap<u32, f64> {
    per_link_of(snapshot, names, |v| match v {
        Value::Counter {
            rate_per_second, ..
        } => Some(*rate_per_second),
        _ => None,
    })
}

/// Frames a link dropped (its latency buffer full).
const DROP_COUNTER: &str = "swdaq_readout_dropped_frames_total";

const ERROR_COUNTERS: [&str; 5] = [
    "swdaq_readout_missing_frames_total",
    "swdaq_readout_timestamp_jumps_total",
    "swdaq_readout_sequence_errors_total",
    "swdaq_readout_header_errors_total",
    "swdaq_readout_bad_size_frames_total",
];

/// The run's totals and rates at one snapshot: the live view's first line and `/status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Totals {
    pub elapsed_s: f64,
    pub frames: u64,
    pub frames_per_s: f64,
    pub tps_per_s: f64,
    pub triggers: u64,
    pub triggers_per_s: f64,
    pub records: u64,
    pub record_mb_per_s: f64,
    /// Frames dropped by readout and decisions dropped by the trigger while busy.
    pub drops: u64,
    pub drops_per_s: f64,
    /// Frames found bad by readout's checks (every error counter).
    pub errors: u64,
    pub errors_per_s: f64,
    /// Share of the storage writer's queue in use (`None`: storage off).
    pub storage_queue_filled: Option<f64>,
    /// ROI readout: bytes sent over the bytes the whole windows would have been.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roi_bytes_ratio: Option<f64>,
    /// Raw bursts started, their write rate, and frames the recorders lost.
    pub bursts: u64,
    pub burst_mb_per_s: f64,
    pub burst_frames_lost: u64,
}

impl Totals {
    pub fn of(status: &Status<'_>) -> Self {
        let s = status.snapshot;
        let (frames, frames_per_s) = counter(s, "swdaq_readout_frames_total");
        let (_, record_bytes_rate) = counter(s, "swdaq_dataflow_record_bytes_total");
        let (triggers, triggers_per_s) = counter(s, "swdaq_trigger_decisions_total");
        let readout_drops = counter(s, DROP_COUNTER);
        let busy_drops = counter(s, "swdaq_trigger_dropped_busy_total");
        let errors = ERROR_COUNTERS.map(|n| counter(s, n));
        Self {
            elapsed_s: status.elapsed.as_secs_f64(),
            frames,
            frames_per_s,
            tps_per_s: counter(s, "swdaq_tpg_trigger_primitives_total").1,
            triggers,
            triggers_per_s,
            records: counter(s, "swdaq_dataflow_records_total").0,
            record_mb_per_s: record_bytes_rate / 1e6,
            drops: readout_drops.0 + busy_drops.0,
            drops_per_s: readout_drops.1 + busy_drops.1,
            errors: errors.iter().map(|e| e.0).sum(),
            errors_per_s: errors.iter().map(|e| e.1).sum(),
            storage_queue_filled: gauge_max(s, "swdaq_store_queue_filled_ratio"),
            roi_bytes_ratio: roi_bytes_ratio(s),
            bursts: counter(s, "swdaq_recording_bursts_total").0,
            burst_mb_per_s: counter(s, "swdaq_recording_bytes_total").1 / 1e6,
            burst_frames_lost: counter(s, "swdaq_recording_frames_lost_total").0,
        }
    }
}

/// `None` until ROI readout has sent a fragment.
fn roi_bytes_ratio(s: &Snapshot) -> Option<f64> {
    let full = counter(s, "swdaq_readout_roi_full_window_bytes_total").0;
    (full > 0).then(|| counter(s, "swdaq_readout_roi_bytes_total").0 as f64 / full as f64)
}

fn totals_line(status: &Status<'_>) -> String {
    let t = Totals::of(status);
    let roi = t
        .roi_bytes_ratio
        .map(|r| format!(" roi={:.2}% of window bytes", 100.0 * r))
        .unwrap_or_default();
    let recording = if t.bursts > 0 {
        format!(
            " bursts={} ({:.0} MB/s, {} frames lost)",
            t.bursts, t.burst_mb_per_s, t.burst_frames_lost
        )
    } else {
        String::new()
    };
    format!(
        "t={:.1}s frames={} ({:.0}/s) TPs/s={:.0} triggers={} records={} ({:.1} MB/s) drops={} errors={}{roi}{recording}",
        t.elapsed_s,
        t.frames,
        t.frames_per_s,
        t.tps_per_s,
        t.triggers,
        t.records,
        t.record_mb_per_s,
        t.drops,
        t.errors,
    )
}

/// One link's row of the live view (and of `/status`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LinkFigures {
    pub link: u32,
    pub frames_per_s: f64,
    pub mb_per_s: f64,
    /// Share of the latency buffer in use, 0 to 1.
    pub buffer_filled: f64,
    pub tps_per_s: f64,
    /// Frames found bad by the link's checks, in all and in the last interval.
    pub errors: u64,
    pub errors_per_s: f64,
    /// Frames the link dropped, in all and in the last interval.
    pub drops: u64,
    pub drops_per_s: f64,
}

impl LinkFigures {
    pub fn of(status: &Status<'_>) -> Vec<Self> {
        let s = status.snapshot;
        let rate = per_link(s, "swdaq_readout_frames_total");
        let bytes = per_link(s, "swdaq_readout_bytes_total");
        let filled = per_link(s, "swdaq_readout_buffer_filled_ratio");
        let tps = per_link(s, "swdaq_tpg_trigger_primitives_total");
        let errors = per_link_totals(s, &ERROR_COUNTERS);
        let errors_per_s = per_link_rates(s, &ERROR_COUNTERS);
        let drops = per_link_totals(s, &[DROP_COUNTER]);
        let drops_per_s = per_link_rates(s, &[DROP_COUNTER]);
        (0..status.links as u32)
            .map(|link| {
                let get = |m: &BTreeMap<u32, f64>| m.get(&link).copied().unwrap_or(0.0);
                Self {
                    link,
                    frames_per_s: get(&rate),
                    mb_per_s: get(&bytes) / 1e6,
                    buffer_filled: get(&filled),
                    tps_per_s: get(&tps),
                    errors: get(&errors) as u64,
                    errors_per_s: get(&errors_per_s),
                    drops: get(&drops) as u64,
                    drops_per_s: get(&drops_per_s),
                }
            })
            .collect()
    }
}

/// Prints status updates: a redrawn table on a terminal, one line each time otherwise.
pub struct LiveView {
    terminal: bool,
    drawn_lines: usize,
}

impl Default for LiveView {
    fn default() -> Self {
        Self {
            terminal: std::io::stdout().is_terminal(),
            drawn_lines: 0,
        }
    }
}

impl LiveView {
    pub fn show(&mut self, status: &Status<'_>) {
        let mut out = std::io::stdout().lock();
        if !self.terminal {
            let _ = writeln!(out, "{}", totals_line(status));
            return;
        }
        let mut text = format!(
            "{}\n link   frames/s      MB/s  buffer     TPs/s\n",
            totals_line(status)
        );
        for l in LinkFigures::of(status) {
            let _ = writeln!(
                text,
                "{:>5} {:>10.0} {:>9.1} {:>6.0}% {:>9.0}",
                l.link,
                l.frames_per_s,
                l.mb_per_s,
                l.buffer_filled * 100.0,
                l.tps_per_s
            );
        }
        if self.drawn_lines > 0 {
            // Back over the previous table, and clear it.
            let _ = write!(out, "\x1b[{}A\x1b[J", self.drawn_lines);
        }
        self.drawn_lines = text.lines().count();
        let _ = write!(out, "{text}");
        let _ = out.flush();
    }
}

fn quantile(values: &[Duration], q: f64) -> Option<Duration> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
}

/// The closing summary: totals, rates, drops, errors, files, hit-finding quality.
pub fn summary(r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Run ended after {:.1} s ({}).", r.seconds, r.stop_reason);
    let frames: u64 = r.links.iter().map(|l| l.frames).sum();
    let bytes: u64 = r.links.iter().map(|l| l.bytes).sum();
    let dropped: u64 = r.links.iter().map(|l| l.dropped).sum();
    let tps: u64 = r.links.iter().map(|l| l.trigger_primitives).sum();
    let tp_batches_dropped: u64 = r.links.iter().map(|l| l.tp_batches_dropped).sum();
    let _ = writeln!(
        s,
        "Readout   {} links: {frames} frames, {:.2} GB ({:.0} MB/s), {dropped} frames dropped; {tps} TPs ({:.0}/s), {tp_batches_dropped} TP batches dropped",
        r.links.len(),
        bytes as f64 / 1e9,
        bytes as f64 / 1e6 / r.seconds,
        tps as f64 / r.seconds,
    );
    for l in &r.links {
        let c = &l.checks;
        let _ = match l.source {
            SourceLabel::Emulator => continue,
            SourceLabel::File(_) => writeln!(s, "  link 0x{:08x}: {}", l.source_id, l.source),
            SourceLabel::Udp(_) => writeln!(
                s,
                "  link 0x{:08x} ({}): {} datagrams received, {} malformed (wrong size), {} out of sequence",
                l.source_id,
                l.source,
                l.frames + l.dropped + c.bad_size,
                c.bad_size,
                c.sequence_errors,
            ),
        };
    }
    for l in &r.links {
        let c = &l.checks;
        let errors =
            c.missing_frames + c.timestamp_jumps + c.sequence_errors + c.header_errors + c.bad_size;
        if errors > 0 || l.ended_early || l.error.is_some() || !l.noisy_channels.is_empty() {
            let _ = writeln!(
                s,
                "  link 0x{:08x}: {} missing, {} timestamp jumps, {} sequence errors, {} header errors, {} bad size{}{}{}",
                l.source_id,
                c.missing_frames,
                c.timestamp_jumps,
                c.sequence_errors,
                c.header_errors,
                c.bad_size,
                if l.ended_early {
                    "; ended before the run"
                } else {
                    ""
                },
                l.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("; error: {e}")),
                if l.noisy_channels.is_empty() {
                    String::new()
                } else {
                    format!("; noisy channels {:?}", l.noisy_channels)
                },
            );
        }
    }
    let t = &r.trigger.counts;
    let _ = writeln!(
        s,
        "Trigger   {} decisions ({:.2} Hz) from {} candidates: {} merged, {} vetoed as overlapping, {} prescaled away, {}{} dropped while busy; {} late TPs; latency p50 {} p99 {}",
        t.issued,
        t.issued as f64 / r.seconds,
        t.candidates,
        t.merged,
        t.vetoed_overlapping,
        t.prescaled_away,
        // Only under run control (`swdaq serve`) can triggers be paused.
        if t.paused_away > 0 {
            format!("{} passed over while paused, ", t.paused_away)
        } else {
            String::new()
        },
        t.dropped_busy,
        t.merge.late_tps,
        ms(quantile(&r.trigger.latencies, 0.5)),
        ms(quantile(&r.trigger.latencies, 0.99)),
    );
    let b = &r.builder.counts;
    let _ = writeln!(
        s,
        "Records   {} built: {} complete, {} with data missing, {} timed out; {} late fragments, {} requests not sent; build latency p50 {} p99 {}",
        b.complete + b.data_missing + b.timed_out,
        b.complete,
        b.data_missing,
        b.timed_out,
        b.late_fragments,
        r.builder.unrouted_requests,
        ms(quantile(&r.builder.latencies, 0.5)),
        ms(quantile(&r.builder.latencies, 0.99)),
    );
    let served = |o: Outcome| r.server.by_outcome.get(&o).copied().unwrap_or(0);
    let _ = writeln!(
        s,
        "Requests  {} complete, {} partial, {} not found, {} invalid, {} unknown source; {} timed out waiting for data, {} duplicates",
        served(Outcome::Served(RequestStatus::Complete)),
        served(Outcome::Served(RequestStatus::Partial)),
        served(Outcome::Served(RequestStatus::NotFound)),
        served(Outcome::Served(RequestStatus::InvalidWindow)),
        served(Outcome::UnknownSource),
        r.server.timed_out,
        r.server.duplicates,
    );
    let named = |m: &BTreeMap<SourceId, u64>| {
        m.iter()
            .map(|(src, n)| format!("{} ({n})", source_list(&[*src])))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !b.missing_by_source.is_empty() {
        let _ = writeln!(
            s,
            "  fragments missing from: {}",
            named(&b.missing_by_source)
        );
    }
    if !b.lacking_by_source.is_empty() {
        let _ = writeln!(
            s,
            "  fragments lacking data from: {}",
            named(&b.lacking_by_source)
        );
    }
    if let Some(d) = &r.dataflow {
        let _ = writeln!(
            s,
            "Dataflow  {} decisions handed to builders {:?} (done {:?}); builders gone: {:?}; re-assigned: {}; lost: {}",
            d.decisions,
            d.assigned,
            d.done,
            d.builders_gone,
            numbers(&d.reassigned),
            numbers(&d.lost),
        );
    }
    if !r.refused_messages.is_empty() {
        let _ = writeln!(
            s,
            "Network   messages refused by the applications' inboxes: {}",
            r.refused_messages
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for a in &r.apps {
        if let Some(f) = &a.failure {
            let _ = writeln!(
                s,
                "  application {} ({}): {f}; log {}",
                a.name,
                a.kind,
                a.log.display()
            );
        }
    }
    match &r.storage {
        None => {
            let _ = writeln!(
                s,
                "Storage   off (storage.enabled = false): nothing written"
            );
        }
        Some(st) => {
            let _ = writeln!(
                s,
                "Storage   {} records written ({:.1} MB of records, {:.1} MB on disk, {} flushes, {:.2} s writing), {} not written{}",
                st.records_written,
                st.bytes_written as f64 / 1e6,
                st.file_bytes as f64 / 1e6,
                st.flushes,
                st.write_seconds,
                st.records_not_written + r.builder.not_stored,
                st.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("; error: {e}")),
            );
            for f in &st.files {
                let _ = writeln!(s, "  {}", f.display());
            }
        }
    }
    if let Some(recording) = &r.recording {
        s.push_str(&recording.summary());
    }
    let busy: Vec<String> = r
        .thread_cpu
        .iter()
        .filter(|(_, share)| *share >= 0.05)
        .map(|(name, share)| format!("{name} {:.0}%", 100.0 * share))
        .collect();
    if !busy.is_empty() {
        let _ = writeln!(
            s,
            "CPU       share of one core over the run (threads above 5%): {}",
            busy.join(", ")
        );
    }
    roi_summary(r, &mut s);
    match &r.hit_finding {
        None => {
            let _ = writeln!(
                s,
                "Hit finding not scored: no truth (source.truth is empty)"
            );
        }
        Some(h) if h.pulses_5_sigma > 0 => {
            let _ = writeln!(
                s,
                "Hit finding vs truth (collection channels, every replay pass): {:.1}% of {} pulses >= 5 sigma found, {:.2} fake hits/s per channel",
                100.0 * h.efficiency_5_sigma(),
                h.pulses_5_sigma,
                h.fake_rate_hz_per_channel(),
            );
        }
        Some(_) => {}
    }
    s
}

/// The ROI readout line: data volume and coverage of the truth (nothing when it was off).
fn roi_summary(r: &RunReport, s: &mut String) {
    let roi = &r.server.roi;
    if roi.fragments == 0 {
        return;
    }
    let _ = write!(
        s,
        "ROI       {} fragments, {} bytes of {} for the whole windows ({:.2}%, {:.1}x less); {} cut at the time-out before their TPs",
        roi.fragments,
        roi.bytes,
        roi.full_window_bytes,
        100.0 * roi.bytes as f64 / roi.full_window_bytes as f64,
        roi.full_window_bytes as f64 / roi.bytes as f64,
        roi.tps_cut,
    );
    match r.roi_coverage {
        Some(c) if c.pulses_5_sigma > 0 => {
            let _ = writeln!(
                s,
                "; {:.1}% of {} true pulses >= 5 sigma in the windows lie in a region",
                100.0 * c.fraction(),
                c.pulses_5_sigma
            );
        }
        _ => {
            let _ = writeln!(s, "; not scored (no truth, or no pulse in the windows)");
        }
    }
}

/// Trigger numbers for a summary line: `none`, or the count and the numbers.
fn numbers(list: &[u64]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = list.iter().take(20).map(u64::to_string).collect();
    let more = if list.len() > 20 { ", ..." } else { "" };
    format!("{} ({}{more})", list.len(), shown.join(", "))
}

/// The closing summary as JSON (`swdaq run --json`): the same facts as [`summary`].
pub fn summary_json(r: &RunReport) -> serde_json::Value {
    let t = &r.trigger.counts;
    let b = &r.builder.counts;
    let by_source = |m: &BTreeMap<SourceId, u64>| -> serde_json::Map<String, serde_json::Value> {
        m.iter()
            .map(|(s, n)| (source_list(&[*s]), (*n).into()))
            .collect()
    };
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
    serde_json::json!({
        "seconds": r.seconds,
        "stop_reason": r.stop_reason,
        "links": r.links,
        "trigger": {
            "decisions": t.issued,
            "candidates": t.candidates,
            "merged": t.merged,
            "vetoed_overlapping": t.vetoed_overlapping,
            "prescaled_away": t.prescaled_away,
            "paused_away": t.paused_away,
            "dropped_busy": t.dropped_busy,
            "late_tps": t.merge.late_tps,
            "latency_p50_ms": ms(quantile(&r.trigger.latencies, 0.5)),
            "latency_p99_ms": ms(quantile(&r.trigger.latencies, 0.99)),
        },
        "records": {
            "complete": b.complete,
            "data_missing": b.data_missing,
            "timed_out": b.timed_out,
            "late_fragments": b.late_fragments,
            "requests_not_sent": r.builder.unrouted_requests,
            "missing_by_source": by_source(&b.missing_by_source),
            "lacking_data_by_source": by_source(&b.lacking_by_source),
            "not_stored": r.builder.not_stored,
            "build_latency_p50_ms": ms(quantile(&r.builder.latencies, 0.5)),
            "build_latency_p99_ms": ms(quantile(&r.builder.latencies, 0.99)),
        },
        "storage": r.storage,
        "recording": r.recording,
        "dataflow": r.dataflow,
        "apps": r.apps,
        "refused_messages": r.refused_messages,
        "thread_cpu_share": r.thread_cpu,
        "roi": (r.server.roi.fragments > 0).then(|| serde_json::json!({
            "fragments": r.server.roi.fragments,
            "bytes": r.server.roi.bytes,
            "full_window_bytes": r.server.roi.full_window_bytes,
            "bytes_ratio": r.server.roi.bytes as f64 / r.server.roi.full_window_bytes as f64,
            "tps_cut": r.server.roi.tps_cut,
            "true_pulses_5_sigma": r.roi_coverage.map(|c| c.pulses_5_sigma),
            "true_pulses_in_regions": r.roi_coverage.map(|c| c.in_regions),
            "fraction_in_regions": r.roi_coverage.filter(|c| c.pulses_5_sigma > 0).map(|c| c.fraction()),
        })),
        "hit_finding": r.hit_finding.map(|h| serde_json::json!({
            "pulses_5_sigma": h.pulses_5_sigma,
            "efficiency_5_sigma": h.efficiency_5_sigma(),
            "fake_rate_hz_per_channel": h.fake_rate_hz_per_channel(),
        })),
    })
}
