//! What a shifter must not miss, shown on the console as it happens and written in the
//! journal when it starts and when it clears. The same conditions as the Prometheus alerting
//! rules in `deploy/prometheus/alerts.yml` (their names are the keys' first part), read here
//! from the `Live` figures of the run going on, the state, the output disks and the transfer
//! to permanent storage.

use super::journal::{Journal, Level};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A buffer or backlog above this share of its room is an alert.
pub const BACKLOG_ABOVE: f64 = 0.8;
/// Throttling is an alert once it has gone on this long, in seconds.
pub const THROTTLED_FOR_S: f64 = 5.0;
/// An application silent this long, in seconds, is gone.
pub const HEARTBEAT_AGE_S: f64 = 5.0;
/// A disk with less than this share free is nearly full.
pub const DISK_FREE_BELOW: f64 = 0.1;
/// Files failing to transfer this long, in seconds, are an alert (the rule's `for: 5m`).
pub const TRANSFER_FAILING_FOR_S: f64 = 300.0;
/// Bad histograms named one alert each at most; the rest are one alert that counts them.
pub const DQM_BAD_NAMED: usize = 5;
/// A raised condition of the live figures clears once it has not been seen for this long, in
/// seconds: figures made five times a second would otherwise raise and clear a bursty one
/// (drops now and then) several times a second.
pub const LIVE_CLEARS_AFTER_S: f64 = 2.0;

/// Where a condition comes from: each is looked at on its own occasions, and replaces only
/// its own conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// The run's live figures, every status interval.
    Live,
    /// Run control's state.
    State,
    /// The output directories' disks.
    Disk,
    /// The run's online data-quality monitoring, at each status interval.
    Dqm,
    /// The transfer to permanent storage.
    Transfer,
}

/// A condition seen now.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The alerting rule's name, with the source or directory where there are several.
    pub key: String,
    pub severity: Level,
    pub text: String,
    /// How long it must hold before it is an alert, in seconds.
    pub hold_s: f64,
}

impl Condition {
    fn new(key: impl Into<String>, severity: Level, text: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            severity,
            text: text.into(),
            hold_s: 0.0,
        }
    }
}

struct Active {
    condition: Condition,
    /// Unix time it was first seen.
    since: f64,
    /// Unix time it was last seen.
    seen: f64,
    /// Held long enough to be shown (and journalled).
    raised: bool,
}

#[derive(Default)]
pub struct Alerts {
    active: BTreeMap<(Origin, String), Active>,
}

impl Alerts {
    /// Replaces the conditions from `origin` with `seen` at unix time `now` (a raised live one
    /// not seen lingers [`LIVE_CLEARS_AFTER_S`]); journals those raised and those cleared.
    pub fn update(
        &mut self,
        origin: Origin,
        now: f64,
        seen: Vec<Condition>,
        journal: &mut Journal,
    ) {
        let seen: BTreeMap<String, Condition> =
            seen.into_iter().map(|c| (c.key.clone(), c)).collect();
        self.active.retain(|(o, key), a| {
            let lingers = origin == Origin::Live && a.raised && now - a.seen < LIVE_CLEARS_AFTER_S;
            let stays = *o != origin || seen.contains_key(key) || lingers;
            if !stays && a.raised {
                journal.add(Level::Info, format!("cleared: {}", a.condition.text));
            }
            stays
        });
        for (key, condition) in seen {
            let a = self.active.entry((origin, key)).or_insert_with(|| Active {
                condition: condition.clone(),
                since: now,
                seen: now,
                raised: false,
            });
            a.condition = condition;
            a.seen = now;
            if !a.raised && now - a.since >= a.condition.hold_s {
                a.raised = true;
                journal.add(a.condition.severity, a.condition.text.clone());
            }
        }
    }

    /// Clears every condition from `origin` at once (the run is over), journalling those
    /// that were raised.
    pub fn end(&mut self, origin: Origin, journal: &mut Journal) {
        self.active.retain(|(o, _), a| {
            if *o == origin && a.raised {
                journal.add(Level::Info, format!("cleared: {}", a.condition.text));
            }
            *o != origin
        });
    }

    /// The alerts raised, errors first: `[{key, severity, text, since}]`.
    pub fn to_json(&self) -> Value {
        let mut raised: Vec<&Active> = self.active.values().filter(|a| a.raised).collect();
        raised.sort_by_key(|a| std::cmp::Reverse(a.condition.severity as u8));
        raised
            .iter()
            .map(|a| {
                json!({
                    "key": a.condition.key,
                    "severity": a.condition.severity,
                    "text": a.condition.text,
                    "since": a.since,
                })
            })
            .collect()
    }
}

/// The conditions in a run's `Live` figures (JSON).
pub fn of_live(live: &Value) -> Vec<Condition> {
    let series = |name: &str| live["series"][name].as_f64().filter(|v| v.is_finite());
    let mut found = Vec::new();
    if let Some(d) = series("drops_per_s").filter(|&d| d > 0.0) {
        found.push(Condition::new(
            "SwdaqDropsRising",
            Level::Warning,
            format!("data dropped: {d:.1}/s"),
        ));
    }
    if let Some(e) = series("errors_per_s").filter(|&e| e > 0.0) {
        found.push(Condition::new(
            "SwdaqErrorsRising",
            Level::Warning,
            format!("errors: {e:.1}/s"),
        ));
    }
    if let Some(b) = series("backlog").filter(|&b| b > BACKLOG_ABOVE) {
        found.push(Condition::new(
            "SwdaqBacklogHigh",
            Level::Warning,
            format!("fullest buffer at {:.0}%", 100.0 * b),
        ));
    }
    if let Some(t) = series("throttled").filter(|&t| t > 0.0) {
        found.push(Condition {
            hold_s: THROTTLED_FOR_S,
            ..Condition::new(
                "SwdaqThrottled",
                Level::Warning,
                format!("throttled ({:.0}% of the last interval)", 100.0 * t),
            )
        });
    }
    for app in live["apps"].as_array().into_iter().flatten() {
        let name = app["name"].as_str().unwrap_or("?");
        let age = app["heartbeat_age_s"].as_f64().unwrap_or(0.0);
        let state = app["state"].as_str().unwrap_or_default();
        if age > HEARTBEAT_AGE_S || matches!(state, "gone" | "failed" | "exited") {
            found.push(Condition::new(
                format!("SwdaqApplicationGone:{name}"),
                Level::Error,
                format!("application {name} gone ({state}, last heard {age:.0} s ago)"),
            ));
        }
    }
    for source in live["sources"].as_array().into_iter().flatten() {
        if source["bad"].as_bool() == Some(true) {
            let name = source["name"].as_str().unwrap_or("?");
            let app = source["app"].as_str().filter(|a| !a.is_empty());
            let named = app.map_or(name.to_string(), |a| format!("{name} ({a})"));
            found.push(Condition::new(
                format!("SwdaqSourceInTrouble:{named}"),
                Level::Warning,
                format!(
                    "{named}: {}",
                    source["why"].as_str().unwrap_or("in trouble")
                ),
            ));
        }
    }
    found
}

/// The run's Bad histograms, (name, why) worst first: the first [`DQM_BAD_NAMED`] one alert
/// each, the rest counted in one.
pub fn of_dqm(bad: &[(String, String)]) -> Vec<Condition> {
    let mut found: Vec<Condition> = (bad.iter().take(DQM_BAD_NAMED))
        .map(|(name, why)| {
            Condition::new(
                format!("SwdaqDataQualityBad:{name}"),
                Level::Error,
                format!("data quality: {name} is Bad: {why}"),
            )
        })
        .collect();
    if bad.len() > DQM_BAD_NAMED {
        found.push(Condition::new(
            "SwdaqDataQualityBad",
            Level::Error,
            format!(
                "data quality: {} more histograms Bad",
                bad.len() - DQM_BAD_NAMED
            ),
        ));
    }
    found
}

/// The run stopped on a fault: run control is in `error`, with why.
pub fn of_state(failed: Option<&str>) -> Vec<Condition> {
    failed
        .map(|why| {
            Condition::new(
                "SwdaqRunFailed",
                Level::Error,
                format!("the run stopped on a fault: {why}"),
            )
        })
        .into_iter()
        .collect()
}

/// Each output directory's disk: (directory, bytes available, bytes in all).
pub fn disks(dirs: &[PathBuf]) -> Vec<(PathBuf, u64, u64)> {
    dirs.iter()
        .filter_map(|dir| {
            // A directory not made yet is on the disk of its nearest parent.
            let existing = dir.ancestors().find(|d| d.exists())?;
            let available = fs4::available_space(existing).ok()?;
            let total = fs4::total_space(existing).ok()?;
            Some((dir.clone(), available, total))
        })
        .collect()
}

/// Disks with less than [`DISK_FREE_BELOW`] free.
pub fn of_disks(disks: &[(PathBuf, u64, u64)]) -> Vec<Condition> {
    disks
        .iter()
        .filter(|(_, available, total)| {
            *total > 0 && (*available as f64) < DISK_FREE_BELOW * *total as f64
        })
        .map(|(dir, available, total)| {
            Condition::new(
                format!("SwdaqDiskNearlyFull:{}", dir.display()),
                Level::Warning,
                format!(
                    "disk of {} nearly full: {:.1} GB free of {:.1} GB",
                    dir.display(),
                    *available as f64 / 1e9,
                    *total as f64 / 1e9
                ),
            )
        })
        .collect()
}

/// Files of the transfer to `destination` whose last attempt failed (`failed` of its
/// backlog), with the last error.
pub fn of_transfer(destination: &str, failed: u64, last_error: Option<&str>) -> Vec<Condition> {
    if failed == 0 {
        return Vec::new();
    }
    let why = last_error.map_or(String::new(), |e| format!(": {e}"));
    vec![Condition {
        hold_s: TRANSFER_FAILING_FOR_S,
        ..Condition::new(
            format!("SwdaqTransferFailing:{destination}"),
            Level::Warning,
            format!("{failed} file(s) failing to transfer to {destination}{why}"),
        )
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(drops: f64, backlog: f64, throttled: f64, bad_link: bool) -> Value {
        json!({
            "series": { "drops_per_s": drops, "errors_per_s": 0.0, "backlog": backlog,
                        "throttled": throttled },
            "sources": [{ "name": "link 3", "app": "", "bad": bad_link, "why": "silent" }],
            "apps": [{ "name": "readout-0", "state": "running", "heartbeat_age_s": 0.2 },
                     { "name": "builder-1", "state": "running", "heartbeat_age_s": 9.0 }],
        })
    }

    fn texts(a: &Alerts) -> Vec<String> {
        a.to_json()
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["text"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn conditions_are_raised_cleared_and_journalled() {
        let (mut a, mut j) = (Alerts::default(), Journal::default());
        a.update(
            Origin::Live,
            10.0,
            of_live(&live(5.0, 0.9, 0.0, true)),
            &mut j,
        );
        let shown = texts(&a);
        assert_eq!(shown.len(), 4, "{shown:?}");
        assert!(
            shown[0].starts_with("application builder-1 gone"),
            "errors first: {shown:?}"
        );
        assert!(shown.iter().any(|t| t == "link 3: silent"));
        assert!(shown.iter().any(|t| t == "fullest buffer at 90%"));
        // The state's conditions are their own: a live update leaves them.
        a.update(
            Origin::State,
            11.0,
            of_state(Some("storage failed")),
            &mut j,
        );
        a.update(
            Origin::Live,
            12.0,
            of_live(&live(0.0, 0.1, 0.0, false)),
            &mut j,
        );
        assert_eq!(texts(&a).len(), 2);
        let journal = j.to_json();
        let journal: Vec<&str> = journal
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["text"].as_str().unwrap())
            .collect();
        assert!(journal.contains(&"cleared: link 3: silent"), "{journal:?}");
        assert!(journal.contains(&"the run stopped on a fault: storage failed"));
        a.update(Origin::State, 13.0, of_state(None), &mut j);
        // The live conditions last seen at 12.0 linger, then clear.
        a.update(Origin::Live, 13.0, Vec::new(), &mut j);
        assert_eq!(texts(&a).len(), 1);
        a.update(Origin::Live, 12.0 + LIVE_CLEARS_AFTER_S, Vec::new(), &mut j);
        assert!(texts(&a).is_empty());
    }

    #[test]
    fn bad_histograms_are_alerts_by_name_then_counted_and_end_with_the_run() {
        let (mut a, mut j) = (Alerts::default(), Journal::default());
        let bad: Vec<(String, String)> = (0..7)
            .map(|i| {
                (
                    format!("fed_size_000{i}"),
                    "chi2 p = 1e-9 < 0.01".to_string(),
                )
            })
            .collect();
        a.update(Origin::Dqm, 10.0, of_dqm(&bad), &mut j);
        let shown = texts(&a);
        assert_eq!(shown.len(), DQM_BAD_NAMED + 1, "{shown:?}");
        assert!(shown.contains(&"data quality: fed_size_0000 is Bad: chi2 p = 1e-9 < 0.01".into()));
        assert!(shown.contains(&"data quality: 2 more histograms Bad".into()));
        a.update(Origin::Dqm, 11.0, of_dqm(&bad[..1]), &mut j);
        assert_eq!(texts(&a).len(), 1, "the others cleared: Good again");
        a.end(Origin::Dqm, &mut j);
        assert!(texts(&a).is_empty());
        let journal = j.to_json().to_string();
        assert!(
            journal.contains("cleared: data quality: fed_size_0000 is Bad"),
            "{journal}"
        );
    }

    /// Drops that come and go five times a second raise one alert, not one a fifth of a
    /// second; it clears once they have stayed away, and at once when the run is over.
    #[test]
    fn a_bursty_condition_stays_raised_until_it_has_stayed_away() {
        let (mut a, mut j) = (Alerts::default(), Journal::default());
        let dropping = || of_live(&live(5.0, 0.0, 0.0, false));
        let quiet = || of_live(&live(0.0, 0.0, 0.0, false));
        for step in 0..20 {
            let now = f64::from(step) * 0.2;
            a.update(
                Origin::Live,
                now,
                if step % 2 == 0 { dropping() } else { quiet() },
                &mut j,
            );
            assert!(
                texts(&a).iter().any(|t| t.starts_with("data dropped")),
                "step {step}"
            );
        }
        let raised = |j: &Journal| {
            j.to_json()
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["text"].as_str().unwrap().starts_with("data dropped"))
                .count()
        };
        assert_eq!(raised(&j), 1, "{:?}", j.to_json());
        a.update(Origin::Live, 3.8 + LIVE_CLEARS_AFTER_S, quiet(), &mut j);
        assert!(!texts(&a).iter().any(|t| t.starts_with("data dropped")));
        a.update(Origin::Live, 10.0, dropping(), &mut j);
        a.end(Origin::Live, &mut j);
        assert!(texts(&a).is_empty());
    }

    #[test]
    fn throttling_is_an_alert_only_once_it_has_gone_on() {
        let (mut a, mut j) = (Alerts::default(), Journal::default());
        let throttled = || of_live(&live(0.0, 0.0, 0.5, false));
        let only_throttle =
            |a: &Alerts| texts(a).iter().filter(|t| t.contains("throttled")).count();
        a.update(Origin::Live, 0.0, throttled(), &mut j);
        a.update(Origin::Live, THROTTLED_FOR_S - 1.0, throttled(), &mut j);
        assert_eq!(only_throttle(&a), 0);
        a.update(Origin::Live, THROTTLED_FOR_S, throttled(), &mut j);
        assert_eq!(only_throttle(&a), 1);
        // A pause in throttling starts the wait again.
        a.update(
            Origin::Live,
            20.0,
            of_live(&live(0.0, 0.0, 0.0, false)),
            &mut j,
        );
        a.update(Origin::Live, 21.0, throttled(), &mut j);
        assert_eq!(only_throttle(&a), 0);
    }

    #[test]
    fn every_condition_is_named_after_an_alerting_rule() {
        let rules = include_str!("../../../../deploy/prometheus/alerts.yml");
        let live = json!({
            "series": { "drops_per_s": 1.0, "errors_per_s": 1.0, "backlog": 0.9, "throttled": 1.0 },
            "sources": [{ "name": "link 0", "bad": true, "why": "silent" }],
            "apps": [{ "name": "bu-0", "state": "gone", "heartbeat_age_s": 9.0 }],
        });
        let mut all = of_live(&live);
        all.extend(of_state(Some("failed")));
        all.extend(of_disks(&[(PathBuf::from("/data"), 1, 100)]));
        all.extend(of_transfer("/eos", 1, None));
        assert_eq!(all.len(), 9);
        for c in all {
            let rule = c.key.split(':').next().unwrap();
            assert!(
                rules.contains(&format!("- alert: {rule}\n")),
                "{rule} is not in alerts.yml"
            );
        }
    }

    #[test]
    fn files_failing_to_transfer_are_an_alert_after_five_minutes() {
        assert!(of_transfer("/eos", 0, Some("old")).is_empty());
        let mut a = Alerts::default();
        let mut j = Journal::default();
        let failing = || of_transfer("root://eos:1094//raw", 2, Some("connection refused"));
        a.update(Origin::Transfer, 0.0, failing(), &mut j);
        a.update(Origin::Transfer, 299.0, failing(), &mut j);
        assert!(texts(&a).is_empty(), "held for five minutes first");
        a.update(Origin::Transfer, 300.0, failing(), &mut j);
        assert_eq!(
            texts(&a),
            ["2 file(s) failing to transfer to root://eos:1094//raw: connection refused"]
        );
        a.update(Origin::Transfer, 301.0, Vec::new(), &mut j);
        assert!(texts(&a).is_empty(), "cleared once the retries work");
    }

    #[test]
    fn a_nearly_full_disk_is_named() {
        let dir = PathBuf::from("/data");
        assert!(of_disks(&[(dir.clone(), 50, 100)]).is_empty());
        let full = of_disks(&[(dir, 5, 100)]);
        assert_eq!(full.len(), 1);
        assert!(
            full[0].text.contains("/data nearly full"),
            "{}",
            full[0].text
        );
        let here = disks(&[std::env::temp_dir().join("not-made-yet/run")]);
        assert_eq!(here.len(), 1);
        assert!(here[0].2 >= here[0].1 && here[0].2 > 0);
    }
}
