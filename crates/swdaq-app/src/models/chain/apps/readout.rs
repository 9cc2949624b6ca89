//! The readout application: its links' readout threads and request server, as in one
//! process, plus two network threads that wait on their inputs (no polling): inbound takes
//! requests from the inbox to the server; outbound sends fragments back to the builder each
//! request names and TP batches to the trigger.
//!
//! TPs never hold readout up: a batch the trigger does not take at once is dropped and
//! counted on its link. A fragment for a builder declared gone is dropped and counted;
//! to a live builder it waits up to the send time-out.

use crate::models::chain::config::RunConfig;
use crate::models::chain::inputs::{prepare, truth_at_end};
use crate::models::chain::readout::{ReadoutControl, start_readout};
use crate::models::chain::recording::Recordings;
use crate::models::chain::system::{RunReport, TP_QUEUE, spawn_request_server};
use crate::models::chain::wire::ChainMessage;
use crate::runtime::app::{AppContext, Clock};
use crate::runtime::stdio::Command;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::TriggerInput;
use swdaq_dataflow::transport::local;
use swdaq_net::{AppId, Inlet, Liveness, NetOptions, Outlet, WireMessage};
use swdaq_readout::request::DataRequest;
use swdaq_readout::server::DataResponse;

pub fn run(ctx: &AppContext<RunConfig>) -> anyhow::Result<RunReport> {
    let config = &ctx.config;
    let inputs = prepare(config, &super::links_of(&ctx.spec)?)?;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let (trigger, _) = ctx.config.topology.single(super::TRIGGER);
    // TP batches are small and must not be refused while the trigger catches up: queue as
    // many as the one-process chain does.
    let tp_options = NetOptions {
        queue_messages: TP_QUEUE as i32,
        ..ctx.options
    };
    let trigger = Outlet::connect(
        &ctx.zmq,
        &config.topology.apps[trigger as usize].address,
        ctx.me,
        &tp_options,
    )?;
    let builder_ids = ctx.builders();
    let builders = ctx.outlets_to(&builder_ids)?;
    let mut everyone = builders.clone();
    everyone.push(trigger.clone());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let (tp_tx, tp_rx) = local::<TriggerInput>(TP_QUEUE);
    let (request_tx, request_rx) = local::<DataRequest>(1 << 14);
    let (response_tx, response_rx) = local::<DataResponse>(1 << 14);
    let control = ReadoutControl::default();
    let builders_gone: Arc<Vec<AtomicBool>> =
        Arc::new(builder_ids.iter().map(|_| AtomicBool::new(false)).collect());
    let readout_ended = AtomicBool::new(false);
    let clock = Clock::start();
    let mut report = std::thread::scope(|s| -> anyhow::Result<RunReport> {
        let mut readout = start_readout(s, config, &inputs, &control, &monitoring.registry, tp_tx)?;
        let server = spawn_request_server(
            s,
            config,
            &monitoring.registry,
            &mut readout,
            request_rx,
            response_tx,
        )?;
        let trigger_stopped = Arc::new(AtomicBool::new(false));
        let inbound = Inbound {
            inlet,
            trigger_stopped: Arc::clone(&trigger_stopped),
            liveness: Liveness::new(builder_ids.iter().copied(), ctx.peer_timeout()),
            builder_ids: builder_ids.clone(),
            builders_gone: Arc::clone(&builders_gone),
        };
        let readout_ended = &readout_ended;
        let inbound = std::thread::Builder::new()
            .name("net-in".into())
            .spawn_scoped(s, move || inbound.run(request_tx, readout_ended))?;
        let outbound = Outbound {
            trigger,
            builders,
            builders_gone: Arc::clone(&builders_gone),
            trigger_stopped,
            tp_dropped: HashMap::new(),
            fragments_dropped: 0,
        };
        let outbound = std::thread::Builder::new()
            .name("net-out".into())
            .spawn_scoped(s, move || outbound.run(tp_rx, response_rx))?;
        let recordings = Recordings::start(config, readout.links(), &monitoring.registry)?;
        crate::runtime::stdio::say_ready()?;
        let mut report = RunReport::default();
        if ctx.commands.wait_for_start() {
            control.go();
            let commands = ctx.commands.receiver();
            while !ctx.commands.stop_requested() {
                match commands.recv_timeout(Duration::from_millis(100)) {
                    Ok(Command::Record(seconds)) => {
                        Recordings::on_command(recordings.as_deref(), seconds, &ctx.spec.name)
                    }
                    Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                    _ => {}
                }
            }
            // While the readout threads still run, for their CPU shares.
            (report.seconds, report.thread_cpu) = clock.cpu(&ctx.spec.name);
        }
        control.stop();
        let mut outcome = readout.join(truth_at_end(config).as_ref())?;
        readout_ended.store(true, Ordering::Release);
        let joined = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        report.refused_messages = inbound.join().map_err(|_| joined("inbound"))?;
        let (tp_dropped, fragments_dropped) = outbound.join().map_err(|_| joined("outbound"))?;
        for link in &mut outcome.links {
            link.tp_batches_dropped += tp_dropped.get(&link.source_id).copied().unwrap_or(0);
        }
        if fragments_dropped > 0 {
            eprintln!(
                "swdaq app {}: {fragments_dropped} fragments not delivered (builder gone or not taking them)",
                ctx.spec.name
            );
        }
        (report.server, report.roi_coverage) =
            server.join().map_err(|_| joined("request server"))?;
        report.recording = recordings.map(|r| r.finish());
        report.links = outcome.links;
        report.hit_finding = outcome.hit_finding;
        Ok(report)
    })?;
    if report.thread_cpu.is_empty() {
        (report.seconds, report.thread_cpu) = clock.cpu(&ctx.spec.name);
    }
    monitoring.stop();
    Ok(report)
}

/// Requests from the inbox to the request server, and which builders have gone silent.
struct Inbound {
    inlet: Inlet<ChainMessage>,
    /// Set when the trigger says it has ended.
    trigger_stopped: Arc<AtomicBool>,
    liveness: Liveness,
    builder_ids: Vec<AppId>,
    builders_gone: Arc<Vec<AtomicBool>>,
}

impl Inbound {
    /// Runs until the readout has ended; then dropping the request channel tells the server
    /// to answer what waits and finish.
    /// Returns the messages the inbox refused, by reason.
    fn run(
        mut self,
        requests: Sender<DataRequest>,
        readout_ended: &AtomicBool,
    ) -> BTreeMap<String, u64> {
        while !readout_ended.load(Ordering::Acquire) {
            if let Some(d) = self.inlet.receive(Duration::from_millis(50)) {
                match d.message {
                    ChainMessage::Request(req) => {
                        let _ = requests.send(req);
                    }
                    ChainMessage::End => self.trigger_stopped.store(true, Ordering::Release),
                    other => eprintln!(
                        "swdaq: readout got an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            for gone in self
                .liveness
                .newly_gone(|p| self.inlet.last_seen(p), Instant::now())
            {
                eprintln!("swdaq: readout: builder application {gone} is gone");
                if let Some(k) = self.builder_ids.iter().position(|&b| b == gone) {
                    self.builders_gone[k].store(true, Ordering::Release);
                }
            }
        }
        self.inlet.counts().refused.clone()
    }
}

/// TP batches to the trigger and fragments to the builders that asked.
struct Outbound {
    trigger: Outlet<ChainMessage>,
    /// By element id (the builder's index among builders).
    builders: Vec<Outlet<ChainMessage>>,
    builders_gone: Arc<Vec<AtomicBool>>,
    /// Once the trigger has ended nobody takes TPs: they go nowhere, uncounted (as in one
    /// process).
    trigger_stopped: Arc<AtomicBool>,
    tp_dropped: HashMap<u32, u64>,
    fragments_dropped: u64,
}

impl Outbound {
    /// Runs until every readout thread has ended and the server has answered all it had;
    /// returns TP batches dropped per link and fragments not delivered.
    fn run(
        mut self,
        tps: Receiver<TriggerInput>,
        responses: Receiver<DataResponse>,
    ) -> (HashMap<u32, u64>, u64) {
        let mut tps = Some(tps);
        loop {
            let never = crossbeam_channel::never();
            crossbeam_channel::select! {
                recv(tps.as_ref().unwrap_or(&never)) -> input => match input {
                    Ok(input) => self.send_tps(input),
                    Err(_) => tps = None,
                },
                recv(responses) -> response => match response {
                    Ok(r) => self.send_fragment(r),
                    Err(_) => return (self.tp_dropped, self.fragments_dropped),
                },
            }
        }
    }
    fn send_tps(&mut self, input: TriggerInput) {
        if self.trigger_stopped.load(Ordering::Acquire) {
            return;
        }
        let link = match &input {
            TriggerInput::Tps(b) => Some(b.link as u32),
            _ => None,
        };
        let message = ChainMessage::from(input);
        // Link ends must arrive; batches must not hold readout up.
        let sent = match link {
            Some(_) => self.trigger.try_send(&message),
            None => self.trigger.send(&message),
        };
        if let (Err(_), Some(link)) = (sent, link) {
            *self.tp_dropped.entry(link).or_default() += 1;
        }
    }

    fn send_fragment(&mut self, r: DataResponse) {
        let element = r.request.destination as usize;
        let delivered = match self.builders.get(element) {
            Some(outlet) if !self.builders_gone[element].load(Ordering::Acquire) => {
                let meta = ChainMessage::Fragment {
                    request: r.request,
                    outcome: r.outcome,
                    latency_us: r.latency.as_micros() as u64,
                };
                outlet.send_fragment(&meta, r.fragment).is_ok()
            }
            _ => false,
        };
        self.fragments_dropped += !delivered as u64;
    }
}
