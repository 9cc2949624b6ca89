//! How a run ended, whatever the model: why it stopped, how each application ended, and each
//! thread's share of a core.

use std::collections::BTreeMap;
use std::time::Duration;
use swdaq_dataflow::credit::LeftOnDisk;
use swdaq_monitor::proc::{ThreadStat, USER_HZ, read_threads};
use swdaq_store::StoreReport;

/// Why the run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopReason {
    #[default]
    Duration,
    Interrupted,
    AllLinksEnded,
    /// The event builder's input is done: `max_events` triggered, or its files ended.
    InputEnded,
    StorageFailed(String),
    /// An application the run cannot go on without ended.
    AppFailed(String),
}

impl StopReason {
    /// A storage failure with the writer's own error, which only its report has (whoever
    /// stopped the run saw only that storage had failed).
    pub fn with_storage_error(self, storage: Option<&StoreReport>) -> Self {
        match (self, storage.and_then(|s| s.error.as_ref())) {
            (Self::StorageFailed(policy), Some(e)) => Self::StorageFailed(format!("{e}; {policy}")),
            (reason, _) => reason,
        }
    }

    /// The storage's own error, when the report holds one, whatever stopped the run first:
    /// for models whose storage failure always ends the run (the event builder, the SW ROD).
    pub fn unless_storage_failed(self, storage_error: Option<String>) -> Self {
        storage_error.map_or(self, Self::StorageFailed)
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Duration => f.write_str("duration reached"),
            Self::Interrupted => f.write_str("interrupted"),
            Self::AllLinksEnded => f.write_str("every link ended"),
            Self::InputEnded => {
                f.write_str("the input ended (max_events, or the end of its files)")
            }
            Self::StorageFailed(e) => write!(f, "storage failed: {e}"),
            Self::AppFailed(e) => f.write_str(e),
        }
    }
}

/// How one application of a multi-process run ended.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct AppOutcome {
    pub name: String,
    pub kind: String,
    pub host: String,
    /// Exited cleanly having sent its report.
    pub reported: bool,
    /// How it ended when it did not: the exit status or signal, or why it was not started.
    pub failure: Option<String>,
    pub log: std::path::PathBuf,
}

/// The summary's line on what dead application `unit` ("builder unit 0", "HLT 1") left on
/// disk: its closed files' events, the files left open, unreadable or holding an event twice.
pub fn read_back_text(unit: &str, left: &Result<LeftOnDisk, String>) -> String {
    let listed = |what: &str, names: &[String]| {
        if names.is_empty() {
            String::new()
        } else {
            format!("; {what}: {}", names.join(", "))
        }
    };
    match left {
        Ok(l) => format!(
            "Read back {unit}: {} events in {} closed files{}{}{}\n",
            l.events.len(),
            l.files,
            listed("left open, not counted written", &l.partial),
            listed("unreadable", &l.unreadable),
            if l.duplicates.is_empty() {
                String::new()
            } else {
                format!("; in two files: {}", number_runs(&l.duplicates))
            },
        ),
        Err(e) => format!(
            "Read back {unit}: cannot read its directory ({e}); its lost events are an upper bound\n"
        ),
    }
}

/// Event numbers, runs of consecutive ones as `a-b`.
pub fn number_runs(events: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &e in events {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == e => *last = e,
            _ => runs.push((e, e)),
        }
    }
    runs.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary's lines on a topology's applications: how each ended (with its log when it
/// failed), and the messages their inboxes refused, by reason.
pub fn apps_text(apps: &[AppOutcome], refused: &BTreeMap<String, u64>) -> String {
    let mut out = String::new();
    for a in apps {
        out += &format!(
            "App       {:<12} {:<6} {}\n",
            a.name,
            a.kind,
            match &a.failure {
                None => "stopped cleanly".to_string(),
                Some(f) => format!("{f} (log {})", a.log.display()),
            }
        );
    }
    if !refused.is_empty() {
        out += &format!("Refused   {refused:?}\n");
    }
    out
}

/// Each thread's CPU use since `before` was read, as a share of one core over `elapsed`.
pub fn cpu_shares(before: &[ThreadStat], elapsed: Duration) -> Vec<(String, f64)> {
    cpu_shares_of(before, read_threads(), elapsed)
}

/// Each of `threads`' CPU use since `before`, as a share of one core over `elapsed`. The
/// main thread is named `main`, and the threads that carry the program's name as it does
/// (no one named them: ZeroMQ's I/O threads, libraries' workers) `unnamed`.
pub fn cpu_shares_of(
    before: &[ThreadStat],
    threads: Vec<ThreadStat>,
    elapsed: Duration,
) -> Vec<(String, f64)> {
    let main = std::process::id();
    let program = threads
        .iter()
        .find(|t| t.tid == main)
        .map(|t| t.name.clone());
    threads
        .into_iter()
        .map(|t| {
            let start = before
                .iter()
                .find(|b| b.tid == t.tid)
                .map_or(0, |b| b.cpu_ticks);
            let seconds = t.cpu_ticks.saturating_sub(start) as f64 / USER_HZ;
            let name = if t.tid == main {
                "main".into()
            } else if Some(&t.name) == program.as_ref() {
                "unnamed".into()
            } else {
                t.name
            };
            (name, seconds / elapsed.as_secs_f64())
        })
        .collect()
}

/// What a dead application (`unit`: "bu", "hlt", ...) left on disk, for a summary's
/// `read_back`, without its event numbers (the summary's `lost_events` holds those it did not
/// write).
pub fn read_back_json(
    unit: (&str, usize),
    reported: bool,
    left: &Result<LeftOnDisk, String>,
) -> serde_json::Value {
    let mut j = serde_json::json!({ unit.0: unit.1, "reported": reported });
    match left {
        Ok(l) => {
            j["events_in_closed_files"] = l.events.len().into();
            j["closed_files"] = l.files.into();
            j["duplicate_events"] = serde_json::json!(l.duplicates);
            j["partial_files"] = serde_json::json!(l.partial);
            j["unreadable_files"] = serde_json::json!(l.unreadable);
        }
        Err(e) => j["error"] = e.as_str().into(),
    }
    j
}
