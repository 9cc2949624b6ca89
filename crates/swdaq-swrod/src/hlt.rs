//! The HLT side of the consumer chain: for each L1 accept it is given, ask every ROB's
//! request server ([`crate::consumers::serve_requests`]) for its fragment and gather the
//! answers into one event (a ROB list). Requests for many events are in flight at once; a
//! server answers in the order it is asked, so every ROB has its own reply queue.
//!
//! A server holds a request for a fragment not built yet and answers when it is built, so
//! the HLT hears of a complete fragment without asking again; a `not_yet` answer (the
//! server's hold ran out) is asked again after `retry_after`; a ROB still not there after
//! `give_up_after`, or answered `gone` or `invalid`, is missing from the event, which is
//! handed on incomplete and names it: no event is dropped.
//!
//! Events settle in any order; a luminosity block is ended ([`HltOutput::LumiBlockEnded`])
//! once every event of it and of the blocks before it has been handed on and a later block
//! has begun (or the run has ended), so storage can close its files knowing no event of it
//! is still to come.

use crate::aggregator::BuiltFragment;
use crate::consumers::{RobReply, RobRequest, RobRequestStatus};
use crate::trigger::L1Accept;
use crossbeam_channel::{Receiver, Select, Sender, unbounded};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::{SmallVec, smallvec};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HltConfig {
    /// Events asked for and not yet complete, at most.
    pub max_in_flight: usize,
    pub retry_after: Duration,
    pub give_up_after: Duration,
}

/// A ROB's request server, as the HLT sees it.
pub struct RobPort {
    pub source_id: u32,
    pub requests: Sender<RobRequest>,
}

/// Why a ROB is missing from an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingRob {
    /// Answered `not_yet` until `give_up_after`.
    TimedOut,
    /// The server no longer had it (it fell out of the store, or never reached it).
    Gone,
    /// The server found the L1 ID implausible.
    Invalid,
    /// The server stopped answering (end of run), or could not be reached (its application
    /// is gone).
    NoServer,
}

/// An event: its L1 accept, the fragments found, in ROB order, and the ROBs missing with
/// why (by source id).
pub struct AssembledEvent {
    pub l1a: L1Accept,
    pub robs: Vec<Arc<BuiltFragment>>,
    pub missing: Vec<(u32, MissingRob)>,
}

impl AssembledEvent {
    /// Every ROB there and none missing e-links.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty() && self.robs.iter().all(|r| r.complete)
    }
}

/// What the HLT hands on, in order.
pub enum HltOutput {
    Event(AssembledEvent),
    /// Every event of this luminosity block (and the ones before) has been handed on.
    LumiBlockEnded(u32),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HltCounts {
    pub events: u64,
    /// Events with every ROB, none of them missing e-links.
    pub complete_events: u64,
    /// Events with ROBs missing.
    pub incomplete_events: u64,
    /// Events holding a ROB fragment that misses e-links.
    pub events_with_incomplete_robs: u64,
    /// Answers by status (a ROB asked three times counts three answers).
    pub found: u64,
    pub not_yet: u64,
    pub gone: u64,
    pub invalid: u64,
    /// Requests that could not reach the ROB's server (its application gone).
    pub unreachable: u64,
    /// ROBs given up on after `give_up_after`.
    pub timed_out_robs: u64,
    pub no_server_robs: u64,
}

impl HltCounts {
    /// Adds another HLT's counts (several HLT applications).
    pub fn add(&mut self, o: &HltCounts) {
        self.events += o.events;
        self.complete_events += o.complete_events;
        self.incomplete_events += o.incomplete_events;
        self.events_with_incomplete_robs += o.events_with_incomplete_robs;
        self.found += o.found;
        self.not_yet += o.not_yet;
        self.gone += o.gone;
        self.invalid += o.invalid;
        self.unreachable += o.unreachable;
        self.timed_out_robs += o.timed_out_robs;
        self.no_server_robs += o.no_server_robs;
    }
}

/// ROBs an event in flight keeps without an allocation (a run with more asks the heap, one
/// allocation per event as before).
const INLINE_ROBS: usize = 4;

struct Pending {
    l1a: L1Accept,
    asked: Instant,
    robs: SmallVec<[Option<Arc<BuiltFragment>>; INLINE_ROBS]>,
    settled: SmallVec<[bool; INLINE_ROBS]>,
    missing: Vec<(u32, MissingRob)>,
    open: usize,
}

impl Pending {
    fn settle(&mut self, rob: usize, source_id: u32, why: MissingRob, counts: &mut HltCounts) {
        if self.settled[rob] {
            return;
        }
        self.settled[rob] = true;
        self.open -= 1;
        self.missing.push((source_id, why));
        match why {
            MissingRob::TimedOut => counts.timed_out_robs += 1,
            MissingRob::NoServer => counts.no_server_robs += 1,
            MissingRob::Gone | MissingRob::Invalid => {}
        }
    }
}

/// Events not yet handed on, by luminosity block, to end each block once it has none.
#[derive(Default)]
struct LumiBlocks {
    open: BTreeMap<u32, usize>,
    newest: u32,
}

impl LumiBlocks {
    fn begin(&mut self, lumi_block: u32) {
        *self.open.entry(lumi_block).or_default() += 1;
        self.newest = self.newest.max(lumi_block);
    }

    fn settle(&mut self, lumi_block: u32) {
        if let Some(n) = self.open.get_mut(&lumi_block) {
            *n -= 1;
        }
    }

    /// Ends, oldest first, the blocks with nothing open before a newer one (every block when
    /// `all`: no more L1 accepts come).
    fn end(&mut self, all: bool, out: &mut impl FnMut(HltOutput)) {
        while let Some((&lb, &n)) = self.open.first_key_value() {
            if n > 0 || (lb >= self.newest && !all) {
                break;
            }
            self.open.remove(&lb);
            out(HltOutput::LumiBlockEnded(lb));
        }
    }
}

/// Assembles an event for every L1 accept `l1as` yields until it closes and every event in
/// flight is done; each goes to `out` when its last ROB is settled, each luminosity block's
/// end after its events. `on_counts` sees the counts every 100 ms and at the end.
pub fn assemble_events(
    l1as: Receiver<L1Accept>,
    robs: &[RobPort],
    config: HltConfig,
    mut out: impl FnMut(HltOutput),
    mut on_counts: impl FnMut(&HltCounts),
) -> HltCounts {
    let replies: Vec<(Sender<RobReply>, Receiver<RobReply>)> =
        robs.iter().map(|_| unbounded()).collect();
    let mut all = Select::new();
    let mut replies_only = Select::new();
    for (_, rx) in &replies {
        all.recv(rx);
        replies_only.recv(rx);
    }
    let l1_op = all.recv(&l1as);
    let mut events = InFlight::default();
    let mut l1_open = true;
    let ask = |rob: usize, l1_id: u32| {
        robs[rob]
            .requests
            .send(RobRequest {
                l1_id,
                reply: replies[rob].0.clone(),
            })
            .is_ok()
    };
    let mut last_counts = Instant::now();
    while l1_open || !events.pending.is_empty() {
        let now = Instant::now();
        let wait = events
            .retries
            .front()
            .map_or(POLL, |(due, _, _)| due.saturating_duration_since(now))
            .min(POLL);
        let room = l1_open && events.pending.len() < config.max_in_flight;
        let ready = if room {
            all.ready_timeout(wait)
        } else {
            replies_only.ready_timeout(wait)
        };
        // Everything that has come, up to a batch: the select and the checks after it cost
        // as much as an event's own work.
        match ready {
            Ok(op) if room && op == l1_op => {
                let asked = Instant::now();
                for _ in 0..DRAIN_BATCH {
                    if events.pending.len() >= config.max_in_flight {
                        break;
                    }
                    match l1as.try_recv() {
                        Ok(l1a) => events.begin(l1a, asked, robs, ask, &mut out),
                        Err(crossbeam_channel::TryRecvError::Disconnected) => {
                            l1_open = false;
                            break;
                        }
                        Err(crossbeam_channel::TryRecvError::Empty) => break,
                    }
                }
            }
            Ok(rob) => {
                for reply in replies[rob].1.try_iter().take(DRAIN_BATCH) {
                    events.take_reply(rob, robs[rob].source_id, reply, &config, &mut out);
                }
            }
            Err(_) => {}
        }
        let now = Instant::now();
        while let Some(&(due, l1_id, rob)) = events.retries.front() {
            if due > now {
                break;
            }
            events.retries.pop_front();
            if let Some(p) = events.pending.get_mut(&l1_id)
                && !p.settled[rob]
                && !ask(rob, l1_id)
            {
                p.settle(
                    rob,
                    robs[rob].source_id,
                    MissingRob::NoServer,
                    &mut events.counts,
                );
                events.finish_if_done(l1_id, &mut out);
            }
        }
        while let Some(&l1_id) = events.order.front() {
            let Some(p) = events.pending.get_mut(&l1_id) else {
                events.order.pop_front();
                continue;
            };
            if now.duration_since(p.asked) < config.give_up_after {
                break;
            }
            events.order.pop_front();
            for (rob, port) in robs.iter().enumerate() {
                p.settle(
                    rob,
                    port.source_id,
                    MissingRob::TimedOut,
                    &mut events.counts,
                );
            }
            events.finish_if_done(l1_id, &mut out);
        }
        events.lumi_blocks.end(false, &mut out);
        if last_counts.elapsed() >= COUNTS_EVERY {
            last_counts = Instant::now();
            on_counts(&events.counts);
        }
    }
    events.lumi_blocks.end(true, &mut out);
    on_counts(&events.counts);
    events.counts
}

/// The events asked for and not yet handed on, and what the HLT counted.
#[derive(Default)]
struct InFlight {
    pending: FxHashMap<u32, Pending>,
    /// L1 IDs in the order asked, for the give-up check (entries already done are skipped).
    order: VecDeque<u32>,
    /// `not_yet` answers to ask again: when, which L1 ID, which ROB.
    retries: VecDeque<(Instant, u32, usize)>,
    counts: HltCounts,
    lumi_blocks: LumiBlocks,
}

impl InFlight {
    /// Asks every ROB for `l1a` (`ask` false: that ROB has no server).
    fn begin(
        &mut self,
        l1a: L1Accept,
        asked: Instant,
        robs: &[RobPort],
        ask: impl Fn(usize, u32) -> bool,
        out: &mut impl FnMut(HltOutput),
    ) {
        let l1_id = l1a.l1_id;
        self.lumi_blocks.begin(l1a.lumi_block);
        let mut p = Pending {
            l1a,
            asked,
            robs: smallvec![None; robs.len()],
            settled: smallvec![false; robs.len()],
            missing: Vec::new(),
            open: robs.len(),
        };
        for (rob, port) in robs.iter().enumerate() {
            if !ask(rob, l1_id) {
                p.settle(rob, port.source_id, MissingRob::NoServer, &mut self.counts);
            }
        }
        self.order.push_back(l1_id);
        self.pending.insert(l1_id, p);
        self.finish_if_done(l1_id, out);
    }

    /// ROB `rob`'s answer for an event (one no longer in flight is passed over).
    fn take_reply(
        &mut self,
        rob: usize,
        source_id: u32,
        reply: RobReply,
        config: &HltConfig,
        out: &mut impl FnMut(HltOutput),
    ) {
        let l1_id = reply.l1_id;
        let Some(p) = self.pending.get_mut(&l1_id) else {
            return;
        };
        let counts = &mut self.counts;
        match reply.status {
            RobRequestStatus::Found => {
                counts.found += 1;
                if !p.settled[rob] {
                    p.settled[rob] = true;
                    p.open -= 1;
                    p.robs[rob] = reply.fragment;
                }
            }
            RobRequestStatus::NotYet => {
                counts.not_yet += 1;
                self.retries
                    .push_back((Instant::now() + config.retry_after, l1_id, rob));
            }
            RobRequestStatus::Gone => {
                counts.gone += 1;
                p.settle(rob, source_id, MissingRob::Gone, counts);
            }
            RobRequestStatus::Invalid => {
                counts.invalid += 1;
                p.settle(rob, source_id, MissingRob::Invalid, counts);
            }
            RobRequestStatus::Unreachable => {
                counts.unreachable += 1;
                p.settle(rob, source_id, MissingRob::NoServer, counts);
            }
        }
        self.finish_if_done(l1_id, out);
    }

    /// Hands on the event of `l1_id` if every ROB of it is settled.
    fn finish_if_done(&mut self, l1_id: u32, out: &mut impl FnMut(HltOutput)) {
        if self.pending.get(&l1_id).is_none_or(|p| p.open > 0) {
            return;
        }
        let Some(mut p) = self.pending.remove(&l1_id) else {
            return;
        };
        p.missing.sort_unstable_by_key(|m| m.0);
        let event = AssembledEvent {
            l1a: p.l1a,
            robs: p.robs.into_iter().flatten().collect(),
            missing: p.missing,
        };
        let counts = &mut self.counts;
        counts.events += 1;
        counts.complete_events += u64::from(event.is_complete());
        counts.incomplete_events += u64::from(!event.missing.is_empty());
        counts.events_with_incomplete_robs += u64::from(event.robs.iter().any(|r| !r.complete));
        self.lumi_blocks.settle(event.l1a.lumi_block);
        out(HltOutput::Event(event));
    }
}

/// Longest wait for a reply or an L1 ID before retries and give-ups are looked at.
const POLL: Duration = Duration::from_millis(2);
const COUNTS_EVERY: Duration = Duration::from_millis(100);
/// Most L1 accepts or replies taken in one go before the retries and give-ups are looked at.
const DRAIN_BATCH: usize = 64;
