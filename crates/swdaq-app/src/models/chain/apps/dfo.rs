//! The dataflow orchestrator application: decisions from the trigger go to builders by credit
//! (`swdaq_dataflow::orchestrator`), builders' credits go on to the trigger, and a builder
//! silent for the peer time-out is declared gone: its unfinished records go to the others.
//!
//! It ends once the trigger has sent `End` (or, told to stop, once the trigger is silent),
//! nothing waits and every builder has finished what it was given; then it tells each live
//! builder `End`.

use crate::models::chain::config::RunConfig;
use crate::models::chain::metrics::DfoMetrics;
use crate::models::chain::system::RunReport;
use crate::models::chain::wire::ChainMessage;
use crate::runtime::app::AppContext;
use std::time::{Duration, Instant};
use swdaq_dataflow::orchestrator::Orchestrator;
use swdaq_net::{Liveness, Outlet, WireMessage};

pub fn run(ctx: &AppContext<RunConfig>) -> anyhow::Result<RunReport> {
    let config = &ctx.config;
    let mut inlet = ctx.bind_inbox()?;
    let (trigger_id, _) = config.topology.single(super::TRIGGER);
    let trigger = ctx.outlet_to(trigger_id)?;
    let builder_ids = ctx.builders();
    let builders = ctx.outlets_to(&builder_ids)?;
    let mut everyone = builders.clone();
    everyone.push(trigger.clone());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let monitoring = ctx.monitoring()?;
    let mut metrics = DfoMetrics::register(&monitoring.registry)?;
    let (clock, started) = ctx.ready()?;
    let mut orchestrator = Orchestrator::new(builders.len());
    let mut liveness = Liveness::new(builder_ids.iter().copied(), ctx.peer_timeout());
    let mut trigger_liveness = Liveness::new([trigger_id], ctx.peer_timeout());
    let mut trigger_ended = !started;
    let index_of = |app: u32| builder_ids.iter().position(|&b| b == app);
    let mut credits = CreditRelay {
        trigger: &trigger,
        owed: 0,
    };
    loop {
        // Wakes at once for a message; the wait only bounds how often liveness is checked.
        if let Some(d) = inlet.receive(Duration::from_millis(20)) {
            match (d.message, index_of(d.sender)) {
                (ChainMessage::Decision(decision), None) => orchestrator.on_decision(decision),
                (ChainMessage::End, None) => trigger_ended = true,
                (ChainMessage::BuilderCredits { n }, Some(b)) if !orchestrator.is_gone(b) => {
                    orchestrator.add_credits(b, n);
                    credits.pass_on(n, trigger_ended);
                }
                (ChainMessage::RecordDone { trigger_number }, Some(b)) => {
                    orchestrator.on_done(b, trigger_number);
                    if !orchestrator.is_gone(b) {
                        orchestrator.add_credits(b, 1);
                        credits.pass_on(1, trigger_ended);
                    }
                }
                (other, _) => eprintln!(
                    "swdaq: dfo: ignored an unexpected {} from application {}",
                    other.kind(),
                    d.sender
                ),
            }
        }
        let now = Instant::now();
        for app in liveness.newly_gone(|p| inlet.last_seen(p), now) {
            let b = index_of(app).expect("watching builders only");
            eprintln!(
                "swdaq: dfo: builder {} is gone; its unfinished records go to the others",
                config.topology.apps[app as usize].name
            );
            orchestrator.builder_gone(b);
        }
        if ctx.commands.stop_requested()
            && !trigger_liveness
                .newly_gone(|p| inlet.last_seen(p), now)
                .is_empty()
        {
            trigger_ended = true;
        }
        credits.pass_on(0, trigger_ended);
        for (b, decision) in orchestrator.dispatch() {
            if builders[b].send(&ChainMessage::Decision(decision)).is_err() {
                eprintln!("swdaq: dfo: builder {b} does not take decisions; counted as gone");
                orchestrator.builder_gone(b);
            }
        }
        metrics.publish(&orchestrator);
        if trigger_ended && orchestrator.waiting() == 0 && orchestrator.outstanding() == 0 {
            break;
        }
    }
    for (b, outlet) in builders.iter().enumerate() {
        if !orchestrator.is_gone(b) {
            let _ = outlet.send(&ChainMessage::End);
        }
    }
    let mut report = RunReport {
        dataflow: Some(orchestrator.finish()),
        refused_messages: inlet.counts().refused.clone(),
        ..Default::default()
    };
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

/// Passes builders' credits on to the trigger without ever waiting for it: what its queue
/// cannot take now is owed and goes with the next attempt; after the trigger's end, nothing.
struct CreditRelay<'a> {
    trigger: &'a Outlet<ChainMessage>,
    owed: u64,
}

impl CreditRelay<'_> {
    fn pass_on(&mut self, n: u64, trigger_ended: bool) {
        self.owed += n;
        let delivered = trigger_ended
            || self.owed == 0
            || self
                .trigger
                .try_send(&ChainMessage::Credits { n: self.owed })
                .is_ok();
        if delivered {
            self.owed = 0;
        }
    }
}
