//! The chain's closing summary, as text and as JSON (`swdaq run --json`, `swdaq serve`'s
//! answer to a stop).

use super::inputs::SourceLabel;
use super::system::RunReport;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;
use swdaq_dataflow::builder::source_list;
use swdaq_format::SourceId;
use swdaq_readout::request::RequestStatus;
use swdaq_readout::server::Outcome;

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
        if let Some(p) = &l.processing {
            let _ = writeln!(
                s,
                "  link 0x{:08x} (board): {} decode errors; plugin processed {} slices, {} not ({} failed calls); {} primitives, {} late, {} impossible",
                l.source_id,
                l.decode_errors,
                p.frames_processed,
                p.frames_unprocessed,
                p.plugin_errors,
                l.trigger_primitives,
                p.late_primitives,
                p.impossible_primitives,
            );
        }
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
        "Trigger   {} decisions ({:.2} Hz) from {} candidates: {} merged, {} vetoed as overlapping, {} prescaled away, {}{} dropped while busy; {} late TPs{}; latency p50 {} p99 {}",
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
        if t.data_time_jumps > 0 {
            format!(
                "; data time jumped {} times (calibration triggers started again after each)",
                t.data_time_jumps
            )
        } else {
            String::new()
        },
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
    let unreported: Vec<&str> = (r.apps.iter())
        .filter(|a| a.kind == "builder" && !a.reported)
        .map(|a| a.name.as_str())
        .collect();
    match &r.storage {
        // A builder that ended without its report (killed at the stop) may have written
        // records: only its output directory can say, not "off".
        None if !unreported.is_empty() => {
            let _ = writeln!(
                s,
                "Storage   not reported: {} ended without a report; the records they wrote are in their output files",
                unreported.join(", ")
            );
        }
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
    if let Some(dqm) = &r.dqm {
        s += &dqm.text();
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
    let mut j = serde_json::json!({
        "seconds": r.seconds,
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
            "data_time_jumps": t.data_time_jumps,
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
    });
    // Only with `[dqm]`, as the other models have it.
    if let Some(dqm) = &r.dqm {
        j["dqm"] = dqm.json();
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::outcome::AppOutcome;

    /// A builder application killed at the stop sent no storage report: the summary says so
    /// (it said "off (storage.enabled = false): nothing written" beside records on disk).
    #[test]
    fn storage_not_reported_by_a_killed_builder_is_not_called_off() {
        let killed = AppOutcome {
            name: "builder-0".into(),
            kind: "builder".into(),
            reported: false,
            failure: Some("killed (signal 9) at the stop".into()),
            ..Default::default()
        };
        let report = RunReport {
            seconds: 1.0,
            apps: vec![killed],
            ..Default::default()
        };
        let text = summary(&report);
        assert!(
            text.contains("Storage   not reported: builder-0 ended without a report"),
            "{text}"
        );
        assert!(!text.contains("storage.enabled = false"), "{text}");
        let off = summary(&RunReport {
            seconds: 1.0,
            ..Default::default()
        });
        assert!(
            off.contains("Storage   off (storage.enabled = false)"),
            "{off}"
        );
    }
}
