//! The trigger and the record builder as nodes: loops that own their state and talk to the
//! rest of the system only through [`crate::transport`] endpoints.

use crate::builder::{BuiltRecord, RecordBuilder};
use crate::transport::{Inbox, Outbox, Received};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use swdaq_format::{SourceId, TriggerRecord};
use swdaq_readout::request::DataRequest;
use swdaq_readout::server::DataResponse;
use swdaq_trigger::{TpBatch, Trigger, TriggerControl, TriggerCounts, TriggerDecision};

/// What the trigger node hears.
#[derive(Debug)]
pub enum TriggerInput {
    Tps(TpBatch),
    /// The link's TP stream has ended (its source finished or was stopped).
    LinkEnded(usize),
    /// The record builder can take this many more records.
    Credits(u64),
    /// Run stop: take no new candidates, issue the open decision once its data is in, end.
    Stop,
    /// Run control: pause or resume the triggers, change a prescale or rate.
    Control(TriggerControl),
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TriggerReport {
    pub counts: TriggerCounts,
    /// Data time to decision, for every decision issued.
    pub latencies: Vec<Duration>,
}

/// Runs the trigger until every one of its `links` has ended or a [`TriggerInput::Stop`] has
/// been carried out, then issues what is left:
/// held decisions wait up to `drain_wait` for credit, after which they are dropped (counted).
/// After a stop, the open decision waits up to `drain_wait` for its data: links that fell
/// silent (or sent garbage for timestamps) may never pass its window, and a stop must end.
/// `observe(trigger, last)` runs after every poll (for monitoring), `last` at the end.
pub fn run_trigger(
    mut trigger: Trigger,
    links: usize,
    input: impl Inbox<TriggerInput>,
    decisions: impl Outbox<TriggerDecision>,
    poll: Duration,
    drain_wait: Duration,
    mut observe: impl FnMut(&Trigger, bool),
) -> TriggerReport {
    let mut ended = vec![false; links];
    let mut out = Vec::new();
    let send_all =
        |out: &mut Vec<TriggerDecision>| out.drain(..).all(|d| decisions.send(d).is_ok());
    let mut listening = true;
    let mut stop_deadline = None;
    while listening
        && !ended.iter().all(|&e| e)
        && !trigger.is_stopped()
        && stop_deadline.is_none_or(|d| Instant::now() < d)
    {
        match input.receive(poll) {
            Received::Message(TriggerInput::Tps(batch)) => trigger.on_tps(batch, Instant::now()),
            Received::Message(TriggerInput::LinkEnded(link)) => {
                trigger.end_link(link);
                if let Some(e) = ended.get_mut(link) {
                    *e = true;
                }
            }
            Received::Message(TriggerInput::Credits(n)) => {
                trigger.add_credits(n, Instant::now(), &mut out)
            }
            Received::Message(TriggerInput::Stop) => {
                trigger.stop();
                stop_deadline.get_or_insert(Instant::now() + drain_wait);
            }
            // A refused change is counted by the trigger and changes nothing.
            Received::Message(TriggerInput::Control(c)) => {
                let _ = trigger.control(&c);
            }
            Received::Nothing => {}
            Received::Closed => listening = false,
        }
        trigger.poll(Instant::now(), &mut out);
        listening &= send_all(&mut out);
        observe(&trigger, false);
    }
    trigger.finish(Instant::now(), &mut out);
    let deadline = Instant::now() + drain_wait;
    while send_all(&mut out) && trigger.held() > 0 && Instant::now() < deadline {
        match input.receive(poll) {
            Received::Message(TriggerInput::Credits(n)) => {
                trigger.add_credits(n, Instant::now(), &mut out)
            }
            Received::Closed => break,
            _ => {}
        }
    }
    trigger.drop_held();
    observe(&trigger, true);
    TriggerReport {
        counts: trigger.counts(),
        latencies: trigger.latencies().to_vec(),
    }
}

/// Where finished records go (the storage writer, in `swdaq run`).
pub trait RecordSink {
    /// Takes the record, or gives it back if it cannot now (queue full: try again later).
    fn offer(&mut self, record: TriggerRecord) -> Result<(), SinkError>;
}

#[derive(Debug)]
pub enum SinkError {
    /// Storage is behind: keep the record and offer it again.
    Full(TriggerRecord),
    /// Storage is gone for good: the record cannot be kept.
    Closed(TriggerRecord),
}

/// What storage does when it fails, decided by the application that watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageFailurePolicy {
    /// End the run cleanly.
    Stop,
    /// Keep taking data; records are counted as not written.
    Shed,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct BuilderReport {
    pub counts: crate::BuilderCounts,
    pub stored: u64,
    /// Records the sink could not take (closed, or still full when the run ended).
    pub not_stored: u64,
    /// Requests for sources no request server has: their fragments will be missing.
    pub unrouted_requests: u64,
    /// Decision received to record accepted by storage, for every stored record.
    pub latencies: Vec<Duration>,
}

/// A record has left the builder (stored, or counted as not stored): the builder's credit
/// goes back to whoever hands out decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordDone {
    pub trigger_number: u64,
}

/// In one process the builder's credits go straight to the trigger.
pub struct CreditsToTrigger<O>(pub O);

impl<O: Outbox<TriggerInput>> Outbox<RecordDone> for CreditsToTrigger<O> {
    fn send(&self, _: RecordDone) -> Result<(), crate::transport::Disconnected> {
        self.0.send(TriggerInput::Credits(1))
    }
}

impl BuilderReport {
    /// Adds another builder's report (several builder applications, one summary).
    pub fn add(&mut self, other: BuilderReport) {
        self.counts.add(&other.counts);
        self.stored += other.stored;
        self.not_stored += other.not_stored;
        self.unrouted_requests += other.unrouted_requests;
        self.latencies.extend(other.latencies);
    }
}

/// The builder node's connections.
pub struct BuilderPorts<D, Q, R, C> {
    pub decisions: D,
    /// Where each source's requests go.
    pub routes: HashMap<SourceId, Q>,
    pub responses: R,
    /// Where each finished record's credit goes.
    pub credits: C,
}

/// Builds records until the decision stream closes and every record is finished and stored
/// (or, after `drain_wait` of a full sink at the end, counted as not stored).
pub fn run_builder<D, Q, R, C>(
    mut builder: RecordBuilder,
    ports: BuilderPorts<D, Q, R, C>,
    sink: &mut impl RecordSink,
    poll: Duration,
    drain_wait: Duration,
    mut on_record: impl FnMut(&BuiltRecord),
) -> BuilderReport
where
    D: Inbox<TriggerDecision>,
    Q: Outbox<DataRequest>,
    R: Inbox<DataResponse>,
    C: Outbox<RecordDone>,
{
    let BuilderPorts {
        decisions,
        routes,
        responses,
        credits,
    } = ports;
    let mut routes = Some(routes);
    let mut report = BuilderReport::default();
    let mut finished: Vec<BuiltRecord> = Vec::new();
    let mut to_store: VecDeque<BuiltRecord> = VecDeque::new();
    let mut responses_open = true;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        // Decisions first (without waiting), so requests leave as soon as possible.
        while let Some(r) = &routes {
            match decisions.receive(Duration::ZERO) {
                Received::Message(d) => {
                    for req in builder.start(d, Instant::now()) {
                        let sent = r.get(&req.source).is_some_and(|q| q.send(req).is_ok());
                        if !sent {
                            // Nobody will answer: the record need not wait for it.
                            report.unrouted_requests += 1;
                            finished.extend(builder.unreachable(req.trigger_number, req.source));
                        }
                    }
                }
                Received::Nothing => break,
                // No more decisions: dropping the request routes tells the servers to answer
                // whatever still waits, as it stands.
                Received::Closed => routes = None,
            }
        }
        if responses_open {
            match responses.receive(poll) {
                Received::Message(r) => {
                    let built =
                        builder.on_fragment(r.request.trigger_number, r.request.source, r.fragment);
                    finished.extend(built);
                }
                Received::Nothing => {}
                Received::Closed => responses_open = false,
            }
        } else {
            std::thread::sleep(poll);
        }
        finished.extend(builder.expire(Instant::now()));
        if !responses_open {
            finished.extend(builder.abandon_all());
        }
        for built in finished.drain(..) {
            on_record(&built);
            to_store.push_back(built);
        }
        while let Some(built) = to_store.pop_front() {
            let started = built.started;
            let trigger_number = built.record.header.trigger_number;
            match sink.offer(built.record) {
                Ok(()) => {
                    report.stored += 1;
                    report.latencies.push(started.elapsed());
                }
                Err(SinkError::Full(record)) => {
                    to_store.push_front(BuiltRecord { record, ..built });
                    break;
                }
                Err(SinkError::Closed(_)) => report.not_stored += 1,
            }
            // The record has left the builder: the trigger may send another.
            let _ = credits.send(RecordDone { trigger_number });
        }
        if routes.is_none() && builder.in_flight() == 0 {
            if to_store.is_empty() {
                break;
            }
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + drain_wait);
            if Instant::now() >= deadline {
                report.not_stored += to_store.len() as u64;
                break;
            }
        }
    }
    report.counts = builder.counts.clone();
    report
}
