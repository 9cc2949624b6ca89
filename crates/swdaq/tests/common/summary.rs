//! Reading a `swdaq run --json` summary: its counts, how each application ended, whether
//! every FELIX subscription got every block.
//! Each test binary uses a part of it.
#![allow(dead_code)]

use serde_json::Value;

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// How application `app` ended, as the summary says (null: cleanly).
pub fn failure_of<'a>(s: &'a Value, app: &str) -> &'a Value {
    &s["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == app)
        .unwrap_or_else(|| panic!("no {app} in {s}"))["failure"]
}

/// `victim` ended by SIGKILL, every one of `others` cleanly.
pub fn assert_killed_alone(s: &Value, victim: &str, others: &[&str]) {
    let how = failure_of(s, victim).as_str().unwrap_or_default();
    assert!(how.contains("signal 9"), "{victim}: {s}");
    for app in others {
        assert!(failure_of(s, app).is_null(), "{app}: {s}");
    }
}

/// Each of events `1..=total` is stored exactly once (`times(n)`: how often it is in a closed
/// file; `check(n)` looks at one stored) or listed in `lost`, never both.
pub fn assert_each_once_or_lost(
    total: u64,
    lost: &[u64],
    times: impl Fn(u64) -> usize,
    check: impl Fn(u64),
) {
    for n in 1..=total {
        let is_lost = lost.binary_search(&n).is_ok();
        match times(n) {
            0 => assert!(is_lost, "event {n} neither stored nor lost"),
            1 => {
                assert!(!is_lost, "event {n} both stored and lost");
                check(n);
            }
            t => panic!("event {n} stored {t} times"),
        }
    }
}

/// Every block the servers published arrived at each of `subscriptions`, in sequence, whole.
pub fn assert_every_block_arrived<'a>(subscriptions: impl Iterator<Item = &'a Value>) {
    for subscriber in subscriptions {
        let intake = &subscriber["intake"];
        assert!(u(&intake["blocks"]) > 0, "{subscriber:#}");
        for counter in [
            "out_of_sequence",
            "malformed",
            "connection_losses",
            "blocks_missing",
        ] {
            assert_eq!(u(&intake[counter]), 0, "{counter}: {subscriber:#}");
        }
    }
}
