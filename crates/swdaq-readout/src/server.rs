//! Request serving: a thread that answers data requests for a set of links from pinned
//! views of their latency buffers. Requests whose window has not fully arrived wait, in
//! arrival order, until it has or until the time-out; ingest is never blocked.

use crate::link::LinkShared;
use crate::request::{DataRequest, Lookup, RequestPolicy, RequestStatus, lookup};
use crate::ring::Reader;
use crate::roi::{RoiLink, roi_lookup};
use crate::tp_buffer::TpBuffer;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_format::fragment::fragment_error;
use swdaq_format::{Fragment, FragmentType, SourceId};
use swdaq_monitor::{Counter, Histogram, MonitorError, Registry};

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
    /// Fragments answered in regions of interest (ROI readout on).
    pub roi: RoiCounts,
}

/// ROI readout's data volume, counted from the fragments as sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoiCounts {
    pub fragments: u64,
    /// Bytes of the ROI fragments (headers included).
    pub bytes: u64,
    /// Bytes the same fragments would have had with every frame of their windows.
    pub full_window_bytes: u64,
    /// Answered at the time-out before the link's TPs had passed the window: regions may
    /// be missing.
    pub tps_cut: u64,
}

impl RoiCounts {
    fn add(&mut self, o: &RoiCounts) {
        self.fragments += o.fragments;
        self.bytes += o.bytes;
        self.full_window_bytes += o.full_window_bytes;
        self.tps_cut += o.tps_cut;
    }
}

/// A request server's counters: requests answered by status, and answer latency.
pub struct ServerMetrics {
    /// Complete, partial, not found, invalid window, unknown source.
    by_status: [Counter; 5],
    latency: Histogram,
    roi: RoiMetrics,
}

/// ROI readout's data volume (zero while ROI readout is off).
struct RoiMetrics {
    fragments: Counter,
    bytes: Counter,
    full_window_bytes: Counter,
    tps_cut: Counter,
}

impl ServerMetrics {
    pub fn register(registry: &Registry, thread: &str) -> Result<Self, MonitorError> {
        let status = |name: &str| {
            registry.block(thread, &[("status", name)]).counter(
                "swdaq_readout_requests_total",
                "Data requests answered, by status",
            )
        };
        let by_status = [
            status("complete")?,
            status("partial")?,
            status("not_found")?,
            status("invalid_window")?,
            status("unknown_source")?,
        ];
        let latency = registry.block(thread, &[]).histogram(
            "swdaq_readout_request_latency_seconds",
            "Data request received to answered",
            &[
                1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0,
            ],
        )?;
        let mut block = registry.block(thread, &[]);
        let roi = RoiMetrics {
            fragments: block.counter(
                "swdaq_readout_roi_fragments_total",
                "Data requests answered with regions of interest",
            )?,
            bytes: block.counter(
                "swdaq_readout_roi_bytes_total",
                "Bytes of the ROI fragments sent",
            )?,
            full_window_bytes: block.counter(
                "swdaq_readout_roi_full_window_bytes_total",
                "Bytes those fragments would have had with every frame of their windows",
            )?,
            tps_cut: block.counter(
                "swdaq_readout_roi_tps_cut_total",
                "ROI fragments answered at the time-out before the link's TPs passed the window",
            )?,
        };
        Ok(Self {
            by_status,
            latency,
            roi,
        })
    }

    pub fn roi_answered(&self, sent: &RoiCounts) {
        self.roi.fragments.add(sent.fragments);
        self.roi.bytes.add(sent.bytes);
        self.roi.full_window_bytes.add(sent.full_window_bytes);
        self.roi.tps_cut.add(sent.tps_cut);
    }

    pub fn answered(&self, outcome: Outcome, latency: Duration) {
        let i = match outcome {
            Outcome::Served(RequestStatus::Complete) => 0,
            Outcome::Served(RequestStatus::Partial) => 1,
            Outcome::Served(RequestStatus::NotFound) => 2,
            Outcome::Served(RequestStatus::InvalidWindow) => 3,
            Outcome::UnknownSource => 4,
        };
        self.by_status[i].inc();
        self.latency.observe(latency.as_secs_f64());
    }
}

impl ServerCounts {
    pub fn add(&mut self, o: &ServerCounts) {
        for (outcome, n) in &o.by_outcome {
            *self.by_outcome.entry(*outcome).or_default() += n;
        }
        self.duplicates += o.duplicates;
        self.timed_out += o.timed_out;
        self.roi.add(&o.roi);
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
/// until the request channel closes and nothing waits. A link with an entry in `roi` is
/// answered in regions of interest ([`crate::roi`]). `on_answer` sees every answer before
/// it is sent.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    links: &[Arc<LinkShared>],
    tp_buffers: &[Arc<TpBuffer>],
    roi: &[RoiLink],
    requests: Receiver<DataRequest>,
    responses: Sender<DataResponse>,
    config: ServerConfig,
    metrics: Option<ServerMetrics>,
    mut on_answer: impl FnMut(&DataResponse),
) -> ServerCounts {
    let mut readers: HashMap<SourceId, (&LinkShared, Reader<'_>)> = links
        .iter()
        .filter_map(|l| Some((l.source_id, (&**l, l.buffer.reader()?))))
        .collect();
    let tps: HashMap<SourceId, &TpBuffer> =
        tp_buffers.iter().map(|b| (b.source_id, &**b)).collect();
    let roi: HashMap<SourceId, &RoiLink> = roi.iter().map(|r| (r.source_id, r)).collect();
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
                Some((link, reader)) => match roi.get(&req.source) {
                    Some(roi_link) => answer_roi(
                        link,
                        reader,
                        roi_link,
                        &req,
                        config.policy,
                        timed_out,
                        &mut counts.roi,
                        metrics.as_ref(),
                    ),
                    None => answer(link, reader, &req, config.policy, timed_out),
                },
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
                    on_answer(&response);
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

#[allow(clippy::too_many_arguments)]
fn answer_roi(
    link: &LinkShared,
    reader: &mut Reader<'_>,
    roi_link: &RoiLink,
    req: &DataRequest,
    policy: RequestPolicy,
    timed_out: bool,
    counts: &mut RoiCounts,
    metrics: Option<&ServerMetrics>,
) -> Option<(Vec<u8>, Outcome)> {
    let errors = link.errors_overlapping(req.window_begin, req.window_end);
    // As in `answer`: pinning the oldest readable index succeeds but for a race with the
    // producer, and then the next one will do.
    let answer = loop {
        let from = link.buffer.oldest_readable();
        if let Ok(r) = reader.with_view(from, |v| {
            roi_lookup(v, req, policy, &errors, timed_out, roi_link)
        }) {
            break r?;
        }
    };
    let sent = RoiCounts {
        fragments: 1,
        bytes: answer.fragment.len() as u64,
        full_window_bytes: answer.full_window_bytes,
        tps_cut: answer.tps_cut as u64,
    };
    counts.add(&sent);
    if let Some(m) = metrics {
        m.roi_answered(&sent);
    }
    Some((answer.fragment, Outcome::Served(answer.status)))
}

fn unknown_source_fragment(req: &DataRequest) -> Vec<u8> {
    let header = crate::request::header(req, FragmentType::UNKNOWN, fragment_error::DATA_NOT_FOUND);
    Fragment::assemble(header, std::iter::empty())
}
