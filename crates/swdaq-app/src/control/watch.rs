//! What run control keeps for the operator's console beside the state machine: the history
//! of the live series, the journal of what happened, the alerts; fed by state changes,
//! refusals and each status interval's live figures, read by `/status` and `/history`.

use super::alerts::{self, Alerts, Origin};
use super::fsm::{Event, State};
use super::history::History;
use super::journal::{Journal, Level, unix_seconds};
use crate::stored;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub struct Watch {
    pub history: History,
    journal: Journal,
    alerts: Alerts,
    /// When this server started: a console seeing it change knows the server restarted.
    started_at: SystemTime,
}

impl Default for Watch {
    fn default() -> Self {
        Self {
            history: History::default(),
            journal: Journal::default(),
            alerts: Alerts::default(),
            started_at: SystemTime::now(),
        }
    }
}

impl Watch {
    /// A state change (already carried out).
    pub fn transition(&mut self, who: &str, event: Event, from: State, to: State, detail: &str) {
        let level = match event {
            Event::Failed | Event::ConfigureFailed => Level::Error,
            Event::StartRefused => Level::Warning,
            _ => Level::Info,
        };
        self.journal.add(
            level,
            format!("{who}: {event:?}: {} -> {}{detail}", from.name(), to.name()),
        );
    }

    /// A command refused by run control (an illegal transition, a bad argument, ...).
    pub fn refused(&mut self, who: &str, what: &str, why: &str) {
        self.journal
            .add(Level::Warning, format!("{who}: {what} refused: {why}"));
    }

    /// Run `run_number`'s live figures of one status interval (the `Live` schema).
    pub fn live(&mut self, run_number: u32, live: &Value) {
        let now = unix_seconds(SystemTime::now());
        self.history.add(now, run_number, live);
        self.alerts
            .update(Origin::Live, now, alerts::of_live(live), &mut self.journal);
    }

    /// The run's Bad histograms now, (name, why) worst first.
    pub fn data_quality(&mut self, bad: &[(String, String)]) {
        let now = unix_seconds(SystemTime::now());
        self.alerts
            .update(Origin::Dqm, now, alerts::of_dqm(bad), &mut self.journal);
    }

    /// The run has ended: its live and data-quality conditions are over; `failed` says why it
    /// failed, if it did.
    pub fn run_over(&mut self, failed: Option<&str>) {
        self.alerts.end(Origin::Live, &mut self.journal);
        self.alerts.end(Origin::Dqm, &mut self.journal);
        self.state_fault(failed);
    }

    /// Whether the system is in `error` and why (cleared by a configure that works).
    pub fn state_fault(&mut self, failed: Option<&str>) {
        let now = unix_seconds(SystemTime::now());
        self.alerts.update(
            Origin::State,
            now,
            alerts::of_state(failed),
            &mut self.journal,
        );
    }

    /// The console's part of `/status`: the journal, the alerts, the output disks, the files
    /// of the runs named in `runs` (the one going on and the one before) in `dirs`, and when
    /// the server started. `transfer_failing`: the conditions of the transfer beside run
    /// control (`alerts::of_transfer`).
    pub fn status(
        &mut self,
        dirs: &[PathBuf],
        runs: &[u32],
        transfer_failing: Vec<alerts::Condition>,
    ) -> Value {
        let disks = alerts::disks(dirs);
        let now = unix_seconds(SystemTime::now());
        self.alerts.update(
            Origin::Disk,
            now,
            alerts::of_disks(&disks),
            &mut self.journal,
        );
        self.alerts
            .update(Origin::Transfer, now, transfer_failing, &mut self.journal);
        json!({
            "journal": self.journal.to_json(),
            "alerts": self.alerts.to_json(),
            "disks": disks.iter().map(|(dir, available, total)| json!({
                "path": dir, "available_bytes": available, "total_bytes": total,
            })).collect::<Vec<_>>(),
            "files": runs.iter().map(|&run| files_of_run(dirs, run)).collect::<Vec<_>>(),
            "server": {
                "started_at": humantime::format_rfc3339_millis(self.started_at).to_string(),
            },
        })
    }
}

/// Files of a run listed by name; the rest are counted (an event builder writes hundreds).
const FILES_LISTED: usize = 20;

/// Run `run`'s files in `dirs` (those in its directories too): how many, their bytes, and
/// the last [`FILES_LISTED`] by name with their sizes.
fn files_of_run(dirs: &[PathBuf], run: u32) -> Value {
    let files = stored::files_of_run(dirs, run);
    let sizes: Vec<Option<u64>> = files.iter().map(|f| size(f)).collect();
    let listed = files.len().saturating_sub(FILES_LISTED);
    json!({
        "run_number": run,
        "count": files.len(),
        "bytes": sizes.iter().flatten().sum::<u64>(),
        "files": files[listed..].iter().zip(&sizes[listed..]).map(|(path, bytes)| json!({
            "path": path, "bytes": bytes,
        })).collect::<Vec<_>>(),
    })
}

fn size(path: &Path) -> Option<u64> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}
