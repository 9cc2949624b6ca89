//! `swdaq bench evb` with the event builder over ZeroMQ loopback: the one-process benchmark
//! (`swdaq_evb::bench`), then the same system as applications on 127.0.0.1 flat out for a
//! while (built events/s, GB/s written, CPU seconds of every application's threads, CRC32C
//! of every event included), and bare ZeroMQ PUSH/PULL moving events of the same mean size,
//! all in the same run, with the ratios.

use super::super::config::EvbRunConfig;
use super::super::system::run_apps;
use crate::run_section::RunSection;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::{App, TopologySection};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use swdaq_evb::EvbConfig;
use swdaq_evb::bench::{BenchResult, RunRow, TransportRow};
use swdaq_evb::metrics::load_average;

#[derive(Debug, Clone, Serialize)]
pub struct EvbBenchResult {
    #[serde(flatten)]
    pub one_process: BenchResult,
    /// The same readout and builder units as applications, one process each.
    pub over_zeromq: RunRow,
    /// Events of the mean size through bare ZeroMQ PUSH/PULL over TCP loopback.
    pub bare_zeromq: TransportRow,
    /// Built events/s over ZeroMQ over built events/s in one process (flat out, same run).
    pub zeromq_vs_one_process: f64,
    /// Built events/s over ZeroMQ over bare ZeroMQ events/s.
    pub zeromq_vs_bare_zeromq: f64,
    /// Built events per CPU second over ZeroMQ over those in one process.
    pub zeromq_vs_one_process_per_cpu: f64,
    /// The machine's 1-minute load average before and after (it may be shared).
    pub load_average: (f64, f64),
}

/// An `evm`, `ru` and `bu` topology for `config` on free loopback ports.
fn loopback_topology(config: &EvbConfig) -> anyhow::Result<TopologySection> {
    let mut apps = Vec::new();
    let mut add = |name: String, kind: &str| -> anyhow::Result<()> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        apps.push(App::new(name, kind, format!("tcp://127.0.0.1:{port}")));
        Ok(())
    };
    add("evm".into(), super::EVM)?;
    for ru in 1..config.rus.len() {
        add(format!("ru-{ru}"), super::RU)?;
    }
    for bu in 0..config.builder_units {
        add(format!("bu-{bu}"), super::BU)?;
    }
    Ok(TopologySection {
        apps,
        ..Default::default()
    })
}

/// The one-process benchmark, then `zeromq_seconds` flat out as applications (started from
/// `exe`), then bare ZeroMQ; files under `dir`, removed at the end.
pub fn run(
    config: &EvbConfig,
    events: u64,
    paced: Option<Duration>,
    dir: &Path,
    exe: &Path,
    zeromq_seconds: f64,
) -> anyhow::Result<EvbBenchResult> {
    let load_before = load_average();
    let one_process = swdaq_evb::bench::run(config, events, paced, dir)?;
    let apps = EvbRunConfig {
        run: RunSection {
            number: config.run,
            duration_s: zeromq_seconds,
            metrics_addr: String::new(),
            ..RunSection::writing_to(dir.join("zeromq"))
        },
        evb: EvbConfig {
            paced: false,
            max_events: None,
            ..config.clone()
        },
        topology: loopback_topology(config)?,
        dqm: Default::default(),
    };
    let summary = run_apps(&apps, exe, &StopRequest::default(), &())?;
    if let Some(a) = summary.apps.iter().find(|a| a.failure.is_some()) {
        anyhow::bail!(
            "{} failed: {}; see {}",
            a.name,
            a.failure.as_deref().unwrap_or_default(),
            a.log.display()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    let over_zeromq = swdaq_evb::bench::row(
        "over ZeroMQ loopback",
        None,
        &summary.evb,
        summary.cpu_seconds,
    );
    let size = one_process.mean_event_bytes as usize;
    let seconds = swdaq_net::bench::bare_round(size, events as usize)?;
    let bare_zeromq = TransportRow {
        event_bytes: size,
        events_per_second: events as f64 / seconds,
        gbps: (events as usize * size) as f64 / seconds / 1e9,
    };
    let flat = &one_process.runs[0];
    Ok(EvbBenchResult {
        zeromq_vs_one_process: over_zeromq.built_per_second / flat.built_per_second,
        zeromq_vs_bare_zeromq: over_zeromq.built_per_second / bare_zeromq.events_per_second,
        zeromq_vs_one_process_per_cpu: over_zeromq.built_per_cpu_second / flat.built_per_cpu_second,
        one_process,
        over_zeromq,
        bare_zeromq,
        load_average: (load_before, load_average()),
    })
}
