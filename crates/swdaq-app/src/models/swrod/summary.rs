//! The SW ROD's closing summary, as text and JSON: L1 accepts, every ROB, the HLT's events,
//! what was stored, and the truth checks.

use super::config::SwrodInputKind;
use super::report::SwrodReport;
use crate::runtime::outcome::StopReason;
use swdaq_swrod::net::subscriber::IntakeCounts;

pub fn summary_json(r: &SwrodReport) -> serde_json::Value {
    let chunks = r.chunks();
    let robs: Vec<serde_json::Value> = r
        .robs
        .iter()
        .map(|rob| {
            serde_json::json!({
                "source_id": format!("0x{:08x}", rob.source_id),
                "decoder": rob.decoder,
                "aggregator": rob.aggregator,
                "plugin_errors": rob.aggregator.plugin_errors,
                "plugin_error": rob.plugin_error,
                "consumers": rob.consumers.iter().map(|(n, c)| (n.clone(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
                "intake": rob.intake,
                "cpu_s": rob.cpu_s,
                "processing_s": rob.processing_s,
                "chunks_per_cpu_second": rob.decoder.chunks as f64 / rob.cpu_s.max(1e-9),
            })
        })
        .collect();
    let incomplete: Vec<serde_json::Value> = r
        .incomplete_examples
        .iter()
        .map(|(l1_id, missing)| {
            serde_json::json!({
                "l1_id": format!("0x{l1_id:08x}"),
                "missing_robs": missing.iter().map(|(s, why)| serde_json::json!({"source_id": format!("0x{s:08x}"), "why": why})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let felix = &r.settings.felix;
    let mut j = serde_json::json!({
        "seconds": r.seconds,
        "felix": {
            "mode": felix.mode,
            "block_bytes": felix.layout().map(|l| l.block_size()).ok(),
            "elinks_per_card": felix.elinks,
        },
        "cards": r.cards,
        "l1as": r.cards.first().map_or(0, |c| c.l1as),
        "chunks": chunks,
        "chunks_per_second": chunks as f64 / r.seconds,
        "robs": robs,
        "requests": r.requests,
        "hlt": r.hlt,
        "hlt_cpu_s": r.hlt_cpu_s,
        "incomplete_events_named": incomplete,
        "samples": r.samples,
        "sample_errors": r.sample_errors,
        "stored_events": r.stored_events,
        "stored_incomplete_events": r.stored_flagged_events,
        "stored_bytes": r.stored_bytes,
        "unwritten_events": r.unwritten_events,
        "files": r.files,
        "storage_error": r.storage_error,
        "truth": {
            "known": r.truth_known,
            "faults": r.truth_checks(),
            "unexpected": r.unexpected().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
            "events_with_incomplete_robs": r.hlt.events_with_incomplete_robs,
            "expected_events_with_incomplete_robs": r.expected_events_with_incomplete_robs(),
            "nothing_silently_dropped": r.nothing_silently_dropped(),
            "ok": r.truth_known.then(|| r.truth_ok()),
        },
    });
    if let Some(apps) = &r.apps {
        super::summary_apps::add_json(&mut j, r, apps);
    }
    if let Some(dqm) = &r.dqm {
        j["dqm"] = dqm.json();
    }
    j
}

pub fn summary_text(r: &SwrodReport, stop_reason: &StopReason) -> String {
    let l1as = r.cards.first().map_or(0, |c| c.l1as);
    let chunks = r.chunks();
    let mut out = format!("Run ended after {:.1} s ({stop_reason}).\n", r.seconds);
    out += &format!(
        "L1As      {l1as} per card in {:.1} s ({:.0} Hz); {} chunks ({:.2} M/s)\n",
        r.seconds,
        l1as as f64 / r.seconds,
        chunks,
        chunks as f64 / r.seconds / 1e6,
    );
    let emulated = r.settings.input.kind == SwrodInputKind::Emulator;
    for (i, c) in r.cards.iter().enumerate() {
        out += &if emulated {
            format!(
                "Card {i:<4} waited {:.2} s for the SW ROD, {:.2} s for the HLT; at most {:.1} ms behind the L1A clock; emulator CPU {:.1} s\n",
                c.waited_for_rod_s, c.waited_for_hlt_s, c.max_lag_ms, c.cpu_s
            )
        } else {
            format!(
                "Card {i:<4} {} L1 accepts from its TTC-to-host e-link ({} lost or unreadable); waited {:.2} s for the SW ROD, {:.2} s for the HLT; {}CPU {:.1} s{}\n",
                c.l1as,
                c.ttc_problems,
                c.waited_for_rod_s,
                c.waited_for_hlt_s,
                c.intake
                    .map_or(String::new(), |i| format!("{}; ", intake_text(&i))),
                c.cpu_s,
                c.input_error
                    .as_ref()
                    .map_or(String::new(), |e| format!("; input ended early: {e}")),
            )
        };
    }
    for rob in &r.robs {
        let a = &rob.aggregator;
        let drops: u64 = rob.consumers.iter().map(|(_, c)| c.dropped_slow).sum();
        out += &format!(
            "ROB 0x{:08x}: {} fragments ({} incomplete), {:.2} M chunks per CPU second ({:.1} CPU s), {} dropped by slow consumers{}{}\n",
            rob.source_id,
            a.fragments,
            a.incomplete_fragments,
            rob.decoder.chunks as f64 / rob.cpu_s.max(1e-9) / 1e6,
            rob.cpu_s,
            drops,
            rob.intake
                .map_or(String::new(), |i| format!("; {}", intake_text(&i))),
            rob.plugin_error.as_ref().map_or(String::new(), |e| format!(
                "; aggregation plugin failed for {} L1 IDs (stored in swdaq's layout, flagged PluginFailed), first: {e}",
                a.plugin_errors
            )),
        );
    }
    let h = &r.hlt;
    out += &format!(
        "Events    {} built ({} complete: every ROB, every e-link; {} with ROBs missing; {} holding ROBs that miss e-links); answers: {} found, {} not yet, {} gone, {} invalid; {} ROBs timed out\n",
        h.events,
        h.complete_events,
        h.incomplete_events,
        h.events_with_incomplete_robs,
        h.found,
        h.not_yet,
        h.gone,
        h.invalid,
        h.timed_out_robs,
    );
    for (l1_id, missing) in &r.incomplete_examples {
        let named: Vec<String> = missing
            .iter()
            .map(|(s, why)| format!("0x{s:08x} ({why:?})"))
            .collect();
        out += &format!(
            "Incomplete event 0x{l1_id:08x}: missing {}\n",
            named.join(", ")
        );
    }
    out += &format!(
        "Stored    {} events ({} incomplete), {:.1} MB in {} EventStorage files; sampler checked {} fragments, {} bad\n",
        r.stored_events,
        r.stored_flagged_events,
        r.stored_bytes as f64 / 1e6,
        r.files.len(),
        r.samples,
        r.sample_errors,
    );
    if !r.truth_known {
        out += &format!(
            "Truth     not scored: no truth for every card (card<K>_faults.csv) in {:?}\n",
            match r.settings.input.kind {
                SwrodInputKind::File => &r.settings.input.directory,
                _ => &r.settings.input.truth,
            }
        );
    }
    for c in r.truth_checks().into_iter().filter(|_| r.truth_known) {
        out += &format!(
            "Truth     {:<18} injected {:>6}  {:<20} {:>6}  {}\n",
            c.fault,
            c.injected,
            c.counter,
            c.counted,
            if c.ok {
                "ok".to_string()
            } else {
                format!("MISMATCH (expected {})", c.expected)
            }
        );
    }
    let unexpected: Vec<String> = r
        .unexpected()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    out += &format!(
        "Truth     events holding ROBs that miss e-links: {} (truth {}); every L1A one event and one fragment per ROB: {}; unexpected counts: {}; overall {}\n",
        r.hlt.events_with_incomplete_robs,
        r.expected_events_with_incomplete_robs(),
        if r.nothing_silently_dropped() {
            "yes"
        } else {
            "NO"
        },
        if unexpected.is_empty() {
            "none".into()
        } else {
            unexpected.join(", ")
        },
        match (r.truth_known, r.truth_ok()) {
            (false, _) => "not scored",
            (true, true) => "OK",
            (true, false) => "MISMATCH",
        },
    );
    if let Some(e) = &r.storage_error {
        out += &format!(
            "Storage   failed: {e}; {} events unwritten\n",
            r.unwritten_events
        );
    }
    if let Some(dqm) = &r.dqm {
        out += &dqm.text();
    }
    if let Some(apps) = &r.apps {
        out += &super::summary_apps::text(apps);
    }
    out
}

/// A FELIX subscription's counts in words.
fn intake_text(i: &IntakeCounts) -> String {
    format!(
        "FELIX server: {} blocks in {} messages, {} out of sequence, {} malformed, {} connections lost, {} blocks missing",
        i.blocks, i.messages, i.out_of_sequence, i.malformed, i.connection_losses, i.blocks_missing
    )
}
