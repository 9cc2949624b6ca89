//! An `hlt` application: an HLT node's data collection with its storage. It asks the HLT
//! supervisor for as many events as it can hold, asks every ROB for each L1 accept it is
//! given (`rob_client`), builds the full event and stores the accepted ones under
//! `<run.output_dir>/<its name>/`, with the same HLT and storage code as the one-process
//! SW ROD. It returns its credit as events are built and tells the supervisor which events
//! are settled (built and not accepted, or in a closed file), so that if it dies the
//! supervisor knows, by number, what it lost. A silent supervisor ends its run as the
//! supervisor's end of run would.

use super::rob_client::Robs;
use super::{
    HltAppReport, NET_WAKE, SwrodAppReport, SwrodContext, cards_of, hlt_directory, robs_of,
};
use crate::models::swrod::hlt::{HltMetrics, StoreMetrics, ToStore, hlt_thread};
use crate::models::swrod::wire::SwrodMessage;
use crate::runtime::dqm_stream::publish_samples;
use crate::runtime::stdio as control;
use crossbeam_channel::Sender;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_net::{Inlet, Liveness, Outlet, WireMessage};
use swdaq_swrod::files::{EventFiles, FileSettings, ToStorage, Told, store_telling};
use swdaq_swrod::message::{HltRequest, ToHlt};
use swdaq_swrod::trigger::L1Accept;

/// Accepted events waiting for the writer (as in one process).
const STORAGE_QUEUE: usize = 1024;

pub(super) fn run(ctx: &SwrodContext) -> anyhow::Result<SwrodAppReport> {
    let config = &ctx.config;
    let s = &config.swrod;
    let hlts = ctx.ids_of(super::HLT);
    let index = hlts
        .iter()
        .position(|&h| h == ctx.me)
        .expect("an hlt application") as u16;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let (hltsv, _) = config.topology.single(super::HLTSV);
    let swrods = ctx.ids_of(super::SWROD);
    let to_hltsv = ctx.outlet_to(hltsv)?;
    let to_swrods = ctx.outlets_to(&swrods)?;
    let mut everyone = to_swrods.clone();
    everyone.push(to_hltsv.clone());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let files = EventFiles::new(FileSettings {
        dir: hlt_directory(config, &ctx.spec.name),
        ..s.file_settings(&config.run)
    })?;
    let metrics = HltMetrics::register(&monitoring.registry)?;
    let store_metrics = StoreMetrics::register(&monitoring.registry)?;
    // Every ROB of the run in source-id order, with the `swrod` application that has it.
    let mut robs: Vec<(u32, usize)> = Vec::new();
    for (app, &id) in swrods.iter().enumerate() {
        let cards = cards_of(&config.topology.apps[id as usize])?;
        robs.extend(robs_of(config, &cards).into_iter().map(|r| (r, app)));
    }
    robs.sort_unstable();
    let (robs, ports, queues) = Robs::new(robs, to_swrods);
    // Every Nth event it stores published for the supervisor's monitoring (`event_stream`),
    // by a thread of its own: the HLT never waits for it.
    let publishing = match super::EVENT_STREAMS.open(&ctx.zmq, &ctx.spec, &ctx.config.dqm)? {
        Some((publisher, every)) => Some(publish_samples(
            publisher,
            every,
            config.dqm.queue,
            &monitoring.registry,
        )?),
        None => None,
    };
    let (sampler, publishing) = publishing.unzip();
    let (clock, started) = ctx.ready()?;
    let mut report = SwrodAppReport::default();
    if !started {
        return Ok(report);
    }
    let credits = CreditReturn::new(to_hltsv, index);
    credits.ask(u32::try_from(s.hlt_max_in_flight).unwrap_or(u32::MAX));
    let (l1_tx, l1_rx) = crossbeam_channel::unbounded();
    let (store_tx, store_rx) = crossbeam_channel::bounded::<ToStorage>(STORAGE_QUEUE);
    let storage_failed = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let writer = std::thread::Builder::new()
            .name("storage".into())
            .spawn_scoped(scope, || {
                // Its counters are the storage thread's own (single writer).
                let metrics = store_metrics;
                store_telling(files, store_rx, |told| match told {
                    Told::Flushed { .. } => metrics.flushed(&told),
                    Told::Stored(ids) => credits.settled(ids),
                    Told::Failed(e) => {
                        storage_failed.store(true, Ordering::Relaxed);
                        // The run stops: the launcher is told at once.
                        if let Err(e) = control::say_storage_failed(&format!("its storage: {e}")) {
                            eprintln!("cannot tell the launcher storage failed: {e}");
                        }
                    }
                })
            })?;
        let robs = &robs;
        let requests = std::thread::Builder::new()
            .name("rob-requests".into())
            .spawn_scoped(scope, move || robs.forward(queues))?;
        let demux = Demux {
            inlet,
            hltsv,
            swrods: &swrods,
            robs,
            credits: &credits,
            peer_timeout: ctx.peer_timeout(),
        };
        let done = &done;
        let demux = std::thread::Builder::new()
            .name("net-demux".into())
            .spawn_scoped(scope, move || demux.run(l1_tx, done))?;
        let hlt = hlt_thread(
            s,
            config.run.number,
            l1_rx,
            ports,
            ToStore {
                storage: store_tx,
                sampler,
            },
            metrics,
            |global_id, accepted| credits.built(global_id, accepted),
        );
        let failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        // The HLT thread and its sampler are gone: the publisher has sent what it was given.
        let events_published = match publishing {
            Some(publishing) => Some(publishing.finish(hlt.dqm_samples)?),
            None => None,
        };
        let stored = writer.join().map_err(|_| failed("storage"))?;
        credits.flush();
        if !storage_failed.load(Ordering::Relaxed) {
            ctx.wait_for_stop();
        }
        done.store(true, Ordering::Release);
        report.refused_messages = demux.join().map_err(|_| failed("network demultiplexer"))?;
        let unsent_requests = requests.join().map_err(|_| failed("request"))?;
        report.undelivered = BTreeMap::from([
            ("rob_requests".to_string(), unsent_requests),
            ("credit_returns".to_string(), credits.undelivered()),
        ]);
        report.hlt = Some(HltAppReport {
            counts: hlt.counts,
            incomplete_examples: hlt.incomplete_examples,
            cpu_s: hlt.cpu_s,
            stored_events: stored.events,
            stored_flagged_events: stored.flagged,
            stored_bytes: stored.bytes,
            unwritten_events: stored.unwritten,
            files: stored.files,
            events_published,
            storage_error: stored.error,
        });
        Ok(())
    })?;
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

/// Events built since the last return, and events settled.
struct Pending {
    count: u32,
    settled: Vec<u64>,
    last: Instant,
    undelivered: u64,
    /// The supervisor has ended the run (or is gone): it takes no more returns.
    supervisor_ended: bool,
}

/// Credit and settled events back to the supervisor, gathered: at most `RETURN_AFTER` late.
/// A return never waits: the network demultiplexer makes them too, and a wait there (a
/// blocking send to a supervisor that had ended the run took its 1 s time-out per return)
/// left the inbox unread, so the `swrod` applications looked silent, were declared gone and
/// the last events lost their ROBs. A return the supervisor's inbox does not take is kept
/// and sent with the next.
struct CreditReturn {
    to: Outlet<SwrodMessage>,
    hlt: u16,
    pending: Mutex<Pending>,
}

const RETURN_EVERY: u32 = 32;
const RETURN_AFTER: Duration = Duration::from_millis(5);

impl CreditReturn {
    fn new(to: Outlet<SwrodMessage>, hlt: u16) -> Self {
        Self {
            to,
            hlt,
            pending: Mutex::new(Pending {
                count: 0,
                settled: Vec::new(),
                last: Instant::now(),
                undelivered: 0,
                supervisor_ended: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for `n` more events.
    fn ask(&self, n: u32) {
        let mut p = self.lock();
        p.count += n;
        self.send(&mut p);
    }

    fn built(&self, global_id: u64, accepted: bool) {
        let mut p = self.lock();
        p.count += 1;
        if !accepted {
            p.settled.push(global_id);
        }
        if p.count >= RETURN_EVERY || p.last.elapsed() >= RETURN_AFTER {
            self.send(&mut p);
        }
    }

    fn settled(&self, ids: Vec<u64>) {
        let mut p = self.lock();
        p.settled.extend(ids);
        self.send(&mut p);
    }

    fn flush_if_due(&self) {
        let mut p = self.lock();
        if p.last.elapsed() >= RETURN_AFTER {
            self.send(&mut p);
        }
    }

    /// The last return of the run: what the supervisor's inbox does not take now is counted
    /// undelivered.
    fn flush(&self) {
        let mut p = self.lock();
        self.send(&mut p);
        if !p.supervisor_ended && (p.count > 0 || !p.settled.is_empty()) {
            p.undelivered += 1;
        }
    }

    /// The supervisor has ended the run or is gone: no more returns.
    fn supervisor_ended(&self) {
        self.lock().supervisor_ended = true;
    }

    fn undelivered(&self) -> u64 {
        self.lock().undelivered
    }

    fn send(&self, p: &mut Pending) {
        p.last = Instant::now();
        if p.supervisor_ended || (p.count == 0 && p.settled.is_empty()) {
            return;
        }
        let message = SwrodMessage::HltRequest(HltRequest {
            hlt: self.hlt,
            count: std::mem::take(&mut p.count),
            settled: std::mem::take(&mut p.settled),
        });
        if self.to.try_send(&message).is_err()
            && let SwrodMessage::HltRequest(kept) = message
        {
            p.count += kept.count;
            p.settled.extend(kept.settled);
        }
    }
}

struct Demux<'a> {
    inlet: Inlet<SwrodMessage>,
    hltsv: u32,
    swrods: &'a [u32],
    robs: &'a Robs,
    credits: &'a CreditReturn,
    peer_timeout: Duration,
}

impl Demux<'_> {
    /// Passes L1 accepts to the HLT (until the supervisor's end of run, or its silence) and
    /// answers to the ROB ports, marks silent `swrod` applications gone, until `done`;
    /// returns the messages the inbox refused, by reason.
    fn run(mut self, l1_ids: Sender<L1Accept>, done: &AtomicBool) -> BTreeMap<String, u64> {
        let mut l1_ids = Some(l1_ids);
        let mut hltsv = Liveness::new([self.hltsv], self.peer_timeout);
        let mut swrods = Liveness::new(self.swrods.iter().copied(), self.peer_timeout);
        while !done.load(Ordering::Acquire) {
            if let Some(d) = self.inlet.receive(NET_WAKE) {
                let from_swrod = self.swrods.contains(&d.sender);
                match d.message {
                    SwrodMessage::ToHlt(ToHlt::Assigned(batch)) if d.sender == self.hltsv => {
                        if let Some(tx) = &l1_ids {
                            for l1a in batch {
                                let _ = tx.send(l1a);
                            }
                        }
                    }
                    SwrodMessage::ToHlt(ToHlt::EndOfRun) if d.sender == self.hltsv => {
                        l1_ids = None;
                        self.credits.supervisor_ended();
                    }
                    SwrodMessage::RobAnswers(answers) if from_swrod => {
                        self.robs.answer(answers, d.frames)
                    }
                    other => eprintln!(
                        "swdaq: hlt: ignored an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            let now = Instant::now();
            if !hltsv
                .newly_gone(|p| self.inlet.last_seen(p), now)
                .is_empty()
                && l1_ids.is_some()
            {
                eprintln!("swdaq: hlt: the HLT supervisor is gone; finishing what is in hand");
                l1_ids = None;
                self.credits.supervisor_ended();
            }
            for app in swrods.newly_gone(|p| self.inlet.last_seen(p), now) {
                let k = self.swrods.iter().position(|&a| a == app).expect("watched");
                eprintln!(
                    "swdaq: hlt: swrod application {app} is gone; its ROBs are missing from now on"
                );
                self.robs.app_gone(k);
            }
            self.credits.flush_if_due();
        }
        self.inlet.counts().refused.clone()
    }
}
