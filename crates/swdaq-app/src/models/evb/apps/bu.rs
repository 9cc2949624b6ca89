//! A builder unit application: assignments from the event manager and super-fragments from
//! the readout units come on its inbox; it asks the event manager for events (reporting what
//! its writer settled), asks the readout units for their super-fragments without ever
//! waiting on one, and writes its own files under `<run.output_dir>/<name>/`. A silent event
//! manager ends its run as the event manager's end-of-run would.

use super::unit::{DEMUX_WAKE, EvbAppReport, EvbContext, position};
use crate::models::evb::wire::EvbMessage;
use crate::runtime::dqm_stream::publish_samples;
use crate::runtime::stdio as control;
use crossbeam_channel::Sender;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::Outbox;
use swdaq_evb::bu::{Bu, run_writer, writer_counters};
use swdaq_evb::build::EventBuilder;
use swdaq_evb::farm::{ClosedFile, FarmMetrics, run_consumer};
use swdaq_evb::files::{FileWriter, WriterConfig};
use swdaq_evb::message::{FragmentRequest, ToBu};
use swdaq_net::{Immediate, Inlet, Liveness, WireMessage};

/// Built events waiting for the writer (as in one process).
const WRITER_QUEUE: usize = 256;

pub fn run(ctx: &EvbContext) -> anyhow::Result<EvbAppReport> {
    let config = &ctx.config.builder();
    let index = position(ctx);
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let (evm_id, _) = ctx.config.topology.single(super::EVM);
    let ru_ids = ctx.ids_of(super::RU);
    let evm = ctx.outlet_to(evm_id)?;
    let rus = ctx.outlets_to::<EvbMessage>(&ru_ids)?;
    let mut everyone = rus.clone();
    everyone.push(evm.clone());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let directory = config.output.join(&ctx.spec.name);
    if let Some(warning) = swdaq_evb::ramdisk::advice(&directory) {
        eprintln!("{warning}");
    }
    let mut file_writer = FileWriter::new(WriterConfig {
        directory,
        run: config.run,
        events_per_file: config.events_per_file,
        min_free_bytes: config.min_free_bytes,
        disk_full: config.disk_full,
        source: ctx.spec.name.clone(),
        provenance: config.provenance.clone(),
    })?;
    let counters = writer_counters(&monitoring.registry, index)?;
    // This unit's filter farm, as in one process: its consumers take the writer's closed
    // files and end once the writer has finished.
    let (closed_tx, closed_rx) = crossbeam_channel::unbounded::<ClosedFile>();
    let mut consumers = Vec::new();
    let filters = config.farm.filters().map_err(anyhow::Error::msg)?;
    for (c, filter) in (0..).zip(filters) {
        let metrics = FarmMetrics::register(&monitoring.registry, c)?;
        consumers.push((closed_rx.clone(), metrics, filter));
    }
    if !consumers.is_empty() {
        file_writer = file_writer.notify_closed(closed_tx);
    }
    // Every Nth event it hands its writer published for the supervisor's monitoring
    // (`event_stream`), by a thread of its own: the unit never waits for it.
    let publishing = match super::EVENT_STREAMS.open(&ctx.zmq, &ctx.spec, &ctx.config.dqm)? {
        Some((publisher, every)) => Some(publish_samples(
            publisher,
            every,
            ctx.config.dqm.queue,
            &monitoring.registry,
        )?),
        None => None,
    };
    let (sampler, publishing) = publishing.unzip();
    let (clock, started) = ctx.ready()?;
    let mut report = EvbAppReport::default();
    if !started {
        return Ok(report);
    }
    let (events_tx, events_rx) = crossbeam_channel::bounded(WRITER_QUEUE);
    let (settled_tx, settled_rx) = crossbeam_channel::unbounded();
    let writer_failed = AtomicBool::new(false);
    // Bounded by what this unit asked for.
    let (inbox_tx, inbox_rx) = crossbeam_channel::unbounded();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let farm = consumers
            .into_iter()
            .enumerate()
            .map(|(c, (files, metrics, filter))| {
                std::thread::Builder::new()
                    .name(format!("farm-{c}"))
                    .spawn_scoped(s, move || run_consumer(files, metrics, filter))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let writer = std::thread::Builder::new()
            .name("evb-writer".into())
            .spawn_scoped(s, || {
                run_writer(events_rx, file_writer, counters, settled_tx, |e| {
                    writer_failed.store(true, Ordering::Relaxed);
                    // The run stops, as in one process: the launcher is told at once.
                    if let Err(told) = control::say_storage_failed(&format!("its writer: {e}")) {
                        eprintln!("cannot tell the launcher storage failed: {told}");
                    }
                })
            })?;
        let demux = Demux {
            inlet,
            evm: evm_id,
            rus: &ru_ids,
            peer_timeout: ctx.peer_timeout(),
            done: &done,
        };
        let demux = std::thread::Builder::new()
            .name("net-demux".into())
            .spawn_scoped(s, move || demux.run(inbox_tx))?;
        let evb = config.clone();
        let unit = Bu {
            index,
            lumi_of: Box::new(move |t| evb.lumi_of(t)),
            builder: EventBuilder::new(config.run, config.rus.len(), config.build_timeout),
            request_batch: config.request_batch,
            capacity: config.bu_capacity,
            to_evm: Box::new(evm.clone()),
            settled: settled_rx,
            to_rus: rus
                .iter()
                .map(|o| Box::new(Immediate(o.clone())) as Box<dyn Outbox<FragmentRequest>>)
                .collect(),
            inbox: Box::new(inbox_rx),
            writer: events_tx,
            die_after: None,
            sampler,
        };
        let bu_report = unit.run(&monitoring.registry)?;
        // The unit and its sampler are gone: the publisher has sent what it was given.
        if let Some(publishing) = publishing {
            report.events_published = Some(publishing.finish(bu_report.dqm_samples)?);
        }
        let outcome = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the writer panicked"))?;
        report.bu = Some(bu_report);
        report.writer = Some((outcome.counts, outcome.error.map(|e| e.to_string())));
        // The writer has finished: its closed files are all with the farm.
        for consumer in farm {
            let consumed = consumer
                .join()
                .map_err(|_| anyhow::anyhow!("a filter-farm consumer panicked"))?;
            report.farm.get_or_insert_default().merge(consumed);
        }
        if !writer_failed.load(Ordering::Relaxed) {
            ctx.wait_for_stop();
        }
        done.store(true, Ordering::Release);
        report.refused_messages = demux
            .join()
            .map_err(|_| anyhow::anyhow!("the network demultiplexer panicked"))?;
        Ok(())
    })?;
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

struct Demux<'a> {
    inlet: Inlet<EvbMessage>,
    evm: u32,
    rus: &'a [u32],
    peer_timeout: Duration,
    done: &'a AtomicBool,
}

impl Demux<'_> {
    /// Passes the event manager's and readout units' messages on; a silent event manager
    /// ends the run for this unit. Returns the messages the inbox refused, by reason.
    fn run(mut self, inbox: Sender<ToBu>) -> BTreeMap<String, u64> {
        let mut evm = Liveness::new([self.evm], self.peer_timeout);
        let mut ended = false;
        while !self.done.load(Ordering::Acquire) {
            if let Some(d) = self.inlet.receive(DEMUX_WAKE) {
                let known = d.sender == self.evm || self.rus.contains(&d.sender);
                match d.message {
                    EvbMessage::ToBu(m) if known => {
                        ended |= matches!(m, ToBu::EndOfRun { .. });
                        let _ = inbox.send(m);
                    }
                    other => eprintln!(
                        "swdaq: bu: ignored an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            let silent = !evm
                .newly_gone(|p| self.inlet.last_seen(p), Instant::now())
                .is_empty();
            if silent && !ended {
                eprintln!("swdaq: bu: the event manager is gone; finishing what is in hand");
                ended = true;
                let _ = inbox.send(ToBu::EndOfRun { last_lumi: None });
            }
        }
        self.inlet.counts().refused.clone()
    }
}
