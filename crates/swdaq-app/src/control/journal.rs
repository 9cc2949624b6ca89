//! What happened lately, for the console: state changes with who asked, refusals, alerts as
//! they start and clear, failures; each with its time. Bounded to the last [`KEPT`].

use serde::Serialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::SystemTime;

/// Entries kept.
pub const KEPT: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warning,
    Error,
}

#[derive(Serialize)]
struct Entry {
    /// UTC, RFC 3339 with milliseconds.
    time: String,
    /// Unix time in seconds (the console shows it in the operator's time zone).
    unix: f64,
    level: Level,
    text: String,
}

#[derive(Default)]
pub struct Journal {
    entries: VecDeque<Entry>,
}

impl Journal {
    pub fn add(&mut self, level: Level, text: impl Into<String>) {
        let now = SystemTime::now();
        if self.entries.len() == KEPT {
            self.entries.pop_front();
        }
        self.entries.push_back(Entry {
            time: humantime::format_rfc3339_millis(now).to_string(),
            unix: unix_seconds(now),
            level,
            text: text.into(),
        });
    }

    /// Oldest first.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.entries).unwrap_or_default()
    }
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_keeps_the_last_entries_with_their_times() {
        let mut j = Journal::default();
        for i in 0..KEPT + 5 {
            j.add(Level::Info, format!("entry {i}"));
        }
        j.add(Level::Error, "failed");
        let entries = j.to_json();
        let entries = entries.as_array().unwrap();
        assert_eq!(entries.len(), KEPT);
        assert_eq!(entries[0]["text"], "entry 6");
        assert_eq!(entries[KEPT - 1]["level"], "error");
        assert!(entries[KEPT - 1]["time"].as_str().unwrap().ends_with('Z'));
        assert!(entries[KEPT - 1]["unix"].as_f64().unwrap() > 1.6e9);
    }
}
