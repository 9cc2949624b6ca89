//! Request serving: a thread that answers data requests for a set of links from pinned
//! views of their latency buffers. Requests whose window has not fully arrived wait, in
//! arrival order, until it has or until the time-out; ingest is never blocked.

use crate::link::LinkShared;
use crate::metrics::ServerMetrics;
use crate::request::{DataRequest, Lookup, RequestPolicy, RequestStatus, lookup};
use crate::ring::Reader;
use crate::tp_buffer::TpBuffer;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_format::fragment::fragment_error;
use swdaq_format::{Fragment, FragmentType, SourceId};

#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    pub policy: RequestPolicy,
    /// How long a request may wait for its window's data before it is answered as it stands.
    pub timeout: Duration,
    /// How often waiting requests are looked at again.
    pub poll: Duration,
}

/// The answer to one request.
#[derive(Debug)]
pub struct DataResponse {
    pub request: DataRequest,
    pub fragment: Vec<u8>,
    pub outcome: Outcome,
    /// From receipt by the server to the answer.
    pub latency: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    Served(RequestStatus),
    /// This server has no link with the requested source id: an empty `DataNotFound` fragment.
    UnknownSource,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerCounts {
    pub by_outcome: HashMap<Outcome, u64>,
    /// Requests for a (trigger, sequence, source) already answered: answered again.
    pub duplicates: u64,
    pub timed_out: u64,
}

impl ServerCounts {
    pub fn add(&mut self, o: &ServerCounts) {
        for (outcome, n) in &o.by_outcome {
            *self.by_outcome.entry(*outcome).or_default() += n;
        }
        self.duplicates += o.duplicates;
        self.timed_out += o.timed_out;
    }
}

/// Remembers recently answered requests to spot duplicates, in bounded memory.
struct RecentRequests {
    order: VecDeque<(u64, u16, SourceId)>,
    set: HashSet<(u64, u16, SourceId)>,
}

impl RecentRequests {
    const CAPACITY: usize = 65536;

    /// Records `key` and tells whether it was already there.
    fn seen_before(&mut self, key: (u64, u16, SourceId)) -> bool {
        if !self.set.insert(key) {
            return true;
        }
        self.order.push_back(key);
        if self.order.len() > Self::CAPACITY
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        false
    }
}

/// Serves `requests` for `links` (raw data) and `tp_buffers` (their trigger primitives)
/// until the request channel closes and nothing waits.
pub fn serve(
    links: &[Arc<LinkShared>],
    tp_buffers: &[Arc<TpBuffer>],
    requests: Receiver<DataRequest>,
    responses: Sender<DataResponse>,
    config: ServerConfig,
    metrics: Option<ServerMetrics>,
) -> ServerCounts {
    let mut readers: HashMap<SourceId, (&LinkShared, Reader<'_>)> = links
        .iter()
        .filter_map(|l| Some((l.source_id, (&**l, l.buffer.reader()?))))
        .collect();
    let tps: HashMap<SourceId, &TpBuffer> =
        tp_buffers.iter().map(|b| (b.source_id, &**b)).collect();
    let mut waiting: VecDeque<(DataRequest, Instant)> = VecDeque::new();
    let mut recent = RecentRequests {
        order: VecDeque::new(),
        set: HashSet::new(),
    };
    let mut counts = ServerCounts::default();
    let mut open = true;
    while open || !waiting.is_empty() {
        match requests.recv_timeout(config.poll) {
            Ok(req) => {
                if recent.seen_before((req.trigger_number, req.sequence_number, req.source)) {
                    counts.duplicates += 1;
                }
                waiting.push_back((req, Instant::now()));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        let mut still_waiting = VecDeque::with_capacity(waiting.len());
        for (req, received) in waiting.drain(..) {
            // Once the request channel is closed nothing more is coming: answer what is there.
            let timed_out = !open || received.elapsed() >= config.timeout;
            let answer = match readers.get_mut(&req.source) {
                Some((link, reader)) => answer(link, reader, &req, config.policy, timed_out),
                None => match tps.get(&req.source) {
                    Some(buffer) => match buffer.lookup(&req, config.policy, timed_out) {
                        Lookup::NotYet => None,
                        Lookup::Answered { fragment, status } => {
                            Some((fragment, Outcome::Served(status)))
                        }
                    },
                    None => Some((unknown_source_fragment(&req), Outcome::UnknownSource)),
                },
            };
            match answer {
                None => still_waiting.push_back((req, received)),
                Some((fragment, outcome)) => {
                    counts.timed_out += timed_out as u64;
                    *counts.by_outcome.entry(outcome).or_default() += 1;
                    let response = DataResponse {
                        request: req,
                        fragment,
                        outcome,
                        latency: received.elapsed(),
                    };
                    if let Some(m) = &metrics {
                        m.answered(outcome, response.latency);
                    }
                    if responses.send(response).is_err() {
                        return counts; // nobody listens any more
                    }
                }
            }
        }
        waiting = still_waiting;
    }
    counts
}

fn answer(
    link: &LinkShared,
    reader: &mut Reader<'_>,
    req: &DataRequest,
    policy: RequestPolicy,
    timed_out: bool,
) -> Option<(Vec<u8>, Outcome)> {
    let errors = link.errors_overlapping(req.window_begin, req.window_end);
    // The oldest readable index cannot be refused: pinning it always succeeds unless the
    // producer moved on in between, in which case the next one will do.
    let result = loop {
        let from = link.buffer.oldest_readable();
        if let Ok(r) = reader.with_view(from, |v| {
            lookup(v, link.format, req, policy, &errors, timed_out)
        }) {
            break r;
        }
    };
    match result {
        Lookup::NotYet => None,
        Lookup::Answered { fragment, status } => Some((fragment, Outcome::Served(status))),
    }
}

fn unknown_source_fragment(req: &DataRequest) -> Vec<u8> {
    let header = crate::request::header(req, FragmentType::UNKNOWN, fragment_error::DATA_NOT_FOUND);
    Fragment::assemble(header, std::iter::empty())
}
