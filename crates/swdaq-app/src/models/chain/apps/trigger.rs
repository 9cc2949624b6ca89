//! The trigger application: the same trigger node as in one process, fed from its inbox
//! (TP batches and link ends from the readout applications, credits from the orchestrator)
//! and sending its decisions to the orchestrator, then `End` once it has issued the last.
//! It starts without credit: every credit is a builder's room, passed on by the orchestrator.

use crate::models::chain::config::RunConfig;
use crate::models::chain::metrics::TriggerMetrics;
use crate::models::chain::system::{RunReport, sources_of};
use crate::models::chain::wire::ChainMessage;
use crate::runtime::app::AppContext;
use crate::runtime::stdio::Command;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::TriggerInput;
use swdaq_dataflow::nodes::run_trigger;
use swdaq_dataflow::transport::{Inbox, Received};
use swdaq_net::{Inlet, WireMessage};
use swdaq_trigger::Trigger;

/// The trigger wakes at once for a message; this only bounds how often it looks at the
/// clock when nothing comes (late links, held decisions).
const TRIGGER_POLL: Duration = Duration::from_millis(5);

pub fn run(ctx: &AppContext<RunConfig>) -> anyhow::Result<RunReport> {
    let config = &ctx.config;
    let links = config.emulator.links as usize;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let (dfo, _) = config.topology.single(super::DFO);
    let decisions = ctx.outlet_to(dfo)?;
    let readout_ids = ctx.ids_of(super::READOUT);
    let readouts = ctx.outlets_to(&readout_ids)?;
    let mut everyone = readouts.clone();
    everyone.push(decisions.clone());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let trigger = Trigger::new(
        config.trigger.clone(),
        config.source.frame_format().clock_hz(),
        links,
        sources_of(links),
        0,
        Instant::now(),
    )?;
    let mut metrics = TriggerMetrics::register(&monitoring.registry)?;
    let stop = ctx.commands.stop_flag();
    let (clock, started) = ctx.ready()?;
    let inlet = Arc::new(Mutex::new(inlet));
    let input = TriggerInbox {
        inlet: Arc::clone(&inlet),
        commands: ctx.commands.receiver(),
        stop: if started {
            stop
        } else {
            Arc::new(AtomicBool::new(true))
        },
        stop_given: RefCell::new(false),
    };
    let drain_wait = Duration::from_millis(config.dataflow.record_timeout_ms) * 2;
    let trigger = run_trigger(
        trigger,
        links,
        input,
        decisions.clone(),
        TRIGGER_POLL,
        drain_wait,
        |t, last| metrics.publish(t, last),
    );
    if decisions.send(&ChainMessage::End).is_err() {
        eprintln!(
            "swdaq app {}: the orchestrator did not take the end of decisions",
            ctx.spec.name
        );
    }
    // Readout stops sending TPs once told; what is already on its way is taken and dropped
    // here rather than counted there as refused.
    for r in &readouts {
        let _ = r.send(&ChainMessage::End);
    }
    let mut inlet = inlet.lock().unwrap_or_else(|e| e.into_inner());
    let drain_until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < drain_until {
        inlet.receive(Duration::from_millis(20));
    }
    let mut report = RunReport {
        trigger,
        refused_messages: inlet.counts().refused.clone(),
        ..Default::default()
    };
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

/// The trigger's input from the inbox; the launcher's `stop` becomes the node's `Stop`.
struct TriggerInbox {
    inlet: Arc<Mutex<Inlet<ChainMessage>>>,
    /// The launcher's commands: run-control requests come this way.
    commands: crossbeam_channel::Receiver<Command>,
    stop: Arc<AtomicBool>,
    stop_given: RefCell<bool>,
}

impl Inbox<TriggerInput> for TriggerInbox {
    fn receive(&self, wait: Duration) -> Received<TriggerInput> {
        if self.stop.load(Ordering::Acquire) && !self.stop_given.replace(true) {
            return Received::Message(TriggerInput::Stop);
        }
        if let Ok(Command::TriggerControl(c)) = self.commands.try_recv() {
            return Received::Message(TriggerInput::Control(c));
        }
        let received = self
            .inlet
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .receive(wait);
        let Some(d) = received else {
            return Received::Nothing;
        };
        match d.message {
            ChainMessage::Tps(batch) => Received::Message(TriggerInput::Tps(batch.into())),
            ChainMessage::LinkEnded { link } => {
                Received::Message(TriggerInput::LinkEnded(link as usize))
            }
            ChainMessage::Credits { n } => Received::Message(TriggerInput::Credits(n)),
            ChainMessage::TriggerControl(c) => Received::Message(TriggerInput::Control(c)),
            other => {
                eprintln!(
                    "swdaq: trigger got an unexpected {} from application {}",
                    other.kind(),
                    d.sender
                );
                Received::Nothing
            }
        }
    }
}
