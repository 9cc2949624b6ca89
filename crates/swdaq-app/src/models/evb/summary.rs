//! The event builder's closing summary, as text and JSON: events triggered, built, written
//! and lost (by number), FED errors, what dead builder units left on disk, the farm.

use crate::runtime::outcome::{StopReason, number_runs, read_back_json, read_back_text};
use swdaq_evb::EvbSummary;
use swdaq_evb::check::FedCheckFailure;

/// Super-fragments that never came, per readout unit, over every builder unit.
fn missing_per_ru(s: &EvbSummary) -> Vec<u64> {
    let rus = s.bus.iter().map(|b| b.build.missing_per_ru.len());
    let mut out = vec![0; rus.max().unwrap_or(0)];
    for b in &s.bus {
        for (total, &n) in out.iter_mut().zip(&b.build.missing_per_ru) {
            *total += n;
        }
    }
    out
}

/// The closing summary as JSON: every count, and the latency quantiles.
pub fn summary_json(s: &EvbSummary) -> serde_json::Value {
    let seconds = s.elapsed.as_secs_f64();
    let fed_failures: serde_json::Map<String, serde_json::Value> = FedCheckFailure::ALL
        .iter()
        .map(|f| {
            (
                f.name().to_owned(),
                s.feds
                    .iter()
                    .map(|(_, _, c)| c.failed(*f))
                    .sum::<u64>()
                    .into(),
            )
        })
        .collect();
    serde_json::json!({
        "seconds": seconds,
        "triggered": s.evm.assigned,
        "built": s.built(),
        "incomplete": s.incomplete(),
        "no_data": s.no_data(),
        "written": s.written(),
        "written_bytes": s.written_bytes(),
        "lost": s.lost(),
        "lost_with_dead_builder_units": s.evm.lost.len(),
        "assigned_not_built": s.assigned_not_built(),
        "lost_events": s.evm.lost,
        "builder_units_gone": s.evm.gone,
        "unwritten": s.unwritten(),
        "unaccounted": s.unaccounted(),
        "throttled": s.evm.throttled,
        "max_behind_trigger_ms": s.evm.max_behind.as_secs_f64() * 1e3,
        "paused_s": s.evm.paused.as_secs_f64(),
        "ru_expired": s.rus.iter().map(|r| r.expired).sum::<u64>(),
        "built_per_second": s.built() as f64 / seconds,
        "gbps": s.written_bytes() as f64 / seconds / 1e9,
        "build_time_p50_us": s.build_time_us(0.5),
        "build_time_p99_us": s.build_time_us(0.99),
        "fed_failures": fed_failures,
        "feds": s.feds.iter().map(|(ru, fed, c)| serde_json::json!({
            "ru": ru,
            "fed": fed,
            "good": c.good,
            "failures": FedCheckFailure::ALL.iter().map(|f| (f.name().to_owned(), c.failed(*f).into())).collect::<serde_json::Map<_, _>>(),
            "ingest": c.ingest,
        })).collect::<Vec<_>>(),
        "missing_per_ru": missing_per_ru(s),
        "writer_errors": s.writers.iter().filter_map(|w| w.error.as_ref().map(|e| e.to_string())).collect::<Vec<_>>(),
        "read_back": s.read_back.iter().map(|r| read_back_json(("bu", r.bu.into()), r.reported, &r.left)).collect::<Vec<_>>(),
        "builder_cpu_seconds": s.builder_cpu_seconds,
        "farm": s.farm.as_ref().map(|f| serde_json::json!({
            "files": f.counts.files,
            "events_verified": f.counts.events,
            "bytes": f.counts.bytes,
            "bad_events": f.counts.bad_events,
            "bad_files": f.counts.bad_files,
            "filter": f.counts.filter,
            "cpu_seconds": f.cpu_seconds,
            "kept": f.kept.iter().map(|(p, why)| format!("{}: {why}", p.display())).collect::<Vec<_>>(),
            "errors": f.errors,
        })),
    })
}

pub fn summary_text(s: &EvbSummary, stop_reason: &StopReason) -> String {
    let j = summary_json(s);
    let mut out = format!(
        "Run ended after {:.1} s ({stop_reason}).\n",
        s.elapsed.as_secs_f64()
    );
    out += &format!(
        "Events    {} triggered, {} built ({} incomplete), {} written ({:.3} GB), {} lost ({} with dead builder units, {} unwritten{}); {} throttled, at most {:.1} ms behind the trigger clock\n",
        s.evm.assigned,
        s.built(),
        s.incomplete(),
        s.written(),
        s.written_bytes() as f64 / 1e9,
        s.lost(),
        s.evm.lost.len(),
        s.unwritten(),
        match s.assigned_not_built() {
            Some(n) if n > 0 => format!(", {n} assigned and never built"),
            _ => String::new(),
        },
        s.evm.throttled,
        s.evm.max_behind.as_secs_f64() * 1e3,
    );
    if s.no_data() > 0 {
        out += &format!(
            "No data   {} events had no FED fragment that passed the checks: not written (see FED errors)\n",
            s.no_data()
        );
    }
    if !s.evm.paused.is_zero() {
        out += &format!(
            "Paused    {:.1} s by run control (the trigger clock stood still)\n",
            s.evm.paused.as_secs_f64()
        );
    }
    let expired: u64 = s.rus.iter().map(|r| r.expired).sum();
    if expired > 0 {
        out += &format!(
            "Readout   {expired} super-fragments dropped: no builder unit asked within evb.ru_hold_timeout\n"
        );
    }
    if s.unaccounted() > 0 {
        out += &format!(
            "UNACCOUNTED {} events triggered are neither written nor counted lost: a bug, please report it\n",
            s.unaccounted()
        );
    }
    out += &format!(
        "Rate      {:.0} events/s, {:.3} GB/s; build time p50 {} us p99 {} us\n",
        j["built_per_second"].as_f64().unwrap_or(0.0),
        j["gbps"].as_f64().unwrap_or(0.0),
        s.build_time_us(0.5),
        s.build_time_us(0.99),
    );
    for (ru, fed, c) in &s.feds {
        let mut failed: Vec<String> = FedCheckFailure::ALL
            .iter()
            .filter(|f| c.failed(**f) > 0)
            .map(|f| format!("{} {}", c.failed(*f), f.name()))
            .collect();
        if c.ingest.truncated > 0 {
            failed.push("input truncated (a record cut short: the link ended there)".into());
        }
        if c.ingest.too_short > 0 {
            failed.push(format!(
                "{} records too short to be a fragment (not placed in any event)",
                c.ingest.too_short
            ));
        }
        let stream = &c.ingest.stream;
        let ferol = [
            ("signature", stream.signature),
            ("FED id", stream.fed_id),
            ("event number", stream.event_number),
            ("packet order", stream.packet_order),
            ("length", stream.length),
        ];
        let corrupt: Vec<String> = ferol
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| format!("{n} {what}"))
            .collect();
        if !corrupt.is_empty() {
            failed.push(format!(
                "FEROL headers corrupt ({}; each a fragment lost)",
                corrupt.join(", ")
            ));
        }
        if stream.cut > 0 {
            failed.push(format!(
                "FEROL stream closed mid-fragment {} times",
                stream.cut
            ));
        }
        if stream.stalled > 0 {
            failed.push(format!(
                "FEROL stream stalled mid-fragment {} times (longer than evb.input.stop_wait)",
                stream.stalled
            ));
        }
        if !failed.is_empty() {
            out += &format!("FED {fed:>4} (RU {ru}): {}\n", failed.join(", "));
        }
    }
    let closed: Vec<String> = s
        .feds
        .iter()
        .filter(|(_, _, c)| c.ingest.stream.closed > c.ingest.stream.cut)
        .map(|(_, fed, _)| fed.to_string())
        .collect();
    if !closed.is_empty() {
        out += &format!(
            "Streams   FEROL streams closed by their senders between fragments: FEDs {}\n",
            closed.join(", ")
        );
    }
    if !s.evm.gone.is_empty() {
        out += &format!(
            "Lost      builder units {:?} gone; their events in no closed file, by number: {}\n",
            s.evm.gone,
            number_runs(&s.evm.lost)
        );
    }
    for r in &s.read_back {
        out += &read_back_text(&format!("builder unit {}", r.bu), &r.left);
    }
    for w in s.writers.iter().filter_map(|w| w.error.as_ref()) {
        out += &format!("Writer    failed: {w}\n");
    }
    if let Some(cpu) = s.builder_cpu_seconds {
        out += &format!(
            "CPU       event builder {cpu:.1} s ({:.1} us per built event)\n",
            cpu * 1e6 / s.built().max(1) as f64
        );
    }
    if let Some(f) = &s.farm {
        let c = &f.counts;
        out += &format!(
            "Farm      {} files read back and deleted or kept, {} events verified ({:.3} GB), {} bad events, {} files kept as .bad; {:.1} CPU s ({:.1} us per event)\n",
            c.files,
            c.events,
            c.bytes as f64 / 1e9,
            c.bad_events,
            c.bad_files,
            f.cpu_seconds,
            f.cpu_seconds * 1e6 / (c.events + c.bad_events).max(1) as f64,
        );
        let filter = &c.filter;
        if filter.accepted + filter.rejected + filter.unfiltered > 0 {
            out += &format!(
                "Filter    {} events accepted, {} rejected (not written), {} kept unfiltered after a failed filter call; {} stream files\n",
                filter.accepted, filter.rejected, filter.unfiltered, filter.stream_files
            );
        }
        for (path, why) in &f.kept {
            out += &format!("Farm      kept {}: {why}\n", path.display());
        }
        for e in &f.errors {
            out += &format!("Farm      {e}\n");
        }
    }
    out
}

/// `"; what: a, b"`, or nothing for none.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_events_print_as_runs_of_numbers() {
        assert_eq!(number_runs(&[1, 2, 3, 7, 9, 10]), "1-3, 7, 9-10");
        assert_eq!(number_runs(&[]), "");
    }
}
