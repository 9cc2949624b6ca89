//! `swdaq run` for any model: the configuration (its model picked by its table), the shared
//! flags, `--print-config`, the run number and the run's row in the registry, the hooks
//! around configure, start and stop (`[run.hooks]`), signals, the start line, the live view,
//! the closing summary (text or JSON) and the exit status.

use crate::live::{LIVE_INTERVAL, Live, line};
use crate::models;
use crate::run_record;
use crate::runtime::model::{Overrides, RunHooks};
use crate::runtime::stop;
use crate::transition_hooks::{Hook, RunFacts, run_between_hooks};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (TOML): its top-level table picks the model (listed below); keys
    /// not in it keep their built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the model's whole effective configuration (TOML, flags applied) and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    overrides: Overrides,
    /// Print the closing summary as JSON (on stdout) instead of text; no live view.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut config = models::load(args.config.as_deref())?;
    config.apply(&args.overrides)?;
    if args.print_config {
        config.validate()?;
        print!("{}", config.to_toml());
        return Ok(());
    }
    // Configuring `swdaq run` is checking the configuration, which its hooks surround.
    let hooks = config.run_section().hooks.clone();
    hooks.validate()?;
    let mut ran = Vec::new();
    hooks.run_refusing(Hook::PreConfigure, &RunFacts::of(&*config, false), &mut ran)?;
    config.validate()?;
    hooks.run_telling(
        Hook::PostConfigure,
        &RunFacts::of(&*config, false),
        &mut ran,
    );
    let claimed = run_record::claim(&*config, None, &run_record::os_user())?;
    for line in &claimed.not_ended {
        eprintln!("swdaq run: {line}");
    }
    let number = claimed.run.number();
    config.set_run_number(number);
    // Refused by its hook, the run is on record as such, with the hook's output.
    if let Err(e) = hooks.run_refusing(Hook::PreStart, &RunFacts::of(&*config, true), &mut ran) {
        let why = e.to_string();
        let first_line = why.lines().next().unwrap_or_default();
        if let Err(e) = claimed.run.finish(Err(first_line.into()), &ran) {
            eprintln!("swdaq run: run {number} is not completed in the run registry: {e:#}");
        }
        return Err(e);
    }
    // Beside the run on its own thread; it sees each of this run's files once it is on record,
    // about a second after its close.
    let transfer = match crate::transfer_section::start_agent(config.run_section(), None) {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("swdaq run: no transfer to permanent storage: {e:#}");
            None
        }
    };
    let stop = Arc::new(stop::StopRequest::default());
    stop::install(Arc::clone(&stop))?;
    eprintln!(
        "swdaq run {number} ({}): {}",
        config.model().name(),
        config.describe()
    );
    let view = TerminalView::new(!args.json, config.status_interval());
    let result = run_between_hooks(&*config, &stop, &view, &mut ran);
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            let _ = claimed.run.finish(Err(format!("{e:#}")), &ran);
            return Err(e);
        }
    };
    // The data is on disk whatever the registry says: a row left incomplete (a full disk
    // under an SQLite registry, a server gone) is told here and named at the next start.
    if let Err(e) = claimed.run.finish(Ok(&*outcome), &ran) {
        eprintln!("swdaq run: run {number} is not completed in the run registry: {e:#}");
    }
    if let Some(agent) = transfer {
        let wait = config
            .run_section()
            .transfer
            .as_ref()
            .map_or(0.0, |t| t.wait_after_run_s);
        finish_transfer(agent, number, Duration::from_secs_f64(wait), &stop);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome.json())?);
    } else {
        print!("{}", outcome.text());
    }
    if let Some(e) = outcome.failure() {
        anyhow::bail!("{e}");
    }
    Ok(())
}

/// Lets the agent transfer the run's files for up to `wait` (a second Ctrl-C cuts it
/// short), then stops it and says what is left.
fn finish_transfer(
    agent: swdaq_transfer::Agent,
    number: u32,
    wait: Duration,
    stop: &stop::StopRequest,
) {
    let deadline = Instant::now() + wait;
    if !wait.is_zero() {
        eprintln!(
            "swdaq run: transferring run {number}'s files (up to {:.0} s)",
            wait.as_secs_f64()
        );
    }
    stop.waiting_for("the transfer of the run's files (a signal more cuts it short)");
    let asked_before = stop.signals();
    while Instant::now() < deadline && stop.signals() == asked_before {
        if agent.wait_empty(Duration::from_millis(500).min(deadline - Instant::now())) {
            break;
        }
    }
    match agent.stop(crate::transfer_section::STOP_WAIT) {
        Ok(s) => {
            let b = &s.backlog;
            let mut line = format!(
                "swdaq run: transfer: {} file(s) verified at the destination; backlog {} file(s), {} bytes, {} failing",
                s.verified, b.files, b.bytes, b.failed
            );
            if s.corrupt_found > 0 {
                line += &format!(
                    "; {} corrupted copies found at the destination and replaced",
                    s.corrupt_found
                );
            }
            if b.files > 0 {
                line += "; `swdaq transfer` catches it up";
                if let Some(e) = &s.last_error {
                    line += &format!("; last error: {e}");
                }
            }
            eprintln!("{line}");
        }
        Err(e) => eprintln!("swdaq run: {e}"),
    }
}

/// The live view on stderr: a table redrawn in place on a terminal (figures, then every
/// source, bad ones first), one line per status interval otherwise; nothing with `--json`.
struct TerminalView {
    shown: bool,
    terminal: bool,
    /// Printed at most this often, whatever the live interval.
    every: Duration,
    /// When it was last printed, and the lines drawn then (a terminal's table is redrawn).
    printed: Mutex<(Option<Instant>, usize)>,
}

/// Source rows a redrawn table shows at most (bad ones come first).
const TABLE_ROWS: usize = 16;

impl TerminalView {
    fn new(shown: bool, every: Duration) -> Self {
        Self {
            shown,
            terminal: std::io::stderr().is_terminal(),
            every,
            printed: Mutex::new((None, 0)),
        }
    }

    fn table(live: &Live) -> String {
        let mut text = format!("{}\n", line(live));
        if !live.sources.is_empty() {
            text += " source                 rate/s      MB/s   errors    drops\n";
        }
        for r in live.sources.iter().take(TABLE_ROWS) {
            text += &format!(
                " {:<18} {:>10.0} {:>9} {:>8} {:>8}{}\n",
                r.name,
                r.rate_hz,
                r.mb_s.map_or("-".into(), |m| format!("{m:.1}")),
                r.errors,
                r.drops,
                r.why.as_deref().map_or(String::new(), |w| format!("  {w}")),
            );
        }
        for a in &live.apps {
            text += &format!(" app {:<14} {:<8} {}\n", a.name, a.kind, a.state);
        }
        text
    }
}

impl RunHooks for TerminalView {
    fn live(&self, live: &Live) {
        if !self.shown {
            return;
        }
        let mut printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        let (last, drawn) = &mut *printed;
        // Half an interval's slack, so that a second's prints stay a second apart.
        let due = self.every.saturating_sub(LIVE_INTERVAL / 2);
        if last.is_some_and(|t| t.elapsed() < due) {
            return;
        }
        *last = Some(Instant::now());
        let mut out = std::io::stderr().lock();
        if !self.terminal {
            let _ = writeln!(out, "{}", line(live));
            return;
        }
        let text = Self::table(live);
        if *drawn > 0 {
            // Back over the previous table, and clear it.
            let _ = write!(out, "\x1b[{}A\x1b[J", *drawn);
        }
        *drawn = text.lines().count();
        let _ = write!(out, "{text}");
        let _ = out.flush();
    }
}
