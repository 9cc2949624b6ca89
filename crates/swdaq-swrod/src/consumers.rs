//! The consumer chain. A built fragment is offered to each consumer in turn, as SW ROD's
//! list of ROB fragment consumers passes it on; each consumer takes it through a bounded
//! queue that its own thread drains. A full queue is a slow consumer: that consumer does
//! not get the fragment, which is counted, and aggregation never waits. A consumer may take
//! only every Nth fragment (the monitoring sampler).
//!
//! Consumers here: the data-request server ([`serve_requests`]: ROB fragments by L1 ID
//! with a status), recording to raw files ([`record`]), and any sampler reading its queue.

use crate::aggregator::{BuiltFragment, later};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, never, select};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;
use swdaq_format::rawfile::RawFileWriter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerCounts {
    pub delivered: u64,
    /// Fragments not given because the consumer's queue was full (or it had stopped).
    pub dropped_slow: u64,
}

struct Link {
    name: String,
    every: u64,
    offered: u64,
    tx: Sender<Arc<BuiltFragment>>,
    counts: ConsumerCounts,
}

#[derive(Default)]
pub struct ConsumerChain {
    links: Vec<Link>,
}

impl ConsumerChain {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a consumer that takes every `every`th fragment through a queue of `capacity`,
    /// and returns the queue's receiving end for its thread.
    pub fn add(&mut self, name: &str, every: u64, capacity: usize) -> Receiver<Arc<BuiltFragment>> {
        let (tx, rx) = bounded(capacity);
        self.links.push(Link {
            name: name.to_string(),
            every: every.max(1),
            offered: 0,
            tx,
            counts: ConsumerCounts::default(),
        });
        rx
    }

    /// Offers `fragment` to every consumer, never waiting.
    pub fn deliver(&mut self, fragment: BuiltFragment) {
        let fragment = Arc::new(fragment);
        for link in &mut self.links {
            link.offered += 1;
            if (link.offered - 1) % link.every != 0 {
                continue;
            }
            match link.tx.try_send(fragment.clone()) {
                Ok(()) => link.counts.delivered += 1,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    link.counts.dropped_slow += 1
                }
            }
        }
    }

    pub fn counts(&self) -> impl Iterator<Item = (&str, ConsumerCounts)> {
        self.links.iter().map(|l| (l.name.as_str(), l.counts))
    }
}

/// How a request for a ROB fragment by L1 ID was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RobRequestStatus {
    Found,
    /// Not built yet (still aggregating, or not arrived): ask again.
    NotYet,
    /// Older than every fragment kept: evicted.
    Gone,
    /// Further ahead of the newest fragment than any event can be.
    Invalid,
    /// The request could not reach the ROB's server: its application is gone, or its
    /// inbox did not take the request (said by the requester's side, never by a server).
    Unreachable,
}

/// How far past the newest fragment a request is still plausible in a run with ECRs. The ECR
/// count is the extended L1 ID's top 8 bits, so each ECR moves it by up to 2^24. The HLT hears
/// of an L1 accept from the card before a ROB has built it, and a ROB thread that lags (a
/// loaded host) can be several ECRs behind when ECRs come every few thousand L1 accepts: up to
/// 64 ECRs ahead is "not yet", further is no event of the run. (One ECR's worth answered
/// "invalid" for events a lagging ROB built moments later.)
pub const PLAUSIBLE_AHEAD: u32 = 64 << 24;

/// The fragments a request server keeps: the newest `capacity`, by L1 ID.
pub struct FragmentStore {
    by_l1_id: HashMap<u32, Arc<BuiltFragment>>,
    order: VecDeque<u32>,
    capacity: usize,
    newest: Option<u32>,
    /// The newest L1 ID given up to make room. Fragments completed by the time-out arrive
    /// after newer ones, so "older than the oldest kept" does not mean gone: one not yet
    /// built is asked for again.
    newest_evicted: Option<u32>,
    max_ahead: u32,
}

impl FragmentStore {
    /// Keeps `capacity` fragments; a request more than `max_ahead` L1 IDs beyond the newest
    /// is `Invalid`.
    pub fn new(capacity: usize, max_ahead: u32) -> Self {
        Self {
            by_l1_id: HashMap::with_capacity(capacity + 1),
            order: VecDeque::with_capacity(capacity + 1),
            capacity: capacity.max(1),
            newest: None,
            newest_evicted: None,
            max_ahead,
        }
    }

    pub fn insert(&mut self, fragment: Arc<BuiltFragment>) {
        let l1_id = fragment.l1_id;
        if self.newest.is_none_or(|n| later(l1_id, n)) {
            self.newest = Some(l1_id);
        }
        if self.by_l1_id.insert(l1_id, fragment).is_none() {
            self.order.push_back(l1_id);
        }
        if self.order.len() > self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.by_l1_id.remove(&old);
            if self.newest_evicted.is_none_or(|e| later(old, e)) {
                self.newest_evicted = Some(old);
            }
        }
    }

    pub fn lookup(&self, l1_id: u32) -> (RobRequestStatus, Option<Arc<BuiltFragment>>) {
        if let Some(f) = self.by_l1_id.get(&l1_id) {
            return (RobRequestStatus::Found, Some(f.clone()));
        }
        let status = match (self.newest, self.newest_evicted) {
            (Some(newest), _) if later(l1_id, newest) => {
                if l1_id.wrapping_sub(newest) > self.max_ahead {
                    RobRequestStatus::Invalid
                } else {
                    RobRequestStatus::NotYet
                }
            }
            (_, Some(evicted)) if !later(l1_id, evicted) => RobRequestStatus::Gone,
            _ => RobRequestStatus::NotYet,
        };
        (status, None)
    }
}

pub struct RobRequest {
    pub l1_id: u32,
    pub reply: Sender<RobReply>,
}

pub struct RobReply {
    pub l1_id: u32,
    pub status: RobRequestStatus,
    pub fragment: Option<Arc<BuiltFragment>>,
}

/// Answer counts of a request server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub found: u64,
    pub not_yet: u64,
    pub gone: u64,
    pub invalid: u64,
}

/// The data-request server loop: keeps fragments arriving on `fragments` in `store` and
/// answers `requests`, until both channels are closed.
pub fn serve_requests(
    fragments: Receiver<Arc<BuiltFragment>>,
    requests: Receiver<RobRequest>,
    mut store: FragmentStore,
) -> RequestCounts {
    let mut counts = RequestCounts::default();
    let (mut fragments_open, mut requests_open) = (true, true);
    // A closed channel is swapped for one that never delivers, so `select!` stops polling it.
    let (no_fragments, no_requests) = (never(), never());
    while fragments_open || requests_open {
        let f_rx = if fragments_open {
            &fragments
        } else {
            &no_fragments
        };
        let r_rx = if requests_open {
            &requests
        } else {
            &no_requests
        };
        select! {
            recv(f_rx) -> f => match f {
                Ok(f) => store.insert(f),
                Err(_) => fragments_open = false,
            },
            recv(r_rx) -> r => match r {
                Ok(r) => {
                    let (status, fragment) = store.lookup(r.l1_id);
                    *match status {
                        RobRequestStatus::Found => &mut counts.found,
                        RobRequestStatus::NotYet => &mut counts.not_yet,
                        RobRequestStatus::Gone => &mut counts.gone,
                        // A store never answers unreachable.
                        RobRequestStatus::Invalid | RobRequestStatus::Unreachable => {
                            &mut counts.invalid
                        }
                    } += 1;
                    // A requester that went away is not the server's problem.
                    let _ = r.reply.send(RobReply { l1_id: r.l1_id, status, fragment });
                }
                Err(_) => requests_open = false,
            },
        }
    }
    counts
}

/// The recording consumer: writes every fragment it gets to a raw file, one record each,
/// until its queue closes; returns the fragments written and the flushed output.
pub fn record<W: Write>(
    fragments: Receiver<Arc<BuiltFragment>>,
    mut writer: RawFileWriter<W>,
) -> io::Result<(u64, W)> {
    for f in fragments.iter() {
        writer.write_frame(f.bytes())?;
    }
    let written = writer.frames_written();
    Ok((written, writer.finish()?))
}
