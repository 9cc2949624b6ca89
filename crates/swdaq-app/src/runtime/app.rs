//! One application of a multi-process run (`swdaq app --name NAME`), whatever the model:
//! what every application has (`AppContext`: its configuration, place in the topology,
//! sockets and the launcher's commands) and how its CPU is measured.
//!
//! Every application binds one inbox at its `address` and connects one outlet to the inbox of
//! each peer it sends to; every outlet carries heartbeats. `swdaq run` (`runtime::launch`)
//! starts them with the run's configuration on stdin and drives them with `start` / `stop`
//! (`runtime::stdio`).

use crate::runtime::model::Configured;
use crate::runtime::monitoring::Monitoring;
use crate::runtime::outcome::cpu_shares_of;
use crate::runtime::stdio::Commands;
use crate::runtime::topology::{App, Field, KindRule};
use anyhow::{Context, anyhow};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use swdaq_monitor::proc::{ThreadStat, read_threads};
use swdaq_net::{AppId, Heartbeat, Inlet, NetOptions, Outlet, WireMessage};

/// What every application has: its (validated) configuration, its place in the topology, its
/// sockets' context and the launcher's commands.
pub struct AppContext<C> {
    pub config: C,
    pub me: AppId,
    pub spec: App,
    pub zmq: zmq::Context,
    pub options: NetOptions,
    pub commands: Commands,
}

impl<C: Configured> AppContext<C> {
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
    pub fn bind_inbox<M: WireMessage>(&self) -> anyhow::Result<Inlet<M>> {
        let topology = self.config.topology();
        let apps = topology.apps.len() as AppId;
        let max_message = topology.max_message_mb.saturating_mul(1 << 20);
        Ok(
            Inlet::bind_limited(&self.zmq, &self.spec.address, Some(max_message))
                .with_context(|| format!("{}: inbox", self.spec.name))?
                .admitting(0..apps),
        )
    }

    /// An outlet to the inbox of application `peer`.
    pub fn outlet_to<M: WireMessage>(&self, peer: u32) -> anyhow::Result<Outlet<M>> {
        let app = &self.config.topology().apps[peer as usize];
        Ok(Outlet::connect(
            &self.zmq,
            &app.address,
            self.me,
            &self.options,
        )?)
    }

    /// Outlets to each of `peers`, in order.
    pub fn outlets_to<M: WireMessage>(&self, peers: &[u32]) -> anyhow::Result<Vec<Outlet<M>>> {
        peers.iter().map(|&p| self.outlet_to(p)).collect()
    }

    /// Waits until every outlet has a connection to its peer (so the first real message is
    /// not refused for a connection still being made: "ready" means reachable), then keeps
    /// them alive with heartbeats. Fails naming the peer after `topology.start_timeout_s`.
    pub fn connect_and_heartbeat<M: WireMessage>(
        &self,
        outlets: Vec<Outlet<M>>,
    ) -> anyhow::Result<Heartbeat> {
        let deadline =
            Instant::now() + Duration::from_secs_f64(self.config.topology().start_timeout_s);
        for o in &outlets {
            // With "queue only for connected peers", a blocking send succeeds once connected.
            while o.send_heartbeat().is_err() {
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

    /// Tells the launcher this application is ready, starts its clock and waits for the
    /// start: `false`, stopped before it (the clock measures from before the start, as the
    /// launcher's report of an application does).
    pub fn ready(&self) -> anyhow::Result<(Clock, bool)> {
        crate::runtime::stdio::say_ready()?;
        let clock = Clock::start();
        Ok((clock, self.commands.wait_for_start()))
    }

    /// Waits for the launcher's `stop` (or the end of its input).
    pub fn wait_for_stop(&self) {
        while !self.commands.wait_for_stop(Duration::from_millis(100)) {}
    }

    /// The end of every application's report: seconds since `clock` started and its threads'
    /// CPU shares; then its monitoring stops.
    pub fn finish(&self, clock: &Clock, monitoring: Monitoring) -> (f64, Vec<(String, f64)>) {
        let times = clock.cpu(&self.spec.name);
        monitoring.stop();
        times
    }

    /// The applications of `kind`, in topology order.
    pub fn ids_of(&self, kind: &str) -> Vec<u32> {
        self.config
            .topology()
            .of_kind(kind)
            .map(|(id, _)| id)
            .collect()
    }

    /// This application's monitoring, with `/metrics` where its entry asks for it, its
    /// figures sent to the launcher's live view.
    pub fn monitoring(&self) -> anyhow::Result<Monitoring> {
        let key = format!("topology.apps.metrics_addr ({})", self.spec.name);
        Monitoring::start(&self.spec.metrics_addr, &key)?.feeding_launcher()
    }

    /// Writes who this is to its log.
    pub fn announce(&self) {
        eprintln!(
            "swdaq app {} ({}): pid {}, inbox {}",
            self.spec.name,
            self.spec.kind,
            std::process::id(),
            self.spec.address
        );
    }
}

/// One application kind of a model: its name (the TOML `kind`), its own keys, how many of it
/// a run of `C` needs, and what an application of it runs.
pub struct KindSpec<C, R> {
    pub name: &'static str,
    pub fields: &'static [Field],
    /// At least, at most.
    pub count: fn(&C) -> (usize, usize),
    pub run: fn(&AppContext<C>) -> anyhow::Result<R>,
}

/// Checks `config`'s topology against the model's `kinds` (the checks every model shares;
/// the model adds what only it knows).
pub fn check_kinds<C, R>(config: &C, kinds: &[KindSpec<C, R>]) -> anyhow::Result<()>
where
    C: Configured,
{
    let rules: Vec<KindRule> = kinds
        .iter()
        .map(|k| {
            let (at_least, at_most) = (k.count)(config);
            KindRule {
                name: k.name,
                fields: k.fields,
                at_least,
                at_most,
            }
        })
        .collect();
    config.topology().validate(&rules)
}

/// Runs application `name` of `config` as its kind's entry in `kinds` (the model's
/// application kinds) says, and encodes its report for the launcher (`postcard`). An
/// application of a kind the model does not have is refused, naming the model's kinds.
pub fn run_app<C: Configured, R: serde::Serialize>(
    config: C,
    name: &str,
    commands: Commands,
    kinds: &[KindSpec<C, R>],
) -> anyhow::Result<Vec<u8>> {
    let ctx = AppContext::new(config, name, commands)?;
    let Some(kind) = kinds.iter().find(|k| k.name == ctx.spec.kind) else {
        let names: Vec<&str> = kinds.iter().map(|k| k.name).collect();
        anyhow::bail!(
            "{}: {} applications belong to another model (the {}'s are {})",
            ctx.spec.name,
            ctx.spec.kind,
            ctx.config.model().title(),
            names.join(", ")
        );
    };
    ctx.announce();
    Ok(postcard::to_stdvec(&(kind.run)(&ctx)?)?)
}

/// Measures the time and each thread's CPU from `start` on, for an application's report.
/// A sampler reads every thread's CPU time every `CPU_SAMPLE_EVERY`, so a thread that ended
/// before the report (the work threads of most applications end at the stop, before it)
/// still counts, with its CPU up to its last reading.
pub struct Clock {
    started: Instant,
    threads: Vec<ThreadStat>,
    /// Each thread's latest reading, kept after the thread ends.
    last_read: Arc<Mutex<BTreeMap<u32, ThreadStat>>>,
    sampler: Option<(crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>)>,
}

/// How often the sampler reads the threads: at most this much of an ended thread's CPU is
/// not counted.
const CPU_SAMPLE_EVERY: Duration = Duration::from_millis(100);

impl Clock {
    pub fn start() -> Self {
        let last_read = Arc::new(Mutex::new(BTreeMap::new()));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let into = Arc::clone(&last_read);
        let sampler = std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CPU_SAMPLE_EVERY)
                {
                    remember(&into, read_threads());
                }
            })
            .ok();
        Self {
            started: Instant::now(),
            threads: read_threads(),
            last_read,
            sampler: sampler.map(|handle| (stop, handle)),
        }
    }

    /// Seconds since `start`, and each thread's CPU share since, named `app/thread`.
    pub fn cpu(&self, app: &str) -> (f64, Vec<(String, f64)>) {
        let elapsed = self.started.elapsed();
        remember(&self.last_read, read_threads());
        let threads = lock(&self.last_read).values().cloned().collect();
        let shares = cpu_shares_of(&self.threads, threads, elapsed)
            .into_iter()
            .map(|(thread, share)| (format!("{app}/{thread}"), share))
            .collect();
        (elapsed.as_secs_f64(), shares)
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.sampler.take() {
            drop(stop);
            let _ = handle.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn remember(last_read: &Mutex<BTreeMap<u32, ThreadStat>>, threads: Vec<ThreadStat>) {
    let mut last = lock(last_read);
    for t in threads {
        last.insert(t.tid, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that ended before the report still has its CPU in it, under its name; the
    /// main thread is `main`.
    #[test]
    fn an_ended_thread_counts_in_the_cpu_report() {
        if !std::path::Path::new("/proc/self/task").exists() {
            return;
        }
        let clock = Clock::start();
        std::thread::Builder::new()
            .name("burner".into())
            .spawn(|| {
                let until = Instant::now() + Duration::from_millis(500);
                let mut x = 0u64;
                while Instant::now() < until {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
            .unwrap()
            .join()
            .unwrap();
        let (_, shares) = clock.cpu("app");
        let burner = shares.iter().find(|(name, _)| name == "app/burner");
        assert!(burner.is_some_and(|(_, share)| *share > 0.0), "{shares:?}");
        assert!(
            shares.iter().any(|(name, _)| name == "app/main"),
            "{shares:?}"
        );
    }
}
