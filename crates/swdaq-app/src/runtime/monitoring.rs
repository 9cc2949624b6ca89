//! A process's monitoring: the registry every thread publishes to, the statistics thread that
//! snapshots it, and `/metrics` served from those snapshots.

use super::live_feed::LiveReporter;
use crate::live::LIVE_INTERVAL;
use anyhow::Context;
use swdaq_monitor::{MetricsServer, Registry, StatsThread};

/// The monitoring registry, its statistics thread and the `/metrics` server of a process.
pub struct Monitoring {
    pub registry: Registry,
    pub stats: StatsThread,
    server: Option<MetricsServer>,
    /// An application's figures to the launcher's live view, while it lives.
    feed: Option<LiveReporter>,
}

impl Monitoring {
    /// Snapshots every [`LIVE_INTERVAL`], `/metrics` at `addr` ("" for none), which
    /// configuration `key` gave.
    pub fn start(addr: &str, key: &str) -> anyhow::Result<Self> {
        let registry = Registry::new();
        let stats = StatsThread::spawn(registry.clone(), LIVE_INTERVAL)?;
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
        })
    }

    /// Sends the launcher every snapshot's series (an application's live figures).
    pub fn feeding_launcher(mut self) -> anyhow::Result<Self> {
        self.feed = Some(LiveReporter::start(self.stats.cell(), LIVE_INTERVAL)?);
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
