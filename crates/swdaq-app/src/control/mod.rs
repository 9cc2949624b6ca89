//! Run control: `swdaq serve` keeps the system up between runs behind an HTTP JSON API
//! (`http`), steered through one state machine (`fsm`, `system`); `swdaq ctl` is its
//! client (`client`); both take their routes from `swdaq-control` (the commands, parsed from
//! and turned into requests). Loopback by default; elsewhere only with a bearer token (`auth`).
//!
//! Each start runs the one-process chain (`run::chain`), or with a `[topology]` boots the
//! applications (`apps::launch`), as a new run: its number, its files; each stop answers
//! with the run's summary. Pause and prescale or rate changes reach the running trigger
//! through its input queue (in one process) or the trigger application's stdin, so they take
//! effect between two TP batches.

mod alerts;
pub mod auth;
pub mod client;
mod console;
pub mod display;
pub mod fsm;
mod history;
pub mod http;
mod http_server;
mod journal;
mod metrics;
// INTERIM: replaced by each model's own `Live` at the merge with `reshape`.
mod live_interim;
pub mod system;
mod watch;

use crate::run::config::RunConfig;
use crate::run::stop::{self, StopRequest};
use auth::Token;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use swdaq_control::{Command, TriggerChange};
use system::RunControl;

/// Where `swdaq serve` listens and `swdaq ctl` calls by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (TOML), read again on every configure; keys not in it keep their
    /// built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on; beyond loopback a token is required.
    #[arg(long, default_value = DEFAULT_ADDR)]
    addr: SocketAddr,
    /// File holding the bearer token clients must show (else the SWDAQ_TOKEN environment
    /// variable, if set).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Output directory; overrides `run.output_dir`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Number of emulated links; overrides `emulator.links`.
    #[arg(long)]
    links: Option<u32>,
    /// `/metrics` address of each run, or "" for none; overrides `run.metrics_addr`.
    #[arg(long)]
    metrics: Option<String>,
}

impl ServeArgs {
    /// Loads the configuration as a configure does: the file, then the overrides.
    fn load(&self) -> anyhow::Result<RunConfig> {
        let mut c = match &self.config {
            Some(path) => RunConfig::load(path)?,
            None => RunConfig::default(),
        };
        if let Some(out) = &self.out {
            c.run.output_dir = out.clone();
        }
        if let Some(n) = self.links {
            c.emulator.links = n;
        }
        if let Some(m) = &self.metrics {
            c.run.metrics_addr = m.clone();
        }
        Ok(c)
    }
}

/// `swdaq serve`: serves run control until Ctrl-C or SIGTERM, then stops the run going on.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = Token::load(args.token_file.as_deref())?;
    auth::check_bind(&args.addr, token.as_ref())?;
    if let Some(path) = &args.config
        && crate::evb_run::is_evb_config(path)?
    {
        anyhow::bail!(
            "{}: swdaq serve runs the one-process chain; an [evb] configuration is run with `swdaq run --config`",
            path.display()
        );
    }
    let with_token = token.is_some();
    let stop = Arc::new(StopRequest::default());
    stop::install(Arc::clone(&stop))?;
    let addr = args.addr;
    let control = Arc::new(RunControl::new(Box::new(move || args.load())));
    let server = http::ControlServer::start(addr, token, Arc::clone(&control))?;
    // The one stdout line: where it listens (with the port chosen for port 0).
    println!("swdaq serve: listening on http://{}", server.addr());
    std::io::stdout().flush()?;
    eprintln!(
        "swdaq serve: {}; POST /configure, then /start; Ctrl-C or SIGTERM ends it",
        if with_token {
            "clients must show the bearer token"
        } else {
            "loopback only, no token"
        }
    );
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
    /// File holding the bearer token (else the SWDAQ_TOKEN environment variable, if set).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(clap::Subcommand)]
enum CtlCommand {
    /// The state alone.
    State,
    /// The state, the run going on with its live figures, the last run's summary.
    Status,
    /// Load the configuration (again).
    Configure,
    /// Start a run; without --run, the last run's number + 1.
    Start {
        #[arg(long)]
        run: Option<u32>,
    },
    /// Stop the run; prints its summary.
    Stop,
    /// Triggers off, readout on.
    Pause,
    Resume,
    /// Change a trigger source's prescale or rate (also for the runs after this one).
    #[command(alias = "prescale")]
    Trigger {
        /// multiplicity, adc_sum, track, periodic or random.
        source: String,
        #[arg(long)]
        prescale: Option<u32>,
        #[arg(long)]
        rate_hz: Option<f64>,
    },
    /// Record every link's latency buffer and the next seconds of data to raw files
    /// (`[recording]` must be on).
    Record {
        /// Data time after the request; default `recording.seconds_after`.
        #[arg(long)]
        seconds: Option<f64>,
    },
}

/// `swdaq ctl`: one request; prints the JSON answer, fails with the server's message on a
/// 4xx or 5xx.
pub fn ctl(args: &CtlArgs) -> anyhow::Result<()> {
    let token =
        match &args.token_file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read the token file {}: {e}", path.display())
            })?),
            None => std::env::var(auth::TOKEN_ENV).ok(),
        };
    let client = client::Client::new(&args.addr, token.as_deref());
    let command = match &args.command {
        CtlCommand::State => Command::State,
        CtlCommand::Status => Command::Status,
        CtlCommand::Configure => Command::Configure,
        CtlCommand::Start { run } => Command::Start { run_number: *run },
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
    };
    let answer = client.send(&command)?;
    let body = answer.into_result()?;
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(())
}
