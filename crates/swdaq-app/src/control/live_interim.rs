//! INTERIM, to be replaced at the merge with `reshape` (issue 24): the chain's live figures
//! as they are today (`run::view`'s `Totals` and `LinkFigures`) mapped to the one `Live`
//! schema of every model (`live.rs` on that branch), which `/status.run.live`, the history
//! and the console read. Once each model reports its own `Live`, this file goes and run
//! control serialises the model's `Live` instead.

use crate::run::view::{LinkFigures, Totals};
use serde_json::{Value, json};
use swdaq_trigger::TriggerConfig;

/// A link is called silent only after the run has had this long to bring its links up.
const SILENT_AFTER_S: f64 = 2.0;

/// The chain's figures in the `Live` schema (`model`, `elapsed_s`, `figures`, `series`,
/// `sources` bad ones first, `apps`).
pub fn chain_live(totals: &Totals, links: &[LinkFigures]) -> Value {
    let input_mb_s: f64 = links.iter().map(|l| l.mb_per_s).sum();
    // A latency buffer is full once it has wrapped (it keeps the last `buffer_s`): that is
    // no backlog. The chain's backlog is the storage writer's queue (a slow disk fills it,
    // then the trigger is inhibited).
    let buffers = links.iter().map(|l| l.buffer_filled).fold(0.0, f64::max);
    let backlog = totals.storage_queue_filled;
    let figure = |key: &str, label: &str, value: f64, unit: &str| json!({ "key": key, "label": label, "value": value, "unit": unit });
    let mut sources: Vec<Value> = links
        .iter()
        .map(|l| source_row(l, totals.elapsed_s))
        .collect();
    // Bad ones first, each group in link order (the sort is stable).
    sources.sort_by_key(|row| !row["bad"].as_bool().unwrap_or(false));
    json!({
        "model": "chain",
        "elapsed_s": totals.elapsed_s,
        "figures": [
            figure("input_mb_s", "readout", input_mb_s, "MB/s"),
            figure("frames_per_s", "frames", totals.frames_per_s, "/s"),
            figure("tps_per_s", "trigger primitives", totals.tps_per_s, "/s"),
            figure("event_hz", "trigger decisions", totals.triggers_per_s, "Hz"),
            figure("triggers", "decisions in the run", totals.triggers as f64, ""),
            figure("records", "records built", totals.records as f64, ""),
            figure("record_mb_s", "records", totals.record_mb_per_s, "MB/s"),
            figure("backlog", "storage queue", 100.0 * backlog.unwrap_or(0.0), "%"),
            figure("buffers", "latency buffers filled", 100.0 * buffers, "%"),
            figure("drops", "dropped", totals.drops as f64, ""),
            figure("errors", "errors", totals.errors as f64, ""),
        ],
        "series": {
            "input_mb_s": input_mb_s,
            "event_hz": totals.triggers_per_s,
            "backlog": backlog,
            // The chain publishes no share of time inhibited; its decisions dropped while
            // busy are counted with the drops.
            "throttled": null,
            "drops_per_s": totals.drops_per_s,
            "errors_per_s": totals.errors_per_s,
        },
        "sources": sources,
        "apps": [],
    })
}

/// The trigger sources a prescale or rate change may name, with their settings now (the
/// console's trigger controls).
pub fn trigger_sources(t: &TriggerConfig) -> Value {
    let source = |name: &str, enabled: bool, prescale: u32, rate_hz: Option<f64>| json!({ "name": name, "enabled": enabled, "prescale": prescale, "rate_hz": rate_hz });
    json!([
        source(
            "multiplicity",
            t.multiplicity.enabled,
            t.multiplicity.prescale,
            None
        ),
        source("adc_sum", t.adc_sum.enabled, t.adc_sum.prescale, None),
        source("track", t.track.enabled, t.track.prescale, None),
        source(
            "periodic",
            t.periodic.enabled,
            t.periodic.prescale,
            Some(t.periodic.rate_hz)
        ),
        source(
            "random",
            t.random.enabled,
            t.random.prescale,
            Some(t.random.rate_hz)
        ),
    ])
}

/// One link's row: bad when its errors or drops rose in the last interval, or when it is
/// silent while the run takes data.
fn source_row(l: &LinkFigures, elapsed_s: f64) -> Value {
    let mut why = Vec::new();
    if l.frames_per_s == 0.0 && elapsed_s >= SILENT_AFTER_S {
        why.push("silent: no frames in the last interval".to_string());
    }
    if l.errors_per_s > 0.0 {
        why.push(format!("{:.0} bad frames/s", l.errors_per_s));
    }
    if l.drops_per_s > 0.0 {
        why.push(format!("dropping {:.0} frames/s", l.drops_per_s));
    }
    json!({
        "name": format!("link {}", l.link),
        "app": "",
        "rate_hz": l.frames_per_s,
        "mb_s": l.mb_per_s,
        "errors": l.errors,
        "drops": l.drops,
        "bad": !why.is_empty(),
        "why": (!why.is_empty()).then(|| why.join("; ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(link: u32, frames_per_s: f64, errors_per_s: f64) -> LinkFigures {
        LinkFigures {
            link,
            frames_per_s,
            mb_per_s: frames_per_s * 7200.0 / 1e6,
            buffer_filled: 0.1 * f64::from(link),
            tps_per_s: 0.0,
            errors: errors_per_s as u64 * 3,
            errors_per_s,
            drops: 0,
            drops_per_s: 0.0,
        }
    }

    fn totals(elapsed_s: f64) -> Totals {
        Totals {
            elapsed_s,
            frames: 0,
            frames_per_s: 0.0,
            tps_per_s: 0.0,
            triggers: 7,
            triggers_per_s: 2.0,
            records: 7,
            record_mb_per_s: 1.0,
            drops: 0,
            drops_per_s: 0.0,
            errors: 0,
            errors_per_s: 0.0,
            storage_queue_filled: Some(0.25),
            roi_bytes_ratio: None,
            bursts: 0,
            burst_mb_per_s: 0.0,
            burst_frames_lost: 0,
        }
    }

    #[test]
    fn silent_or_erring_links_come_first_with_why() {
        let links = [link(0, 1e4, 0.0), link(1, 0.0, 0.0), link(2, 1e4, 5.0)];
        let live = chain_live(&totals(10.0), &links);
        let names: Vec<&str> = live["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["link 1", "link 2", "link 0"]);
        assert!(
            live["sources"][0]["why"]
                .as_str()
                .unwrap()
                .contains("silent")
        );
        assert!(
            live["sources"][1]["why"]
                .as_str()
                .unwrap()
                .contains("5 bad frames/s")
        );
        assert_eq!(live["sources"][2]["bad"], false);
        assert_eq!(live["series"]["backlog"], 0.25);
        assert_eq!(live["series"]["event_hz"], 2.0);
        assert!((live["series"]["input_mb_s"].as_f64().unwrap() - 144.0).abs() < 1e-9);
    }

    #[test]
    fn a_link_is_not_called_silent_while_the_run_comes_up() {
        let live = chain_live(&totals(0.5), &[link(0, 0.0, 0.0)]);
        assert_eq!(live["sources"][0]["bad"], false);
    }
}
