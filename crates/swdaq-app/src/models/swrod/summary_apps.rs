//! The part of the SW ROD's summary only a run as applications has: the HLT supervisor's
//! account, the events lost by number, what dead HLT applications left on disk, how each
//! application ended and what the inboxes refused.

use super::report::{AppsPart, SwrodReport};
use crate::runtime::outcome::{apps_text, read_back_json, read_back_text};

/// The JSON keys of the applications' part, added to `j`.
pub(super) fn add_json(j: &mut serde_json::Value, r: &SwrodReport, a: &AppsPart) {
    j["lost"] = a.lost_events.len().into();
    j["lost_events"] = serde_json::json!(a.lost_events);
    j["events_of_unreported_hlts"] = a.events_of_unreported_hlts.into();
    j["hltsv"] = match &a.hltsv {
        Some(h) => serde_json::json!({
            "l1as": h.l1as,
            "busy_s": h.busy_s,
            "ttc_intake": h.ttc_intake.map(|(i, _)| i),
            "ttc_problems": h.ttc_intake.map(|(_, p)| p),
            "hlts_gone": h.gone,
            "hlts": h.accounts.iter().map(|a| serde_json::json!({
                "requested": a.requested,
                "assigned": a.assigned,
                "alive": a.alive,
            })).collect::<Vec<_>>(),
        }),
        None => serde_json::Value::Null,
    };
    j["hlts_gone"] = serde_json::json!(a.hltsv.as_ref().map(|h| &h.gone));
    j["read_back"] = a
        .read_back
        .iter()
        .map(|r| read_back_json(("hlt", r.unit), r.reported, &r.left))
        .collect();
    j["apps"] = serde_json::to_value(&a.apps).unwrap_or_default();
    j["refused_messages"] = serde_json::json!(a.refused_messages);
    j["undelivered"] = serde_json::json!(a.undelivered);
    j["thread_cpu"] = serde_json::json!(a.thread_cpu);
    j["l1as_to_hlt"] = r.l1as_to_hlt.into();
}

/// The text lines of the applications' part.
pub(super) fn text(a: &AppsPart) -> String {
    let mut out = String::new();
    if let Some(h) = &a.hltsv {
        // What busy held: the supervisor's own L1A clock, or (fed by FELIX servers) the
        // reading of card 0's TTC e-link, which holds its server through TCP flow control.
        let held = if h.ttc_intake.is_some() {
            "TTC e-link not read"
        } else {
            "L1A clock held"
        };
        out += &format!(
            "HLTSV     {} L1 accepts given out, busy {:.2} s (no HLT application had room; {held}); {} HLT applications gone\n",
            h.l1as,
            h.busy_s,
            h.gone.len()
        );
    }
    if !a.lost_events.is_empty() || a.events_of_unreported_hlts > 0 {
        out += &format!(
            "Lost      {} events given to HLT applications that died and in none of their closed files{}\n",
            a.lost_events.len(),
            if a.events_of_unreported_hlts > 0 {
                format!(
                    "; {} built by HLT applications that did not report",
                    a.events_of_unreported_hlts
                )
            } else {
                String::new()
            }
        );
    }
    for r in &a.read_back {
        out += &read_back_text(&format!("HLT {}", r.unit), &r.left);
    }
    out += &apps_text(&a.apps, &a.refused_messages);
    let undelivered: Vec<String> = a
        .undelivered
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
    if !undelivered.is_empty() {
        out += &format!("Undelivered {}\n", undelivered.join(", "));
    }
    out
}
