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
//! The CMS-style event builder runs as applications the same way ([`evb`]: `evm`, `ru`, `bu`).

use crate::models::chain::apps::{builder, dfo, readout, trigger};
use crate::models::chain::config::RunConfig;
use crate::models::chain::system::RunReport;
use crate::models::evb::EvbRunConfig;
use crate::models::evb::apps as evb;
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::cpu_shares;
use crate::runtime::stdio::{self as control, Commands};
use crate::runtime::topology::{App, AppKind, TopologySection};
use anyhow::{Context, anyhow};
use std::time::{Duration, Instant};
use swdaq_monitor::proc::{ThreadStat, read_threads};
use swdaq_net::{AppId, Heartbeat, Inlet, Message, NetOptions, Outlet};

/// A run configuration that carries a `[topology]`: the chain's or the event builder's.
pub trait TopologyConfig {
    fn topology(&self) -> &TopologySection;
}

impl TopologyConfig for RunConfig {
    fn topology(&self) -> &TopologySection {
        &self.topology
    }
}

impl TopologyConfig for EvbRunConfig {
    fn topology(&self) -> &TopologySection {
        &self.topology
    }
}

/// What every application has: its (validated) configuration, its place in the topology, its
/// sockets' context and the launcher's commands.
pub struct AppContext<C = RunConfig> {
    pub config: C,
    pub me: AppId,
    pub spec: App,
    pub zmq: zmq::Context,
    pub options: NetOptions,
    pub commands: Commands,
}

impl<C: TopologyConfig> AppContext<C> {
    pub fn new(config: C, name: &str, commands: Commands) -> anyhow::Result<Self> {
        let (me, spec) = config
            .topology()
            .find(name)
            .ok_or_else(|| anyhow!("no application {name:?} in topology.apps"))?;
        let t = config.topology();
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

    /// Binds this application's inbox, which takes messages from the topology's applications
    /// only (ids `0..apps`); anything else is refused and counted in the report.
    pub fn bind_inbox(&self) -> anyhow::Result<Inlet> {
        let apps = self.config.topology().apps.len() as AppId;
        Ok(Inlet::bind(&self.zmq, &self.spec.address)
            .with_context(|| format!("{}: inbox", self.spec.name))?
            .admitting(0..apps))
    }

    /// An outlet to the inbox of application `peer`.
    pub fn outlet_to(&self, peer: u32) -> anyhow::Result<Outlet> {
        let app = &self.config.topology().apps[peer as usize];
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
            Instant::now() + Duration::from_secs_f64(self.config.topology().start_timeout_s);
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
        Duration::from_millis(self.config.topology().heartbeat_ms)
    }

    pub fn peer_timeout(&self) -> Duration {
        Duration::from_millis(self.config.topology().peer_timeout_ms)
    }

    /// The applications of `kind`, in topology order.
    pub fn ids_of(&self, kind: AppKind) -> Vec<u32> {
        self.config
            .topology()
            .of_kind(kind)
            .map(|(id, _)| id)
            .collect()
    }

    /// Writes who this is to its log.
    fn announce(&self) {
        eprintln!(
            "swdaq app {} ({}): pid {}, inbox {}",
            self.spec.name,
            self.spec.kind.name(),
            std::process::id(),
            self.spec.address
        );
    }
}

impl AppContext<RunConfig> {
    /// This application's monitoring, with `/metrics` where its entry asks for it.
    pub fn monitoring(&self) -> anyhow::Result<Monitoring> {
        let key = format!("topology.apps.metrics_addr ({})", self.spec.name);
        Monitoring::for_status(self.config.status_interval(), &self.spec.metrics_addr, &key)
    }

    /// The builders, in topology order: a builder's index here is its element id.
    pub fn builders(&self) -> Vec<u32> {
        self.ids_of(AppKind::Builder)
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
    let text = match &args.config {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?,
        None => control::read_config_text(&mut stdin)?,
    };
    let commands = Commands::spawn(stdin)?;
    if crate::models::evb::is_evb_text(&text)? {
        let ctx = AppContext::new(crate::models::evb::parse(&text)?, &args.name, commands)?;
        ctx.announce();
        control::send_report(&evb::run(&ctx)?)?;
        eprintln!("swdaq app {}: done", ctx.spec.name);
        return Ok(());
    }
    let config = RunConfig::parse(&text)?;
    config.validate()?;
    let ctx = AppContext::new(config, &args.name, commands)?;
    ctx.announce();
    let report = match ctx.spec.kind {
        AppKind::Readout => readout::run(&ctx)?,
        AppKind::Trigger => trigger::run(&ctx)?,
        AppKind::Dfo => dfo::run(&ctx)?,
        AppKind::Builder => builder::run(&ctx)?,
        kind => anyhow::bail!(
            "{}: {} applications belong to an event-builder run (a configuration with [evb])",
            ctx.spec.name,
            kind.name()
        ),
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
        (report.seconds, report.thread_cpu) = self.cpu(app);
    }

    /// Seconds since `start`, and each thread's CPU share since, named `app/thread`.
    pub fn cpu(&self, app: &str) -> (f64, Vec<(String, f64)>) {
        let elapsed = self.started.elapsed();
        let shares = cpu_shares(&self.threads, elapsed)
            .into_iter()
            .map(|(thread, share)| (format!("{app}/{thread}"), share))
            .collect();
        (elapsed.as_secs_f64(), shares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, kind: AppKind) -> App {
        App {
            name: name.into(),
            kind,
            host: String::new(),
            address: "tcp://127.0.0.1:0".into(),
            links: Vec::new(),
            record_stream: String::new(),
            record_stream_every: 1,
            metrics_addr: String::new(),
        }
    }

    #[test]
    fn an_inbox_refuses_a_sender_outside_the_topology_and_counts_it_for_the_report() {
        let mut config = RunConfig::default();
        config.topology.apps = vec![app("trigger", AppKind::Trigger), app("dfo", AppKind::Dfo)];
        let context = AppContext::new(
            config,
            "trigger",
            Commands::spawn(std::io::empty()).unwrap(),
        )
        .unwrap();
        let mut inbox = context.bind_inbox().unwrap();
        let stranger =
            Outlet::connect(&context.zmq, inbox.endpoint(), 2, &context.options).unwrap();
        let dfo = Outlet::connect(&context.zmq, inbox.endpoint(), 1, &context.options).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        // Sends are refused until the connection is made (`connect_and_heartbeat`).
        while stranger.send(&Message::Heartbeat).is_err() && Instant::now() < deadline {}
        stranger.send(&Message::End).unwrap();
        while inbox.counts().refused.get("unknown_sender") != Some(&2) && Instant::now() < deadline
        {
            inbox.receive(Duration::from_millis(50));
        }
        dfo.send(&Message::End).unwrap();
        let delivery = inbox.receive(Duration::from_secs(5)).unwrap();
        assert_eq!((delivery.sender, delivery.message), (1, Message::End));
        assert_eq!(inbox.counts().refused.get("unknown_sender"), Some(&2));
        assert_eq!(inbox.last_seen(2), None);
    }
}
