//! The event manager application: readout unit 0 with the trigger. Builder units' requests
//! come on its inbox; a builder unit silent for the peer time-out is declared gone to the
//! event manager, which counts the events it had not settled lost, by number.

use super::unit::{DEMUX_WAKE, EvbAppReport, EvbContext, start_readout_unit};
use crate::models::evb::wire::EvbMessage;
use crate::runtime::stdio::{self as control, Command};
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_evb::evm::Evm;
use swdaq_evb::message::ToEvm;
use swdaq_evb::pause::TriggerPause;
use swdaq_net::{Inlet, Liveness, WireMessage};
use swdaq_trigger::TriggerControl;

pub fn run(ctx: &EvbContext) -> anyhow::Result<EvbAppReport> {
    let Some(unit) = start_readout_unit(ctx, 0)? else {
        return Ok(EvbAppReport::default());
    };
    let mut report = EvbAppReport::default();
    // Requests are few (one per batch of events): unbounded, so the demultiplexer never
    // waits on an event manager that has finished.
    let (requests_tx, requests_rx) = crossbeam_channel::unbounded();
    let done = AtomicBool::new(false);
    let clock = unit.producer.clock().clone();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let demux = Demux {
            inlet: unit.inlet,
            bus: &unit.bu_ids,
            peer_timeout: ctx.peer_timeout(),
            done: &done,
            pauses: PauseAnswer::new(clock.pause(), ctx.commands.receiver()),
        };
        let demux = std::thread::Builder::new()
            .name("net-demux".into())
            .spawn_scoped(s, move || demux.run(requests_tx))?;
        let evm = Evm {
            producer: unit.producer,
            requests: Box::new(requests_rx),
            to_bus: unit.to_bus,
            stop: ctx.commands.stop_flag(),
            max_events: ctx.config.evb.max_events,
            lumi_of: {
                let evb = ctx.config.evb.clone();
                Box::new(move |t| evb.lumi_of(t))
            },
        };
        let (evm_report, producer) = evm.run(&unit.monitoring.registry)?;
        report.read_from(0, &producer);
        report.evm = Some(evm_report);
        ctx.wait_for_stop();
        done.store(true, Ordering::Release);
        report.refused_messages = demux
            .join()
            .map_err(|_| anyhow::anyhow!("the network demultiplexer panicked"))?;
        Ok(())
    })?;
    (report.seconds, report.thread_cpu) = ctx.finish(&unit.clock, unit.monitoring);
    Ok(report)
}

struct Demux<'a> {
    inlet: Inlet<EvbMessage>,
    bus: &'a [u32],
    peer_timeout: Duration,
    done: &'a AtomicBool,
    pauses: PauseAnswer<'a>,
}

/// Run control's pause and resume, from the launcher: a pause is asked of the event manager,
/// which fixes its point at its next event; the point is told back to the launcher (which
/// passes it to every readout unit) with the pause's number, so an answer that crossed a
/// resume is known stale.
struct PauseAnswer<'a> {
    pause: &'a TriggerPause,
    commands: Receiver<Command>,
    asked: u64,
    answered: u64,
}

impl<'a> PauseAnswer<'a> {
    fn new(pause: &'a TriggerPause, commands: Receiver<Command>) -> Self {
        Self {
            pause,
            commands,
            asked: 0,
            answered: 0,
        }
    }

    fn take_commands(&mut self) {
        for command in self.commands.try_iter() {
            match command {
                Command::TriggerControl(TriggerControl::Pause) => {
                    self.asked += 1;
                    self.pause.request();
                }
                Command::TriggerControl(TriggerControl::Resume) => {
                    self.answered = self.asked;
                    self.pause.resume();
                }
                // `stop` is the launcher's flag, read by the application's main thread.
                Command::Stop => {}
                other => eprintln!("swdaq: evm: ignored {other:?}"),
            }
        }
        if self.answered < self.asked
            && let Some(event) = self.pause.point()
        {
            self.answered = self.asked;
            if let Err(e) = control::say_paused_from(event, self.asked) {
                eprintln!("swdaq: evm: cannot tell the launcher where the pause begins: {e}");
            }
        }
    }
}

impl Demux<'_> {
    /// Passes builder units' requests on (as from the unit that sent them) and declares
    /// silent ones gone; returns the messages the inbox refused, by reason.
    fn run(mut self, requests: Sender<ToEvm>) -> BTreeMap<String, u64> {
        let mut liveness = Liveness::new(self.bus.iter().copied(), self.peer_timeout);
        let index_of = |app: u32| self.bus.iter().position(|&b| b == app);
        while !self.done.load(Ordering::Acquire) {
            self.pauses.take_commands();
            if let Some(d) = self.inlet.receive(DEMUX_WAKE) {
                match (d.message, index_of(d.sender)) {
                    (EvbMessage::Request(mut r), Some(bu)) => {
                        r.bu = bu as u16;
                        let _ = requests.send(ToEvm::Request(r));
                    }
                    (other, _) => eprintln!(
                        "swdaq: evm: ignored an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            for app in liveness.newly_gone(|p| self.inlet.last_seen(p), Instant::now()) {
                let bu = index_of(app).expect("watching builder units only") as u16;
                eprintln!("swdaq: evm: builder unit {bu} is gone; its unsettled events are lost");
                let _ = requests.send(ToEvm::BuGone(bu));
            }
        }
        self.inlet.counts().refused.clone()
    }
}
