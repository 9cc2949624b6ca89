//! The launcher's applications as child processes: each started through its host's
//! launcher prefix with the configuration on stdin, its stdout read into events (ready, live
//! figures, storage failed, report), told commands, and stopped stage by stage.

use super::live_feed::LiveSeries;
use super::outcome::AppOutcome;
use super::stdio::{self as control, Event};
use super::stop::StopRequest;
use super::topology::App;
use anyhow::Context;
use crossbeam_channel::{Receiver, Sender};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// One running application.
pub(super) struct Running {
    pub(super) outcome: AppOutcome,
    pub(super) kind: String,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) ready: bool,
    pub(super) report: Option<Vec<u8>>,
    /// Its latest live series, and when they came.
    pub(super) live: Option<(Vec<LiveSeries>, Instant)>,
    /// Why its storage failed, when it said so (the run then stops).
    pub(super) storage_failed: Option<String>,
    /// It said its input has ended (the run then stops).
    pub(super) input_ended: bool,
    /// The trigger said where its pause begins (event, pause number), not yet passed on.
    pub(super) paused_from: Option<(u64, u64)>,
    /// Set when it exited before it was told to stop.
    pub(super) died: bool,
}

impl Running {
    pub(super) fn command(&mut self, line: &str) {
        if let Some(stdin) = &mut self.stdin
            && writeln!(stdin, "{line}")
                .and_then(|()| stdin.flush())
                .is_err()
        {
            self.stdin = None;
        }
    }

    /// Whether the process has ended (and how, if it failed).
    pub(super) fn poll_exit(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() && self.outcome.failure.is_none() {
                    self.outcome.failure = Some(describe(status));
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.outcome.failure = Some(format!("cannot wait for it: {e}"));
                true
            }
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// Starts `app` through its host's `launcher` prefix with `toml` on its stdin and its log in
/// `logs`; its stdout's events come to `events` tagged with `index`.
pub(super) fn spawn(
    app: &App,
    launcher: &[String],
    exe: &Path,
    (toml, logs): (&str, &Path),
    index: usize,
    events: Sender<(usize, anyhow::Result<Event>)>,
) -> anyhow::Result<Running> {
    let log_path = logs.join(format!("{}.log", app.name));
    let log = swdaq_format::run_files::create_new(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut argv: Vec<String> = launcher.to_vec();
    argv.push(exe.display().to_string());
    argv.extend(["app".into(), "--name".into(), app.name.clone()]);
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    // Its own process group: a Ctrl-C at the terminal reaches only `swdaq run`, which then
    // stops the applications in order.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {:?}", argv.join(" ")))?;
    eprintln!(
        "swdaq run: {} ({}) started as pid {}{}",
        app.name,
        app.kind,
        child.id(),
        if app.host.is_empty() {
            String::new()
        } else {
            format!(" on {}", app.host)
        }
    );
    let mut stdin = child.stdin.take().expect("piped");
    write!(stdin, "config {}\n{toml}", toml.len())?;
    stdin.flush()?;
    let stdout = child.stdout.take().expect("piped");
    std::thread::Builder::new()
        .name(format!("watch-{}", app.name))
        .spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(event) = control::parse_event(&line)
                    && events.send((index, event)).is_err()
                {
                    break;
                }
            }
        })?;
    Ok(Running {
        outcome: AppOutcome {
            name: app.name.clone(),
            kind: app.kind.clone(),
            host: app.host.clone(),
            reported: false,
            failure: None,
            log: log_path,
        },
        kind: app.kind.clone(),
        child,
        stdin: Some(stdin),
        ready: false,
        report: None,
        live: None,
        storage_failed: None,
        input_ended: false,
        paused_from: None,
        died: false,
    })
}

pub(super) fn take_event(apps: &mut [Running], (index, event): (usize, anyhow::Result<Event>)) {
    let a = &mut apps[index];
    match event {
        Ok(Event::Ready) => a.ready = true,
        // Undecodable figures are left out of the live view, not fatal.
        Ok(Event::Live(l)) => {
            if let Ok(series) = postcard::from_bytes(&l) {
                a.live = Some((series, Instant::now()));
            }
        }
        Ok(Event::StorageFailed(why)) => a.storage_failed = Some(why),
        Ok(Event::InputEnded) => a.input_ended = true,
        Ok(Event::PausedFrom { event, pause }) => a.paused_from = Some((event, pause)),
        Ok(Event::Report(r)) => {
            a.report = Some(r);
            a.outcome.reported = true;
        }
        Err(e) => a.outcome.failure = Some(format!("{e:#}")),
    }
}

/// Tells every application of `kind` to stop and waits for each to end (killing one that
/// outlives `timeout`), taking their reports.
pub(super) fn stop_stage(
    apps: &mut [Running],
    kind: &str,
    events: &Receiver<(usize, anyhow::Result<Event>)>,
    timeout: Duration,
    stop: &StopRequest,
) {
    let names: Vec<&str> = apps
        .iter()
        .filter(|a| a.kind == kind && !a.died)
        .map(|a| a.outcome.name.as_str())
        .collect();
    if !names.is_empty() {
        eprintln!("swdaq run: stopping {}", names.join(", "));
        stop.waiting_for(format!("{} to finish", names.join(", ")));
    }
    for a in apps.iter_mut().filter(|a| a.kind == kind) {
        a.command("stop");
    }
    let deadline = Instant::now() + timeout;
    loop {
        while let Ok(e) = events.try_recv() {
            take_event(apps, e);
        }
        let mut waiting = false;
        for a in apps.iter_mut().filter(|a| a.kind == kind && !a.died) {
            if a.poll_exit() {
                a.died = true;
            } else if Instant::now() >= deadline {
                eprintln!(
                    "swdaq run: {} did not stop within {timeout:?}: killing it",
                    a.outcome.name
                );
                let _ = a.child.kill();
                let _ = a.child.wait();
                a.died = true;
                a.outcome.failure = Some(format!("killed: did not stop within {timeout:?}"));
            } else {
                waiting = true;
            }
        }
        if !waiting {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The report line comes before the exit; take what the watcher threads still hold.
    let settle = Instant::now() + Duration::from_millis(500);
    while apps
        .iter()
        .any(|a| a.kind == kind && a.outcome.failure.is_none() && !a.outcome.reported)
        && Instant::now() < settle
    {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(20)) {
            take_event(apps, e);
        }
    }
    for a in apps.iter_mut().filter(|a| a.kind == kind) {
        a.stdin = None;
        if !a.outcome.reported && a.outcome.failure.is_none() {
            a.outcome.failure = Some("ended without a report".into());
        }
    }
}

/// Stops whatever was started (start-up failed): end of input, then kill after `timeout`.
pub(super) fn stop_all(apps: &mut [Running], timeout: Duration) {
    for a in apps.iter_mut() {
        a.stdin = None;
    }
    let deadline = Instant::now() + timeout;
    for a in apps.iter_mut() {
        while !a.poll_exit() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !a.poll_exit() {
            let _ = a.child.kill();
            let _ = a.child.wait();
        }
    }
}
