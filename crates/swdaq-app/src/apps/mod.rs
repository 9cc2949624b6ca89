//! The chain's applications, one process each, talking over ZeroMQ (`swdaq-net`):
//!
//! ```text
//!  readout-K ──TPs, link ends──────────────────────▶ trigger ──decisions──▶ dfo
//!     ▲  └──fragments──▶ builder-B ◀──decisions─────────────────────────────┘ │
//!     └────requests──────┘   └──builder credits, records done──▶ dfo ──credits──▶ trigger
//! ```
//!
//! Every application binds one inbox at its `address` and connects one outlet to the inbox of
//! each peer it sends to; every outlet carries heartbeats. `swdaq run` (`launch`) starts them
//! with the run's configuration on stdin and drives them with `start` / `stop` (`control`).

pub mod builder;
pub mod control;
pub mod dfo;
pub mod launch;
pub mod readout;
pub mod trigger;

use crate::run::chain::{Monitoring, RunReport, cpu_shares};
use crate::run::config::RunConfig;
use crate::run::topology::{App, AppKind};
use anyhow::{Context, anyhow};
use control::Commands;
use std::time::{Duration, Instant};
use swdaq_monitor::proc::{ThreadStat, read_threads};
use swdaq_net::{AppId, Heartbeat, Inlet, Message, NetOptions, Outlet};

/// What every application has: its configuration, its place in the topology, its sockets'
/// context and the launcher's commands.
pub struct AppContext {
    pub config: RunConfig,
    pub me: AppId,
    pub spec: App,
    pub zmq: zmq::Context,
    pub options: NetOptions,
    pub commands: Commands,
}

impl AppContext {
    pub fn new(config: RunConfig, name: &str, commands: Commands) -> anyhow::Result<Self> {
        config.validate()?;
        let (me, spec) = config
            .topology
            .find(name)
            .ok_or_else(|| anyhow!("no application {name:?} in topology.apps"))?;
        let t = &config.topology;
        let options = NetOptions {
            send_timeout: Duration::from_millis(t.send_timeout_ms),
            ..Default::default()
        };
        Ok(Self {
            spec: spec.clone(),
            me,
            config,
            zmq: zmq::Context::new(),
            options,
            commands,
        })
    }

    pub fn bind_inbox(&self) -> anyhow::Result<Inlet> {
        Inlet::bind(&self.zmq, &self.spec.address)
            .with_context(|| format!("{}: inbox", self.spec.name))
    }

    /// An outlet to the inbox of application `peer`.
    pub fn outlet_to(&self, peer: u32) -> anyhow::Result<Outlet> {
        let app = &self.config.topology.apps[peer as usize];
        Ok(Outlet::connect(
            &self.zmq,
            &app.address,
            self.me,
            &self.options,
        )?)
    }

    /// Outlets to each of `peers`, in order.
    pub fn outlets_to(&self, peers: &[u32]) -> anyhow::Result<Vec<Outlet>> {
        peers.iter().map(|&p| self.outlet_to(p)).collect()
    }

    /// Waits until every outlet has a connection to its peer (so the first real message is
    /// not refused for a connection still being made: "ready" means reachable), then keeps
    /// them alive with heartbeats. Fails naming the peer after `topology.start_timeout_s`.
    pub fn connect_and_heartbeat(&self, outlets: Vec<Outlet>) -> anyhow::Result<Heartbeat> {
        let deadline =
            Instant::now() + Duration::from_secs_f64(self.config.topology.start_timeout_s);
        for o in &outlets {
            // With "queue only for connected peers", a blocking send succeeds once connected.
            while o.send(&Message::Heartbeat).is_err() {
                if Instant::now() >= deadline {
                    anyhow::bail!("{}: cannot reach {}", self.spec.name, o.endpoint());
                }
            }
        }
        Ok(Heartbeat::start(outlets, self.heartbeat_every())?)
    }

    pub fn heartbeat_every(&self) -> Duration {
        Duration::from_millis(self.config.topology.heartbeat_ms)
    }

    pub fn peer_timeout(&self) -> Duration {
        Duration::from_millis(self.config.topology.peer_timeout_ms)
    }

    /// This application's monitoring, with `/metrics` where its entry asks for it.
    pub fn monitoring(&self) -> anyhow::Result<Monitoring> {
        let key = format!("topology.apps.metrics_addr ({})", self.spec.name);
        Monitoring::serving(&self.config, &self.spec.metrics_addr, &key)
    }

    /// The builders, in topology order: a builder's index here is its element id.
    pub fn builders(&self) -> Vec<u32> {
        self.config
            .topology
            .of_kind(AppKind::Builder)
            .map(|(id, _)| id)
            .collect()
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// The application's name in `[[topology.apps]]`.
    #[arg(long)]
    name: String,
    /// Read the configuration from this file instead of from the launcher on stdin (to run
    /// an application by hand; commands still come on stdin: `start`, `stop`).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

/// Runs one application of the configuration read from stdin (or `--config`), driven by the
/// launcher's commands on stdin; its report goes to stdout.
pub fn run_app(args: &Args) -> anyhow::Result<()> {
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let config = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => control::read_config(&mut stdin)?,
    };
    let ctx = AppContext::new(config, &args.name, Commands::spawn(stdin)?)?;
    eprintln!(
        "swdaq app {} ({}): pid {}, inbox {}",
        ctx.spec.name,
        ctx.spec.kind.name(),
        std::process::id(),
        ctx.spec.address
    );
    let report = match ctx.spec.kind {
        AppKind::Readout => readout::run(&ctx)?,
        AppKind::Trigger => trigger::run(&ctx)?,
        AppKind::Dfo => dfo::run(&ctx)?,
        AppKind::Builder => builder::run(&ctx)?,
    };
    control::send_report(&report)?;
    eprintln!("swdaq app {}: done", ctx.spec.name);
    Ok(())
}

/// Measures the time and each thread's CPU from `start` on, for an application's report.
pub struct Clock {
    started: Instant,
    threads: Vec<ThreadStat>,
}

impl Clock {
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            threads: read_threads(),
        }
    }

    /// Fills the report's duration and its threads' CPU shares, named `app/thread`.
    pub fn finish(&self, app: &str, report: &mut RunReport) {
        let elapsed = self.started.elapsed();
        report.seconds = elapsed.as_secs_f64();
        report.thread_cpu = cpu_shares(&self.threads, elapsed)
            .into_iter()
            .map(|(thread, share)| (format!("{app}/{thread}"), share))
            .collect();
    }
}
