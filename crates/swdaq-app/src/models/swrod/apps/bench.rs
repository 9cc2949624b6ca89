//! `swdaq bench swrod`'s request path: an HLT asking every ROB for each L1 accept and
//! building the full events, its ROBs' request servers answering from fragments already
//! built, once with the servers in the same process (channels, as the one-process SW ROD) and
//! once behind ZeroMQ on 127.0.0.1 (the `hlt` application's `rob_client` and the `swrod`
//! application's `rob_server`, the code the applications run), with the same fragments in the
//! same run. The HLT asks flat out, so the rates are what the request path holds, not what a
//! card sends.

use super::rob_client::Robs;
use super::rob_server::{Requests, answer_queues, send_answers};
use crate::models::swrod::wire::SwrodMessage;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use swdaq_net::{Inlet, NetOptions, Outlet};
use swdaq_swrod::BuiltFragment;
use swdaq_swrod::consumers::{
    FragmentStore, PLAUSIBLE_AHEAD, RequestServer, RobRequest, serve_requests,
};
use swdaq_swrod::hlt::{HltConfig, HltCounts, HltOutput, RobPort, assemble_events};
use swdaq_swrod::trigger::{L1Accept, LumiBlockLength};

/// One way of reaching the ROBs.
#[derive(Debug, Clone, Serialize)]
pub struct RequestPathRow {
    pub path: &'static str,
    pub events: u64,
    /// Events whose every ROB answered with its fragment.
    pub complete_events: u64,
    pub seconds: f64,
    /// CPU seconds of the whole process meanwhile: the HLT, the servers and, over ZeroMQ,
    /// both ends' network threads and ZeroMQ's I/O threads.
    pub cpu_s: f64,
    pub events_per_s: f64,
    /// ROB requests answered per second (events x ROBs).
    pub requests_per_s: f64,
    /// Fragment bytes delivered to the HLT per second.
    pub gbytes_per_s: f64,
    /// ROB requests answered per CPU second.
    pub requests_per_cpu_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestPathResult {
    pub robs: usize,
    pub fragment_bytes: usize,
    pub in_process: RequestPathRow,
    pub over_zeromq: RequestPathRow,
    /// Requests per second over ZeroMQ over those in process (same run).
    pub zeromq_vs_in_process: f64,
    /// Requests per CPU second over ZeroMQ over those in process.
    pub zeromq_vs_in_process_per_cpu: f64,
}

/// The application ids the ZeroMQ path's two ends use.
const SWROD_APP: u32 = 0;
const HLT_APP: u32 = 1;
/// Not in the run: the `swrod` end's horizon source, never heard from.
const NO_HLTSV: u32 = 2;

/// Both paths over `robs` ROBs with `events` L1 accepts of `fragment_bytes` per ROB.
pub fn request_path(
    robs: usize,
    events: u64,
    fragment_bytes: usize,
) -> anyhow::Result<RequestPathResult> {
    anyhow::ensure!(
        robs > 0 && events > 0 && fragment_bytes > 0,
        "ROBs, events and fragment bytes must be at least 1"
    );
    // One L1 ID each, without an ECR: the 24-bit event counter must not wrap.
    anyhow::ensure!(
        events <= 1 << 24,
        "at most 2^24 events (their L1 IDs, without an ECR, are 24 bits)"
    );
    let in_process = measure("in process", robs, events, fragment_bytes, |ports, run| {
        Ok(run(&ports))
    })?;
    let over_zeromq = measure(
        "ZeroMQ, 127.0.0.1",
        robs,
        events,
        fragment_bytes,
        over_zeromq,
    )?;
    Ok(RequestPathResult {
        robs,
        fragment_bytes,
        zeromq_vs_in_process: over_zeromq.requests_per_s / in_process.requests_per_s,
        zeromq_vs_in_process_per_cpu: over_zeromq.requests_per_cpu_s
            / in_process.requests_per_cpu_s,
        in_process,
        over_zeromq,
    })
}

/// The run's L1 accepts, numbered from 0 (no ECR: the L1 ID is the number).
fn l1a(index: u64, started: Instant) -> L1Accept {
    L1Accept::counted(index, 0, LumiBlockLength::L1as(u64::MAX), started)
}

/// What the HLT built, and the time and CPU it took.
struct Measured {
    counts: HltCounts,
    /// Fragment bytes in the events.
    bytes: u64,
    elapsed: Duration,
    cpu: Duration,
}

/// The HLT asking the ROBs behind the ports it is given for every event.
type RunHlt<'a> = &'a dyn Fn(&[RobPort]) -> Measured;

/// Starts a request server per ROB holding every event's fragment, reaches them through
/// `path` (given the servers' ports and the HLT's run over ports), and times the HLT.
fn measure(
    name: &'static str,
    robs: usize,
    events: u64,
    fragment_bytes: usize,
    path: impl FnOnce(Vec<RobPort>, RunHlt) -> anyhow::Result<Measured>,
) -> anyhow::Result<RequestPathRow> {
    let started = Instant::now();
    let mut ports = Vec::new();
    let mut servers = Vec::new();
    for rob in 0..robs {
        let mut store = FragmentStore::new(events as usize, PLAUSIBLE_AHEAD);
        for i in 0..events {
            let l1_id = l1a(i, started).l1_id;
            let bytes = vec![rob as u8; fragment_bytes];
            store.insert(Arc::new(BuiltFragment::received(bytes, l1_id, true)));
        }
        let (requests, queue) = crossbeam_channel::unbounded::<RobRequest>();
        // Every fragment is in the store already: their channel is closed from the start.
        let (_, fragments) = crossbeam_channel::bounded(0);
        let server = RequestServer::new(store, Duration::ZERO);
        servers.push(
            std::thread::Builder::new()
                .name(format!("swrod-req-{rob}"))
                .spawn(move || serve_requests(fragments, queue, server))?,
        );
        ports.push(RobPort {
            source_id: 0x0071_0000 + rob as u32,
            requests,
        });
    }
    let run_hlt = |ports: &[RobPort]| {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..events {
            let _ = tx.send(l1a(i, started));
        }
        drop(tx);
        let config = HltConfig {
            max_in_flight: 4096,
            retry_after: Duration::from_millis(2),
            give_up_after: Duration::from_secs(10),
        };
        let mut bytes = 0u64;
        let timer = Instant::now();
        let cpu = cpu_time::ProcessTime::now();
        let counts = assemble_events(
            rx,
            ports,
            config,
            |out| {
                if let HltOutput::Event(e) = out {
                    bytes += e.robs.iter().map(|f| f.bytes().len() as u64).sum::<u64>();
                }
            },
            |_| {},
        );
        Measured {
            counts,
            bytes,
            elapsed: timer.elapsed(),
            cpu: cpu.elapsed(),
        }
    };
    let Measured {
        counts,
        bytes,
        elapsed,
        cpu,
    } = path(ports, &run_hlt)?;
    for server in servers {
        server
            .join()
            .map_err(|_| anyhow::anyhow!("a request server panicked"))?;
    }
    let seconds = elapsed.as_secs_f64();
    let cpu_s = cpu.as_secs_f64();
    let requests = (counts.events * robs as u64) as f64;
    Ok(RequestPathRow {
        path: name,
        events: counts.events,
        complete_events: counts.complete_events,
        seconds,
        cpu_s,
        events_per_s: counts.events as f64 / seconds,
        requests_per_s: requests / seconds,
        gbytes_per_s: bytes as f64 / seconds / 1e9,
        requests_per_cpu_s: requests / cpu_s,
    })
}

/// The servers behind a `swrod` application's inbox and answer sender, the HLT behind an
/// `hlt` application's request forwarder and inbox, over TCP on 127.0.0.1.
fn over_zeromq(server_ports: Vec<RobPort>, run_hlt: RunHlt) -> anyhow::Result<Measured> {
    let context = zmq::Context::new();
    let options = NetOptions::default();
    let swrod_inbox = Inlet::bind(&context, "tcp://127.0.0.1:0")?;
    let mut hlt_inbox = Inlet::bind(&context, "tcp://127.0.0.1:0")?;
    let to_swrod = Outlet::connect(&context, swrod_inbox.endpoint(), HLT_APP, &options)?;
    let to_hlt = Outlet::connect(&context, hlt_inbox.endpoint(), SWROD_APP, &options)?;
    let source_ids: Vec<u32> = server_ports.iter().map(|p| p.source_id).collect();
    let (senders, receivers): (Vec<Vec<_>>, Vec<Vec<_>>) = answer_queues(1, source_ids.len())
        .into_iter()
        .map(|per_rob| per_rob.into_iter().unzip())
        .unzip();
    let requests = Requests {
        inlet: swrod_inbox,
        ports: server_ports,
        hlts: vec![HLT_APP],
        hltsv: NO_HLTSV,
        horizon: Arc::new(AtomicU64::new(0)),
        peer_timeout: Duration::from_secs(10),
    };
    let (robs, hlt_ports, queues) =
        Robs::new(source_ids.iter().map(|&s| (s, 0)).collect(), vec![to_swrod]);
    let swrod_done = AtomicBool::new(false);
    let hlt_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let named = |name: &str| std::thread::Builder::new().name(name.into());
        let swrod_requests =
            named("rob-requests").spawn_scoped(scope, || requests.run(senders, &swrod_done))?;
        let answers = named("rob-answers").spawn_scoped(scope, || {
            send_answers(receivers, &source_ids, &[to_hlt], Duration::from_secs(10))
        })?;
        let robs = &robs;
        let forward = named("hlt-forward").spawn_scoped(scope, move || robs.forward(queues))?;
        let demux = named("net-demux").spawn_scoped(scope, || {
            while !hlt_done.load(Ordering::Acquire) {
                if let Some(d) = hlt_inbox.receive(Duration::from_millis(20))
                    && let SwrodMessage::RobAnswers(answers) = d.message
                {
                    robs.answer(answers, d.frames);
                }
            }
        })?;
        let measured = run_hlt(&hlt_ports);
        drop(hlt_ports);
        swrod_done.store(true, Ordering::Release);
        hlt_done.store(true, Ordering::Release);
        let failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        swrod_requests.join().map_err(|_| failed("request"))?;
        let undelivered = answers.join().map_err(|_| failed("answer"))?;
        forward.join().map_err(|_| failed("forward"))?;
        demux.join().map_err(|_| failed("demultiplexer"))?;
        anyhow::ensure!(undelivered == 0, "{undelivered} answers not delivered");
        Ok(measured)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both paths deliver every event whole, with every ROB's fragment.
    #[test]
    fn both_paths_build_every_event_complete() {
        let r = request_path(3, 2000, 256).unwrap();
        for row in [&r.in_process, &r.over_zeromq] {
            assert_eq!((row.events, row.complete_events), (2000, 2000), "{row:?}");
            let bytes = row.gbytes_per_s * 1e9 * row.seconds;
            assert!((bytes - 2000.0 * 3.0 * 256.0).abs() < 1.0, "{row:?}");
        }
    }
}
