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
use crate::runtime::app::{AppContext, KindSpec, check_kinds, run_app};
use crate::runtime::dqm_stream::{Published, StreamKeys, StreamedDqm};
use crate::runtime::launch::{Plan, Stages, launch};
use crate::runtime::model::RunHooks;
use crate::runtime::outcome::StopReason;
use crate::runtime::stdio::Commands;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::{Field, TopologySection};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

impl AppContext<RunConfig> {
    /// The builders, in topology order: a builder's index here is its element id.
    pub fn builders(&self) -> Vec<u32> {
        self.ids_of(BUILDER)
    }
}

/// Runs application `name` of `config`: its report's bytes.
pub fn run(config: &RunConfig, name: &str, commands: Commands) -> anyhow::Result<Vec<u8>> {
    config.validate()?;
    run_app(config.clone(), name, commands, KINDS)
}

/// Links, hit finding, request serving, the TP stream.
pub const READOUT: &str = "readout";
/// The self-trigger.
pub const TRIGGER: &str = "trigger";
/// The dataflow orchestrator: hands decisions to builders by credit.
pub const DFO: &str = "dfo";
/// Requests, builds and writes records.
pub const BUILDER: &str = "builder";

/// A readout application's links (`[u32]`).
pub const LINKS: Field = Field {
    key: "links",
    elsewhere: "only readout applications have links",
};
/// A builder's record stream for online monitoring (`record_stream`: a ZeroMQ PUB endpoint,
/// or "") and every how many records it publishes (`record_stream_every`; default:
/// `[dqm] sample_every` with `[dqm]`, else 1).
pub const RECORD_STREAMS: StreamKeys = StreamKeys::new(
    BUILDER,
    ["record_stream", "record_stream_every"],
    "records",
    "only builders publish records",
);

/// The chain's application kinds.
pub(super) const KINDS: &[KindSpec<RunConfig, RunReport>] = &[
    KindSpec {
        name: READOUT,
        fields: &[LINKS],
        count: |_| (1, usize::MAX),
        run: readout::run,
    },
    KindSpec {
        name: TRIGGER,
        fields: &[],
        count: |_| (1, 1),
        run: trigger::run,
    },
    KindSpec {
        name: DFO,
        fields: &[],
        count: |_| (1, 1),
        run: dfo::run,
    },
    KindSpec {
        name: BUILDER,
        fields: &[RECORD_STREAMS.stream, RECORD_STREAMS.every],
        count: |_| (1, usize::MAX),
        run: builder::run,
    },
];

impl crate::runtime::model::Applications for RunConfig {
    type Report = RunReport;
    type Message = crate::models::chain::wire::ChainMessage;
    const KINDS: &'static [KindSpec<Self, Self::Report>] = KINDS;
}

/// Checks the chain's topology: its kinds, and each of the run's `links` read out by exactly
/// one readout application.
pub fn check_topology(config: &RunConfig) -> anyhow::Result<()> {
    check_kinds(config, KINDS)?;
    let topology = &config.topology;
    if !topology.is_distributed() {
        return Ok(());
    }
    let links = config.emulator.links;
    let mut covered = BTreeSet::new();
    RECORD_STREAMS.check(topology, config.dqm.enabled)?;
    for (_, a) in topology.of_kind(READOUT) {
        for l in links_of(a)? {
            anyhow::ensure!(
                l < links,
                "invalid configuration: topology.apps.links: {}: link {l} does not exist ({links} links)",
                a.name
            );
            anyhow::ensure!(
                covered.insert(l),
                "invalid configuration: topology.apps.links: link {l} is read out twice"
            );
        }
    }
    let unread: Vec<u32> = (0..links).filter(|l| !covered.contains(l)).collect();
    anyhow::ensure!(
        unread.is_empty(),
        "invalid configuration: topology.apps.links: links {unread:?} are read out by no application"
    );
    Ok(())
}

/// A readout application's links.
pub fn links_of(app: &crate::runtime::topology::App) -> anyhow::Result<Vec<u32>> {
    app.field(LINKS.key)
}

/// The readout applications of `topology` with their links, in topology order.
pub fn readouts(topology: &TopologySection) -> anyhow::Result<Vec<(u32, Vec<u32>)>> {
    topology
        .of_kind(READOUT)
        .map(|(id, a)| Ok((id, links_of(a)?)))
        .collect()
}

/// Runs the topology's applications (`exe` is the `swdaq` program to start them with),
/// telling `hooks` when they have started, their live figures and when the stop begins;
/// run-control requests go to the trigger application, bursts to the readout applications.
/// With `[dqm]`, this process monitors the records the builders publish.
pub fn run_distributed(
    config: &RunConfig,
    exe: &Path,
    stop: &StopRequest,
    hooks: &dyn RunHooks,
) -> anyhow::Result<RunReport> {
    config.validate()?;
    // Subscribed before the applications start, so that the first records are taken.
    let dqm = StreamedDqm::start_for_topology(
        &config.dqm,
        &config.run,
        &config.topology,
        &RECORD_STREAMS,
        builder::fill_published,
        hooks,
    )?;
    let stages = Stages {
        stop_order: &[TRIGGER, DFO, BUILDER, READOUT],
        essential: &[TRIGGER, DFO],
        ends_with: (READOUT, StopReason::AllLinksEnded),
        live: &|snapshot, elapsed| super::live::live(snapshot, elapsed, config.emulator.links),
        trigger_at: Some(TRIGGER),
        bursts_to: config.recording.enabled.then_some(READOUT),
        clock_followers: &[],
    };
    let launched = launch(&Plan::of(config, stages), exe, stop, hooks)?;
    let mut reports = Vec::new();
    let mut outcomes = Vec::new();
    let mut published: BTreeMap<String, Published> = BTreeMap::new();
    for (kind, mut outcome, bytes) in launched.apps {
        match bytes.map(|b| postcard::from_bytes::<RunReport>(&b)) {
            Some(Ok(r)) => {
                published.insert(outcome.name.clone(), r.records_published);
                reports.push((kind, r));
            }
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
    if let Some(dqm) = dqm {
        report.dqm = Some(dqm.finish_stopped(stop, &config.run, |app| published.get(app).copied()));
    }
    Ok(report)
}

/// One summary from the applications' parts.
fn merge(reports: impl Iterator<Item = (String, RunReport)>) -> RunReport {
    let mut out = RunReport::default();
    for (kind, r) in reports {
        match kind.as_str() {
            READOUT => {
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
            TRIGGER => out.trigger = r.trigger,
            DFO => out.dataflow = r.dataflow,
            BUILDER => {
                out.builder.add(r.builder);
                out.records_published.sent += r.records_published.sent;
                out.records_published.dropped += r.records_published.dropped;
                out.storage = match (out.storage.take(), r.storage) {
                    (Some(mut a), Some(b)) => {
                        a.add(b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                };
            }
            // Validated away: the chain's topology has only the chain's kinds.
            _ => {}
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
    use crate::runtime::dqm_stream::checks::every_stream_is_required;
    use crate::runtime::topology::App;
    use std::time::{Duration, Instant};
    use swdaq_net::Outlet;

    fn app(name: &str, kind: &str) -> App {
        App::new(name, kind, "tcp://127.0.0.1:0")
    }

    fn readout(name: &str, port: u16, links: &[u32]) -> App {
        App::new(name, READOUT, format!("tcp://127.0.0.1:{port}")).with("links", links.to_vec())
    }

    fn with_topology(apps: Vec<App>) -> RunConfig {
        let mut config = RunConfig::default();
        config.emulator.links = 4;
        config.topology.apps = apps;
        config
    }

    fn topology() -> Vec<App> {
        let at = |port: u16| format!("tcp://127.0.0.1:{port}");
        vec![
            readout("ro-0", 7100, &[0, 1]),
            readout("ro-1", 7101, &[2, 3]),
            App::new("trigger", TRIGGER, at(7102)),
            App::new("dfo", DFO, at(7103)),
            App::new("builder-0", BUILDER, at(7104)),
        ]
    }

    #[test]
    fn a_complete_topology_is_valid_and_empty_means_one_process() {
        check_topology(&with_topology(topology())).unwrap();
        check_topology(&with_topology(Vec::new())).unwrap();
    }

    #[test]
    fn every_mistake_names_its_key() {
        type Change = Box<dyn Fn(&mut Vec<App>)>;
        let links = |i: usize, links: &[u32]| -> Change {
            let links = links.to_vec();
            Box::new(move |t: &mut Vec<App>| {
                t[i].fields.insert("links".into(), links.clone().into());
            })
        };
        let cases: Vec<(Change, &str)> = vec![
            (links(1, &[1, 2, 3]), "read out twice"),
            (links(1, &[2]), "read out by no application"),
            (links(1, &[2, 3, 9]), "does not exist"),
            (Box::new(|t| t.remove(3).name.clear()), "dfo applications"),
            (Box::new(|t| t[2].name = "ro-0".into()), "appears twice"),
            (Box::new(|t| t[2].name = "a b".into()), "apps.name"),
            (
                Box::new(|t| t[3].address = t[2].address.clone()),
                "used twice",
            ),
            (
                Box::new(|t| t[3].address = "127.0.0.1:1".into()),
                "apps.address",
            ),
            (Box::new(|t| t[4].host = "nowhere".into()), "no host"),
            (links(2, &[0]), "only readout"),
            (
                Box::new(|t| {
                    t[0].fields
                        .insert("record_stream".into(), "tcp://x:1".into());
                }),
                "only builders",
            ),
            (
                Box::new(|t| {
                    t[4].fields.insert("record_stream_every".into(), 0.into());
                }),
                "record_stream_every: must be >= 1",
            ),
            (Box::new(|t| t[4].kind = "bu".into()), "do not belong"),
        ];
        for (change, expected) in cases {
            let mut apps = topology();
            change(&mut apps);
            let e = check_topology(&with_topology(apps))
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{e:?} should say {expected:?}");
        }
        let mut config = with_topology(topology());
        config.topology.peer_timeout_ms = 100;
        let e = check_topology(&config).unwrap_err().to_string();
        assert!(e.contains("peer_timeout_ms"), "{e}");
    }

    /// With `[dqm]`, a builder without a record stream is refused by name; the streams are
    /// reached where their builders are when bound on every interface.
    #[test]
    fn dqm_in_a_topology_needs_every_builder_s_record_stream() {
        let mut config = with_topology(topology());
        config.dqm.enabled = true;
        every_stream_is_required(
            &config,
            &RECORD_STREAMS,
            |c| &mut c.topology,
            check_topology,
            7320,
        );
    }

    #[test]
    fn an_inbox_refuses_a_sender_outside_the_topology_and_counts_it_for_the_report() {
        let mut config = RunConfig::default();
        config.topology.apps = vec![app("trigger", TRIGGER), app("dfo", DFO)];
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
