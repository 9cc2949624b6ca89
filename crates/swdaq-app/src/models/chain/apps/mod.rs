//! The chain's applications, one process each, talking over ZeroMQ (`swdaq-net`):
//!
//! ```text
//!  readout-K ──TPs, link ends──────────────────────▶ trigger ──decisions──▶ dfo
//!     ▲  └──fragments──▶ builder-B ◀──decisions─────────────────────────────┘ │
//!     └────requests──────┘   └──builder credits, records done──▶ dfo ──credits──▶ trigger
//! ```
//!
//! `swdaq run` (`runtime::launch`) starts them with the run's configuration and stops them
//! trigger, orchestrator, builders, readout; their reports are merged here into the same
//! `RunReport` the one-process chain fills.

pub mod builder;
pub mod dfo;
pub mod readout;
pub mod trigger;

use super::config::RunConfig;
use super::system::RunReport;
use crate::model::RunHooks;
use crate::runtime::app::{AppContext, KindBody, run_app};
use crate::runtime::launch::{Plan, Stages, launch};
use crate::runtime::outcome::StopReason;
use crate::runtime::stdio::Commands;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::AppKind;
use std::path::Path;

impl AppContext<RunConfig> {
    /// The builders, in topology order: a builder's index here is its element id.
    pub fn builders(&self) -> Vec<u32> {
        self.ids_of(AppKind::Builder)
    }
}

/// Runs application `name` of `config`: its report's bytes.
pub fn run(config: &RunConfig, name: &str, commands: Commands) -> anyhow::Result<Vec<u8>> {
    config.validate()?;
    run_app(config.clone(), name, commands, KINDS)
}

/// The chain's application kinds.
const KINDS: &[KindBody<RunConfig, RunReport>] = &[
    (AppKind::Readout, readout::run),
    (AppKind::Trigger, trigger::run),
    (AppKind::Dfo, dfo::run),
    (AppKind::Builder, builder::run),
];

/// Runs the topology's applications (`exe` is the `swdaq` program to start them with),
/// telling `hooks` when they have started, their live figures and when the stop begins;
/// run-control requests go to the trigger application, bursts to the readout applications.
pub fn run_distributed(
    config: &RunConfig,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<RunReport> {
    config.validate()?;
    let stages = Stages {
        stop_order: &[
            AppKind::Trigger,
            AppKind::Dfo,
            AppKind::Builder,
            AppKind::Readout,
        ],
        essential: &[AppKind::Trigger, AppKind::Dfo],
        ends_with: (AppKind::Readout, StopReason::AllLinksEnded),
        live: &|snapshot, elapsed| super::live::live(snapshot, elapsed, config.emulator.links),
        trigger_at: Some(AppKind::Trigger),
        bursts_to: config.recording.enabled.then_some(AppKind::Readout),
        clock_followers: &[],
    };
    let launched = launch(&Plan::of(config, stages), exe, stop, hooks)?;
    let mut reports = Vec::new();
    let mut outcomes = Vec::new();
    for (kind, mut outcome, bytes) in launched.apps {
        match bytes.map(|b| postcard::from_bytes::<RunReport>(&b)) {
            Some(Ok(r)) => reports.push((kind, r)),
            Some(Err(e)) => outcome.failure = Some(format!("report: not a run report: {e}")),
            None => {}
        }
        outcomes.push(outcome);
    }
    let mut report = merge(reports.into_iter());
    report.seconds = launched.seconds;
    report.stop_reason = launched
        .stop_reason
        .with_storage_error(report.storage.as_ref());
    report.apps = outcomes;
    Ok(report)
}

/// One summary from the applications' parts.
fn merge(reports: impl Iterator<Item = (AppKind, RunReport)>) -> RunReport {
    let mut out = RunReport::default();
    for (kind, r) in reports {
        match kind {
            AppKind::Readout => {
                out.links.extend(r.links);
                out.server.add(&r.server);
                out.hit_finding = match (out.hit_finding.take(), r.hit_finding) {
                    (Some(mut a), Some(b)) => {
                        a.add(&b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
                if let Some(c) = r.roi_coverage {
                    out.roi_coverage.get_or_insert_default().add(&c);
                }
                out.recording = match (out.recording.take(), r.recording) {
                    (Some(mut a), Some(b)) => {
                        a.add(b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
            }
            AppKind::Trigger => out.trigger = r.trigger,
            AppKind::Dfo => out.dataflow = r.dataflow,
            AppKind::Builder => {
                out.builder.add(r.builder);
                out.storage = match (out.storage.take(), r.storage) {
                    (Some(mut a), Some(b)) => {
                        a.add(b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
            }
            // Validated away: the chain's topology has no event-builder applications.
            AppKind::Evm
            | AppKind::Ru
            | AppKind::Bu
            | AppKind::Swrod
            | AppKind::Hltsv
            | AppKind::Hlt => {}
        }
        out.thread_cpu.extend(r.thread_cpu);
        for (reason, n) in r.refused_messages {
            *out.refused_messages.entry(reason).or_default() += n;
        }
    }
    out.links.sort_by_key(|l| l.source_id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::chain::wire::ChainMessage;
    use crate::runtime::topology::App;
    use std::time::{Duration, Instant};
    use swdaq_net::Outlet;

    fn app(name: &str, kind: AppKind) -> App {
        App {
            name: name.into(),
            kind,
            host: String::new(),
            address: "tcp://127.0.0.1:0".into(),
            links: Vec::new(),
            cards: Vec::new(),
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
        while stranger.send_heartbeat().is_err() && Instant::now() < deadline {}
        stranger.send(&ChainMessage::End).unwrap();
        while inbox.counts().refused.get("unknown_sender") != Some(&2) && Instant::now() < deadline
        {
            inbox.receive(Duration::from_millis(50));
        }
        dfo.send(&ChainMessage::End).unwrap();
        let delivery = inbox.receive(Duration::from_secs(5)).unwrap();
        assert_eq!((delivery.sender, delivery.message), (1, ChainMessage::End));
        assert_eq!(inbox.counts().refused.get("unknown_sender"), Some(&2));
        assert_eq!(inbox.last_seen(2), None);
    }
}
