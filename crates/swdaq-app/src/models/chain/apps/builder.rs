//! The builder application: the same record-building loop as in one process, with decisions
//! from the orchestrator, requests to the readout application of each source, fragments from
//! the readout applications, and its credits (room at start, one per record stored) back to
//! the orchestrator. It writes its own file sequence (`swdaq_<name>_run…`), and may publish
//! every Nth record on a ZeroMQ PUB socket for online monitoring (`record_stream`): one
//! multipart message per record, the DUNE trigger-record header then each fragment as stored.
//! With `[dqm]` on, the process supervising the topology subscribes to it and reads each
//! message back with [`fill_published`] (`runtime::dqm_stream`).

use crate::models::chain::config::RunConfig;
use crate::models::chain::metrics::BuilderMetrics;
use crate::models::chain::sink::StorageSink;
use crate::models::chain::system::{
    RunReport, STORAGE_STOPPED, build_records, builder_config, fill_dqm, sources_of,
};
use crate::models::chain::wire::ChainMessage;
use crate::runtime::app::{AppContext, Clock};
use crate::runtime::dqm_stream::{SUBSCRIBER_WAIT, SamplePublisher, StreamMessage};
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_dataflow::nodes::BuilderPorts;
use swdaq_dataflow::transport::local;
use swdaq_dataflow::{RecordBuilder, RecordSink, SinkError, StorageFailurePolicy};
use swdaq_dqm::HistSet;
use swdaq_format::{SourceId, TriggerRecord, TriggerRecordHeader};
use swdaq_net::{Immediate, Inlet, Liveness, WireMessage};
use swdaq_readout::server::DataResponse;
use swdaq_trigger::TriggerDecision;

pub fn run(ctx: &AppContext<RunConfig>) -> anyhow::Result<RunReport> {
    let config = &ctx.config;
    let topology = &config.topology;
    let element = ctx
        .builders()
        .iter()
        .position(|&b| b == ctx.me)
        .expect("a builder is among the builders") as u32;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let (dfo_id, _) = topology.single(super::DFO);
    let dfo = ctx.outlet_to(dfo_id)?;
    // Each source's requests go to the readout application that has its link, never waiting:
    // a request a dead readout cannot take is counted, its fragment missing from the record.
    let mut routes: HashMap<SourceId, Immediate<ChainMessage>> = HashMap::new();
    let mut outlets = vec![dfo.clone()];
    for (id, links) in super::readouts(topology)? {
        let outlet = ctx.outlet_to(id)?;
        for link in links {
            routes.insert(SourceId::readout(link), Immediate(outlet.clone()));
            routes.insert(SourceId::trigger(link), Immediate(outlet.clone()));
        }
        outlets.push(outlet);
    }
    debug_assert!(
        sources_of(config.emulator.links as usize)
            .iter()
            .all(|s| routes.contains_key(s))
    );
    let _heartbeat = ctx.connect_and_heartbeat(outlets)?;
    let prefix = format!("swdaq_{}", ctx.spec.name);
    let storage = StorageSink::start(config, &prefix, &ctx.spec.name, &monitoring.registry)?;
    let mut sink = StreamingSink {
        storage,
        stream: RecordStream::open(ctx)?,
    };
    let storage_failed = sink.storage.failure_flag();
    let stops_on_failure = config.storage.on_failure == StorageFailurePolicy::Stop;
    let metrics = BuilderMetrics::register(&monitoring.registry)?;
    let builder = RecordBuilder::new(builder_config(config, element));
    crate::runtime::stdio::say_ready()?;
    let clock = Clock::start();
    let (decision_tx, decision_rx) = local::<TriggerDecision>(1024);
    let (response_tx, response_rx) = local::<DataResponse>(1 << 14);
    let done = Arc::new(AtomicBool::new(false));
    let mut report = std::thread::scope(|s| -> anyhow::Result<RunReport> {
        let demux = Demux {
            inlet,
            dfo: dfo_id,
            peer_timeout: ctx.peer_timeout(),
            stop: ctx.commands.stop_flag(),
            done: Arc::clone(&done),
        };
        let demux = std::thread::Builder::new()
            .name("net-demux".into())
            .spawn_scoped(s, move || demux.run(decision_tx, response_tx))?;
        if stops_on_failure {
            let done = &done;
            let failed = &storage_failed;
            std::thread::Builder::new()
                .name("storage-watch".into())
                .spawn_scoped(s, move || tell_launcher_when_storage_fails(failed, done))?;
        }
        if ctx.commands.wait_for_start() {
            let credits = config.dataflow.max_records_in_flight as u64;
            dfo.send(&ChainMessage::BuilderCredits { n: credits })
                .map_err(|e| anyhow::anyhow!("cannot reach the orchestrator: {e}"))?;
        }
        let builder = build_records(
            builder,
            BuilderPorts {
                decisions: decision_rx,
                routes,
                responses: response_rx,
                credits: dfo.clone(),
            },
            &mut sink,
            &metrics,
        );
        done.store(true, Ordering::Release);
        let refused_messages = demux
            .join()
            .map_err(|_| anyhow::anyhow!("the network demultiplexer panicked"))?;
        Ok(RunReport {
            builder,
            refused_messages,
            ..Default::default()
        })
    })?;
    report.storage = sink.storage.finish();
    report.records_published = (sink.stream.as_ref())
        .map(|s| s.publisher.counts())
        .unwrap_or_default();
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

/// The launcher stops the run when this builder's storage fails (`on_failure = "stop"`), as
/// the one-process chain does.
fn tell_launcher_when_storage_fails(failed: &AtomicBool, done: &AtomicBool) {
    while !done.load(Ordering::Acquire) {
        if failed.load(Ordering::Relaxed) {
            if let Err(e) = crate::runtime::stdio::say_storage_failed(STORAGE_STOPPED) {
                eprintln!("cannot tell the launcher storage failed: {e}");
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Splits the inbox into the builder's two inputs: decisions (closed by the orchestrator's
/// `End`, by its silence, or by `stop` once it is silent) and fragments.
struct Demux {
    inlet: Inlet<ChainMessage>,
    dfo: u32,
    peer_timeout: Duration,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

impl Demux {
    /// Returns the messages the inbox refused, by reason.
    fn run(
        mut self,
        decisions: Sender<TriggerDecision>,
        responses: Sender<DataResponse>,
    ) -> BTreeMap<String, u64> {
        let mut decisions = Some(decisions);
        let mut dfo = Liveness::new([self.dfo], self.peer_timeout);
        while !self.done.load(Ordering::Acquire) {
            // Wakes at once for a message; the wait only bounds how often `done` is looked at.
            if let Some(d) = self.inlet.receive(Duration::from_millis(50)) {
                match d.message {
                    ChainMessage::Decision(decision) => {
                        if let Some(tx) = &decisions {
                            let _ = tx.send(decision);
                        }
                    }
                    ChainMessage::End => decisions = None,
                    ChainMessage::Fragment {
                        request,
                        outcome,
                        latency_us,
                    } => {
                        let fragment = d.frames.first().map(|p| p.to_vec()).unwrap_or_default();
                        let _ = responses.send(DataResponse {
                            request,
                            fragment,
                            outcome,
                            latency: Duration::from_micros(latency_us),
                        });
                    }
                    other => eprintln!(
                        "swdaq: builder got an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            if decisions.is_some()
                && !dfo
                    .newly_gone(|p| self.inlet.last_seen(p), Instant::now())
                    .is_empty()
            {
                eprintln!("swdaq: builder: the orchestrator is gone; finishing what is in hand");
                decisions = None;
            }
            // Told to stop before any decision came (the run never started).
            if self.stop.load(Ordering::Acquire) && self.inlet.last_seen(self.dfo).is_none() {
                decisions = None;
            }
        }
        self.inlet.counts().refused.clone()
    }
}

/// Storage, with every Nth record also published on the record stream.
struct StreamingSink {
    storage: StorageSink,
    stream: Option<RecordStream>,
}

impl RecordSink for StreamingSink {
    fn offer(&mut self, record: TriggerRecord) -> Result<(), SinkError> {
        if let Some(s) = &mut self.stream {
            s.maybe_publish(&record);
        }
        self.storage.offer(record)
    }
}

/// Every Nth record published on the builder's `record_stream` (`runtime::dqm_stream`'s
/// publisher: never waiting).
struct RecordStream {
    publisher: SamplePublisher,
    every: u64,
    seen: u64,
    last_offered: u64,
}

impl RecordStream {
    fn open(ctx: &AppContext<RunConfig>) -> anyhow::Result<Option<Self>> {
        let opened = super::RECORD_STREAMS.open(&ctx.zmq, &ctx.spec, &ctx.config.dqm)?;
        if let Some((publisher, _)) = &opened
            && ctx.config.dqm.enabled
        {
            // Before the builder says it is ready: its first records go to the supervisor.
            publisher.wait_for_subscriber(SUBSCRIBER_WAIT);
        }
        Ok(opened.map(|(publisher, every)| Self {
            publisher,
            every,
            seen: 0,
            last_offered: 0,
        }))
    }

    fn maybe_publish(&mut self, record: &TriggerRecord) {
        // A record the sink gave back is offered again: count it once.
        let n = record.header.trigger_number;
        if n == self.last_offered {
            return;
        }
        self.last_offered = n;
        self.seen += 1;
        if !(self.seen - 1).is_multiple_of(self.every) {
            return;
        }
        let header = record.header.to_bytes();
        let fragments = record.fragments.iter().map(Vec::as_slice);
        self.publisher
            .send(std::iter::once(header.as_slice()).chain(fragments));
    }
}

/// One message of a builder's record stream into the run's histograms, as a record sampled
/// in one process is filled. Its bytes are not trusted: a message that is not a record
/// (no frames, a header that does not decode, frames cut off) is refused with why, and the
/// monitoring thread counts it unreadable.
pub fn fill_published(set: &mut HistSet, message: StreamMessage) -> Result<(), String> {
    let record = record_of(message).map_err(|e| format!("record stream message: {e}"))?;
    fill_dqm(set, record)
}

/// The record a stream message holds: frame 0 its header (decoded as from a stored file),
/// each further frame a fragment as stored (read by the fill function, which names a bad one).
fn record_of(message: StreamMessage) -> Result<TriggerRecord, String> {
    if message.frames_dropped > 0 {
        return Err(format!(
            "{} frames over the {} taken",
            message.frames_dropped,
            message.frames.len()
        ));
    }
    let mut frames = message.frames.into_iter();
    let header = frames.next().ok_or("no frames")?;
    let header = TriggerRecordHeader::decode(&header).map_err(|e| e.to_string())?;
    Ok(TriggerRecord {
        header,
        fragments: frames.collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_section::RunSection;
    use crate::runtime::dqm::DqmSection;
    use crate::runtime::dqm_stream::{Published, SampleStream, StreamedDqm};
    use swdaq_monitor::Registry;

    fn record(trigger_number: u64) -> TriggerRecord {
        TriggerRecord {
            header: TriggerRecordHeader {
                trigger_number,
                trigger_timestamp: 1000 * trigger_number,
                run_number: 9,
                status_bits: 0,
                trigger_type: 1,
                sequence_number: 0,
                max_sequence_number: 0,
                element_id: SourceId::new(swdaq_format::Subsystem::TR_BUILDER, 0),
                components: Vec::new(),
            },
            fragments: Vec::new(),
        }
    }

    /// A builder's stream as its `RecordStream` publishes, garbage among its records: every
    /// malformed message is counted unreadable with its reason and the records around it are
    /// filled; a record published but never received is counted dropped.
    #[test]
    fn a_malformed_stream_message_is_counted_unreadable_and_monitoring_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let context = zmq::Context::new();
        // XPUB: the subscription is seen, so nothing is published before it is in place.
        let publisher = context.socket(zmq::XPUB).unwrap();
        publisher.set_linger(1000).unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = publisher.get_last_endpoint().unwrap().unwrap();
        let dqm = DqmSection {
            enabled: true,
            max_core_share: 1.0,
            ..Default::default()
        };
        let streams = vec![SampleStream {
            app: "builder-0".into(),
            endpoint,
        }];
        let registry = Registry::new();
        let online = StreamedDqm::start(
            &dqm,
            dir.path(),
            streams,
            1 << 20,
            fill_published,
            &registry,
        )
        .unwrap()
        .unwrap();
        publisher.set_rcvtimeo(5000).unwrap();
        assert_eq!(publisher.recv_bytes(0).unwrap(), [1], "the subscription");
        let good = |n: u64| record(n).header.to_bytes();
        let mut bad_marker = good(4);
        bad_marker[0] ^= 0xff;
        let messages: Vec<Vec<Vec<u8>>> = vec![
            vec![good(1)],
            vec![b"not a record".to_vec()],
            vec![Vec::new()],
            vec![good(2)],
            vec![bad_marker],
            vec![good(3), b"not a fragment".to_vec()],
            vec![good(5)],
        ];
        for m in &messages {
            publisher.send_multipart(m, 0).unwrap();
        }
        let run = RunSection {
            number: 9,
            ..RunSection::writing_to(dir.path())
        };
        // The builder says it published two more than it sent here: lost on the way.
        let sent = messages.len() as u64 + 2;
        let report = online.finish(&run, |app| {
            (app == "builder-0").then_some(Published { sent, dropped: 0 })
        });
        assert_eq!(report.error, None);
        assert_eq!(
            (report.samples.sampled, report.samples.dropped),
            (7, 2),
            "{report:?}"
        );
        // Garbage, an empty frame and a bad marker never decode; record 3's fragment does not.
        assert_eq!(report.unreadable, 4, "{report:?}");
        assert_eq!(report.events, 4, "records 1, 2, 3 and 5 filled");
        let problem = report.first_problem.unwrap();
        assert!(problem.contains("record stream message"), "{problem}");
        let saved = swdaq_dqm::hdf5_file::load(&report.file.unwrap()).unwrap();
        assert_eq!(saved.events, 4);
    }

    #[test]
    fn a_message_is_a_record_only_whole() {
        let header = record(7).header.to_bytes();
        let whole = StreamMessage {
            frames: vec![header.clone(), vec![1, 2]],
            frames_dropped: 0,
        };
        let read = record_of(whole).unwrap();
        assert_eq!(
            (read.header.trigger_number, read.fragments),
            (7, vec![vec![1, 2]])
        );
        let cut = StreamMessage {
            frames: vec![header.clone()],
            frames_dropped: 3,
        };
        assert!(record_of(cut).unwrap_err().contains("3 frames over"));
        assert_eq!(
            record_of(StreamMessage::default()).unwrap_err(),
            "no frames"
        );
        let short = StreamMessage {
            frames: vec![header[..header.len() - 1].to_vec()],
            frames_dropped: 0,
        };
        assert!(record_of(short).is_err());
    }
}
