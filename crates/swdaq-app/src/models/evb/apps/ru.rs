//! A readout unit application (readout units 1..): builder units' fragment requests come on
//! its inbox; it sends each super-fragment to the builder unit that asked. It ends at the
//! launcher's `stop` (it stops last) or when every builder unit has gone silent.

use super::unit::{DEMUX_WAKE, EvbAppReport, EvbContext, position, start_readout_unit};
use crate::models::evb::wire::EvbMessage;
use crate::runtime::stdio::Command;
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_evb::message::FragmentRequest;
use swdaq_evb::pause::TriggerClock;
use swdaq_evb::ru::Ru;
use swdaq_net::{Inlet, Liveness, WireMessage};
use swdaq_trigger::TriggerControl;

pub fn run(ctx: &EvbContext) -> anyhow::Result<EvbAppReport> {
    let config = &ctx.config.builder();
    let index = 1 + position(ctx);
    let Some(unit) = start_readout_unit(ctx, index)? else {
        return Ok(EvbAppReport::default());
    };
    let mut report = EvbAppReport::default();
    // Requests are bounded by the builder units' credits.
    let (requests_tx, requests_rx) = crossbeam_channel::unbounded();
    let demux = Demux {
        inlet: unit.inlet,
        bus: unit.bu_ids,
        peer_timeout: ctx.peer_timeout(),
        stop: ctx.commands.stop_flag(),
        commands: ctx.commands.receiver(),
        clock: unit.producer.clock().clone(),
    };
    let demux = std::thread::Builder::new()
        .name("net-demux".into())
        .spawn(move || demux.run(requests_tx))?;
    let ru = Ru {
        index,
        producer: unit.producer,
        requests: Box::new(requests_rx),
        to_bus: unit.to_bus,
        capacity: config.ru_capacity,
        hold: config.ru_hold_timeout,
        max_events: config.max_events,
    };
    let (ru_report, producer) = ru.run(&unit.monitoring.registry)?;
    report.read_from(index, &producer);
    report.ru = Some(ru_report);
    report.refused_messages = demux
        .join()
        .map_err(|_| anyhow::anyhow!("the network demultiplexer panicked"))?;
    (report.seconds, report.thread_cpu) = ctx.finish(&unit.clock, unit.monitoring);
    Ok(report)
}

struct Demux {
    inlet: Inlet<EvbMessage>,
    bus: Vec<u32>,
    peer_timeout: Duration,
    stop: Arc<AtomicBool>,
    /// The launcher's commands: where the event manager's pause begins, and the resume.
    commands: Receiver<Command>,
    clock: TriggerClock,
}

impl Demux {
    /// Passes requests on (as from the builder unit that sent them) until `stop` or until
    /// every builder unit is gone; then the readout unit's inbox closes and it ends.
    fn run(mut self, requests: Sender<FragmentRequest>) -> BTreeMap<String, u64> {
        let mut liveness = Liveness::new(self.bus.iter().copied(), self.peer_timeout);
        let index_of = |app: u32| self.bus.iter().position(|&b| b == app);
        while !self.stop.load(Ordering::Acquire) {
            for command in self.commands.try_iter() {
                match command {
                    Command::PauseFrom(event) => self.clock.pause().pause_from(event),
                    Command::TriggerControl(TriggerControl::Resume) => self.clock.pause().resume(),
                    Command::Stop => {}
                    other => eprintln!("swdaq: ru: ignored {other:?}"),
                }
            }
            if let Some(d) = self.inlet.receive(DEMUX_WAKE) {
                match (d.message, index_of(d.sender)) {
                    (EvbMessage::FragmentRequest(mut r), Some(bu)) => {
                        r.bu = bu as u16;
                        let _ = requests.send(r);
                    }
                    (other, _) => eprintln!(
                        "swdaq: ru: ignored an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            let gone = liveness.newly_gone(|p| self.inlet.last_seen(p), Instant::now());
            for app in gone {
                eprintln!("swdaq: ru: builder unit application {app} is gone");
            }
            if liveness.gone().len() == self.bus.len() {
                eprintln!("swdaq: ru: every builder unit is gone; stopping");
                break;
            }
        }
        self.inlet.counts().refused.clone()
    }
}
