//! Run control: `swdaq serve` keeps the system up between runs behind an HTTP JSON API
//! (`http`), steered through one state machine (`fsm`, `system`); `swdaq ctl` is its
//! client (`client`); both take their routes from `swdaq-control` (the commands, parsed from
//! and turned into requests). Every request must pass the guard (`guard`: its `Host`, its
//! `Origin`, JSON bodies) and show the bearer token (`auth`): the operator's, or one the
//! server makes and keeps for `swdaq ctl` and prints in the console's URL.
//!
//! Each start runs the configured model (`Configured::run`: in one process, or with a
//! `[topology]` as applications) as a new run: its number, its files; each stop answers
//! with the run's summary. Pause and prescale or rate changes reach the running trigger
//! where the model has one (the chain's: its input queue or the trigger application's stdin,
//! between two TP batches; the SW ROD's: its cards' L1 accepts); a command the model does
//! not have is refused naming the model.

mod alerts;
pub mod auth;
pub mod client;
mod console;
pub mod fsm;
mod guard;
mod history;
pub mod http;
mod http_server;
mod journal;
mod metrics;
mod published_dqm;
mod run_thread;
pub mod system;
mod watch;

use crate::models;
use crate::runtime::model::{Configured, Overrides};
use crate::runtime::stop::{self, StopRequest};
use auth::Token;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use swdaq_control::{Command, LogEntry, TriggerChange};
use system::RunControl;

/// Where `swdaq serve` listens and `swdaq ctl` calls by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (TOML) of any model, read again on every configure; keys not in it
    /// keep their built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on; beyond loopback a token must be given.
    #[arg(long, default_value = DEFAULT_ADDR)]
    addr: SocketAddr,
    /// File holding the bearer token clients must show (else the SWDAQ_TOKEN environment
    /// variable, if set; else one made and kept in $XDG_RUNTIME_DIR/swdaq/serve-PORT.token,
    /// where `swdaq ctl` finds it).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// A host name clients may reach the server by, besides localhost and the address it
    /// listens on (the `Host` of every request is checked); may be given again.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// The flags `swdaq run` has, applied on every configure (`--duration`: each run's).
    #[command(flatten)]
    overrides: Overrides,
}

impl ServeArgs {
    /// Loads the configuration as a configure does: the file, then the flags.
    fn load(&self) -> anyhow::Result<Box<dyn Configured>> {
        let mut c = models::load(self.config.as_deref())?;
        c.apply(&self.overrides)?;
        Ok(c)
    }
}

/// `swdaq serve`: serves run control until Ctrl-C or SIGTERM, then stops the run going on.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let given = Token::load(args.token_file.as_deref())?;
    auth::check_bind(&args.addr, given.as_ref())?;
    let listener = TcpListener::bind(args.addr)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.addr))?;
    let addr = listener.local_addr()?;
    // A token is made only now: it is kept by the port, which port 0 leaves to the system.
    let (token, console_url, token_note) = match given {
        Some(token) => (
            token,
            format!("http://{addr}/"),
            "clients must show the bearer token given".to_string(),
        ),
        None => {
            let (token, text, kept) = Token::kept_for(addr.port())?;
            (
                token,
                format!("http://{addr}/#token={text}"),
                format!(
                    "clients must show the bearer token kept in {} (swdaq ctl reads it there)",
                    kept.display()
                ),
            )
        }
    };
    let stop = Arc::new(StopRequest::default());
    stop::install(Arc::clone(&stop))?;
    let guard = guard::Guard::new(addr, &args.allow_hosts);
    let control = Arc::new(RunControl::new(Box::new(move || args.load())));
    let server = http::ControlServer::start(listener, token, guard, Arc::clone(&control))?;
    // The stdout lines: where it listens (with the port chosen for port 0), then the
    // console's address, with the token it made (the page keeps it and drops it from the
    // address bar).
    println!("swdaq serve: listening on http://{addr}");
    println!("swdaq serve: console {console_url}");
    std::io::stdout().flush()?;
    eprintln!("swdaq serve: {token_note}; POST /configure, then /start; Ctrl-C or SIGTERM ends it");
    while !stop.is_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
    control.shut_down("signal");
    server.stop();
    Ok(())
}

#[derive(clap::Args)]
pub struct CtlArgs {
    /// The server's address.
    #[arg(long, default_value = DEFAULT_ADDR)]
    addr: String,
    /// File holding the bearer token (else the SWDAQ_TOKEN environment variable, if set;
    /// else the token a server on that port made, where it keeps it).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(clap::Subcommand)]
enum CtlCommand {
    /// The state alone.
    State,
    /// The state, the model, the commands legal now, the run going on with its live
    /// figures, the last run's summary.
    Status,
    /// Load the configuration (again).
    Configure,
    /// Start a run; without --run, the next number free in the model's output directories.
    Start {
        /// Run number (refused if that run already has files).
        #[arg(long)]
        run: Option<u32>,
        /// Confirms a run number far beyond the last run (refused without: every number
        /// after it is used up for this output directory).
        #[arg(long, requires = "run")]
        confirm_jump: bool,
    },
    /// Stop the run; prints its summary.
    Stop,
    /// Triggers off, readout on (the chain's trigger; the SW ROD's L1 accepts).
    Pause,
    /// Triggers on again.
    Resume,
    /// Change a trigger source's prescale or rate, also for the runs after this one (the
    /// chain's trigger sources).
    #[command(alias = "prescale")]
    Trigger {
        /// multiplicity, adc_sum, track, periodic or random.
        source: String,
        /// Keep one candidate in this many.
        #[arg(long)]
        prescale: Option<u32>,
        /// Rate in Hz (periodic and random only).
        #[arg(long)]
        rate_hz: Option<f64>,
    },
    /// Record every link's latency buffer and the next seconds of data to raw files (the
    /// chain, with `[recording]` on).
    Record {
        /// Data time after the request; default `recording.seconds_after`.
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Add an entry to the run's logbook in the run registry (`swdaq runs show N` lists it).
    Log {
        /// The entry.
        text: String,
        /// The run; default the run going on, else the last run.
        #[arg(long)]
        run: Option<u32>,
        /// Who writes it; default this user.
        #[arg(long)]
        author: Option<String>,
    },
}

/// `swdaq ctl`: one request; prints the JSON answer, fails with the server's message on a
/// 4xx or 5xx.
pub fn ctl(args: &CtlArgs) -> anyhow::Result<()> {
    let kept = || {
        let port = args.addr.rsplit_once(':')?.1.parse().ok()?;
        auth::read_kept_token(port)
    };
    let token =
        match &args.token_file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read the token file {}: {e}", path.display())
            })?),
            None => std::env::var(auth::TOKEN_ENV).ok().or_else(kept),
        };
    let client = client::Client::new(&args.addr, token.as_deref());
    let command = match &args.command {
        CtlCommand::State => Command::State,
        CtlCommand::Status => Command::Status,
        CtlCommand::Configure => Command::Configure,
        CtlCommand::Start { run, confirm_jump } => Command::Start {
            run_number: *run,
            confirm_jump: *confirm_jump,
        },
        CtlCommand::Stop => Command::Stop,
        CtlCommand::Pause => Command::Pause,
        CtlCommand::Resume => Command::Resume,
        CtlCommand::Trigger {
            source,
            prescale,
            rate_hz,
        } => Command::ChangeTrigger(TriggerChange {
            trigger: source.clone(),
            prescale: *prescale,
            rate_hz: *rate_hz,
        }),
        CtlCommand::Record { seconds } => Command::Record { seconds: *seconds },
        CtlCommand::Log { text, run, author } => Command::Log(LogEntry {
            text: text.clone(),
            run_number: *run,
            author: Some(author.clone().unwrap_or_else(crate::run_record::os_user)),
        }),
    };
    let answer = client.send(&command)?;
    let body = answer.into_result()?;
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(())
}
