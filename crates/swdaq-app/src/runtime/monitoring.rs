//! A process's monitoring: the registry every thread publishes to, the statistics thread that
//! snapshots it, and `/metrics` served from those snapshots.

use super::live_feed::LiveReporter;
use anyhow::Context;
use std::time::Duration;
use swdaq_monitor::{MetricsServer, Registry, StatsThread};

/// The monitoring registry, its statistics thread and the `/metrics` server of a process.
pub struct Monitoring {
    pub registry: Registry,
    pub stats: StatsThread,
    server: Option<MetricsServer>,
    /// An application's figures to the launcher's live view, while it lives.
    feed: Option<LiveReporter>,
    interval: Duration,
}

impl Monitoring {
    /// Serves `/metrics` at `addr` ("" for none), which configuration `key` gave, with
    /// snapshots at least every second (a status line is never more than 1 s stale) and at
    /// least once per `status_interval`.
    pub fn for_status(status_interval: Duration, addr: &str, key: &str) -> anyhow::Result<Self> {
        Self::with_interval(status_interval.min(Duration::from_secs(1)), addr, key)
    }

    /// Snapshots every `interval`, `/metrics` at `addr` ("" for none) from configuration `key`.
    pub fn with_interval(interval: Duration, addr: &str, key: &str) -> anyhow::Result<Self> {
        let registry = Registry::new();
        let stats = StatsThread::spawn(registry.clone(), interval)?;
        let server = match addr {
            "" => None,
            addr => {
                let parsed = addr
                    .parse()
                    .with_context(|| format!("invalid configuration: {key} = {addr:?}"))?;
                Some(
                    MetricsServer::start(parsed, stats.cell())
                        .with_context(|| format!("{key} = {addr:?}: cannot serve /metrics"))?,
                )
            }
        };
        Ok(Self {
            registry,
            stats,
            server,
            feed: None,
            interval,
        })
    }

    /// Sends the launcher every snapshot's series (an application's live figures).
    pub fn feeding_launcher(mut self) -> anyhow::Result<Self> {
        self.feed = Some(LiveReporter::start(self.stats.cell(), self.interval)?);
        Ok(self)
    }

    pub fn stop(self) {
        drop(self.feed);
        if let Some(m) = self.server {
            m.stop();
        }
        self.stats.stop();
    }
}
