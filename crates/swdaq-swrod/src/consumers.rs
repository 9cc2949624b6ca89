//! The consumer chain. A built fragment is offered to each consumer in turn, as SW ROD's
//! list of ROB fragment consumers passes it on; each consumer takes it through a bounded
//! queue that its own thread drains. A full queue is a slow consumer: that consumer does
//! not get the fragment, which is counted, and aggregation never waits. A consumer may take
//! only every Nth fragment (the monitoring sampler).
//!
//! Consumers here: the data-request server ([`serve_requests`] over channels, its logic in
//! [`RequestServer`]: ROB fragments by L1 ID with a status, a request for one not built yet
//! held until it is), recording to raw files ([`record`]), and any sampler reading its queue.

use crate::aggregator::{BuiltFragment, later};
use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError, bounded};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    /// The request could not reach the ROB's server: its application is gone (said by the
    /// requester's side, never by a server).
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
    by_l1_id: FxHashMap<u32, Arc<BuiltFragment>>,
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
            by_l1_id: FxHashMap::with_capacity_and_hasher(capacity + 1, Default::default()),
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
    /// Requests held until their fragment was built (answered `found` then, counted there
    /// too) rather than answered `not_yet` at once.
    pub held: u64,
}

impl RequestCounts {
    fn count(&mut self, status: RobRequestStatus) {
        *match status {
            RobRequestStatus::Found => &mut self.found,
            RobRequestStatus::NotYet => &mut self.not_yet,
            RobRequestStatus::Gone => &mut self.gone,
            // A server never answers unreachable (the requester does, for a ROB gone).
            RobRequestStatus::Invalid | RobRequestStatus::Unreachable => &mut self.invalid,
        } += 1;
    }
}

/// A request server's logic, whatever carries its requests and answers (`W`: who to answer,
/// a channel in one process, a peer over the network): it keeps fragments in a
/// [`FragmentStore`] and answers a request for one not built yet when it is built, instead of
/// `not_yet` at once, so the requester hears when a fragment is complete rather than asking
/// again. A request still unanswered after `hold` is answered `not_yet` (the requester asks
/// again, or gives up); once no more fragments will come, `not_yet` becomes `gone`.
pub struct RequestServer<W> {
    store: FragmentStore,
    hold: Duration,
    /// Held requests by L1 ID, each with the time it is answered if still unanswered.
    held: FxHashMap<u32, SmallVec<[(Instant, W); 1]>>,
    /// (deadline, L1 ID) in the order requests were held: one hold for all, so in deadline order.
    deadlines: VecDeque<(Instant, u32)>,
    fragments_ended: bool,
    counts: RequestCounts,
}

impl<W> RequestServer<W> {
    /// A server keeping fragments in `store` and holding requests up to `hold` (zero: every
    /// request answered at once).
    pub fn new(store: FragmentStore, hold: Duration) -> Self {
        Self {
            store,
            hold,
            held: FxHashMap::default(),
            deadlines: VecDeque::new(),
            fragments_ended: false,
            counts: RequestCounts::default(),
        }
    }

    pub fn counts(&self) -> RequestCounts {
        self.counts
    }

    /// Requests held now.
    pub fn held(&self) -> usize {
        self.held.values().map(|w| w.len()).sum()
    }

    /// When the oldest held request is due, if one is held.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|d| d.0)
    }

    /// Keeps a built fragment and answers the requests held for it.
    pub fn fragment(&mut self, fragment: Arc<BuiltFragment>, answer: &mut impl FnMut(W, RobReply)) {
        let l1_id = fragment.l1_id;
        if let Some(waiting) = self.held.remove(&l1_id) {
            for (_, who) in waiting {
                self.counts.found += 1;
                self.counts.held += 1;
                answer(who, found(l1_id, &fragment));
            }
        }
        self.store.insert(fragment);
    }

    /// Answers a request now, or holds it until its fragment is built or `hold` has passed.
    pub fn request(
        &mut self,
        l1_id: u32,
        who: W,
        now: Instant,
        answer: &mut impl FnMut(W, RobReply),
    ) {
        let (status, fragment) = self.lookup(l1_id);
        if status == RobRequestStatus::NotYet && !self.hold.is_zero() {
            let due = now + self.hold;
            self.held.entry(l1_id).or_default().push((due, who));
            self.deadlines.push_back((due, l1_id));
            return;
        }
        self.reply(l1_id, who, (status, fragment), answer);
    }

    /// Answers every request held past its deadline by `now` with what is known then.
    pub fn expire(&mut self, now: Instant, answer: &mut impl FnMut(W, RobReply)) {
        while let Some(&(due, l1_id)) = self.deadlines.front() {
            if due > now {
                break;
            }
            self.deadlines.pop_front();
            let Some(waiting) = self.held.get_mut(&l1_id) else {
                continue;
            };
            let (expired, kept): (SmallVec<_>, _) = waiting.drain(..).partition(|w| w.0 <= now);
            *waiting = kept;
            if waiting.is_empty() {
                self.held.remove(&l1_id);
            }
            for (_, who) in expired {
                self.answer_now(l1_id, who, answer);
            }
        }
    }

    /// No more fragments will come: every held request is answered now, and from now on a
    /// fragment not kept is `gone`, never `not_yet`.
    pub fn end_of_fragments(&mut self, answer: &mut impl FnMut(W, RobReply)) {
        self.fragments_ended = true;
        self.deadlines.clear();
        for (l1_id, waiting) in std::mem::take(&mut self.held) {
            for (_, who) in waiting {
                self.answer_now(l1_id, who, answer);
            }
        }
    }

    fn answer_now(&mut self, l1_id: u32, who: W, answer: &mut impl FnMut(W, RobReply)) {
        let found = self.lookup(l1_id);
        self.reply(l1_id, who, found, answer);
    }

    /// Counts and sends an answer already looked up.
    fn reply(
        &mut self,
        l1_id: u32,
        who: W,
        (status, fragment): (RobRequestStatus, Option<Arc<BuiltFragment>>),
        answer: &mut impl FnMut(W, RobReply),
    ) {
        self.counts.count(status);
        answer(
            who,
            RobReply {
                l1_id,
                status,
                fragment,
            },
        );
    }

    fn lookup(&self, l1_id: u32) -> (RobRequestStatus, Option<Arc<BuiltFragment>>) {
        match self.store.lookup(l1_id) {
            (RobRequestStatus::NotYet, _) if self.fragments_ended => (RobRequestStatus::Gone, None),
            answer => answer,
        }
    }
}

fn found(l1_id: u32, fragment: &Arc<BuiltFragment>) -> RobReply {
    RobReply {
        l1_id,
        status: RobRequestStatus::Found,
        fragment: Some(fragment.clone()),
    }
}

/// The data-request server loop over channels: keeps fragments arriving on `fragments` and
/// answers `requests` through `server`, until both channels are closed.
pub fn serve_requests(
    fragments: Receiver<Arc<BuiltFragment>>,
    requests: Receiver<RobRequest>,
    mut server: RequestServer<Sender<RobReply>>,
) -> RequestCounts {
    // A requester that went away is not the server's problem.
    let mut answer = |to: Sender<RobReply>, reply: RobReply| {
        let _ = to.send(reply);
    };
    let (mut fragments_open, mut requests_open) = (true, true);
    // Polled, not blocked on: a server asleep in `recv` must be woken (a futex call) by the
    // SW ROD thread for every fragment, which cost that thread a third of its time at
    // 100 kHz; a server that drains both queues and then naps is never waited for.
    while fragments_open || requests_open {
        let mut idle = true;
        while fragments_open {
            match fragments.try_recv() {
                Ok(f) => {
                    idle = false;
                    server.fragment(f, &mut answer);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    fragments_open = false;
                    server.end_of_fragments(&mut answer);
                }
            }
        }
        while requests_open {
            match requests.try_recv() {
                Ok(r) => {
                    idle = false;
                    server.request(r.l1_id, r.reply, Instant::now(), &mut answer);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => requests_open = false,
            }
        }
        server.expire(Instant::now(), &mut answer);
        if idle {
            std::thread::sleep(IDLE_NAP);
        }
    }
    server.counts()
}

/// How long a request server with nothing to do naps before it looks again: the most a
/// request or a fragment waits for it.
const IDLE_NAP: Duration = Duration::from_micros(200);

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
