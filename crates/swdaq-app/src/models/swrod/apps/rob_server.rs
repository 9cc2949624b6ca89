//! A `swrod` application's ROB request servers on the network: requests from the HLT
//! applications come on the inbox and go to each ROB's server as in one process
//! (`RobRequest` in); the servers' answers (`RobReply` out) go back to the HLT application
//! that asked, gathered into messages with each fragment found as a frame of its own. The
//! inbox also brings the HLT supervisor's L1A horizon for the cards.
//!
//! A fragment is copied once out of its ROB's pooled buffer into the frame ZeroMQ sends
//! without another copy: the pool's buffers then never wait in a network queue for a slow
//! or gone peer (the aggregator would run out of them), which a shared buffer would.

use super::NET_WAKE;
use crate::models::swrod::wire::SwrodMessage;
use crossbeam_channel::{Receiver, Select, Sender, TryRecvError, unbounded};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use swdaq_net::{Inlet, Liveness, Outlet, WireMessage};
use swdaq_swrod::consumers::{RobReply, RobRequest};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::message::{MAX_BATCH, RobAnswer, RobAsk};

/// The inbox side: requests to the ROBs' servers, horizons to the cards.
pub(super) struct Requests {
    pub(super) inlet: Inlet<SwrodMessage>,
    /// This application's ROBs' servers.
    pub(super) ports: Vec<RobPort>,
    /// The HLT applications (topology ids), in order.
    pub(super) hlts: Vec<u32>,
    pub(super) hltsv: u32,
    pub(super) horizon: Arc<AtomicU64>,
    pub(super) peer_timeout: std::time::Duration,
}

/// Each HLT application's answer queue of each ROB: `[hlt][rob]`.
pub(super) type AnswerQueues = Vec<Vec<(Sender<RobReply>, Receiver<RobReply>)>>;

/// A queue per HLT application and ROB.
pub(super) fn answer_queues(hlts: usize, robs: usize) -> AnswerQueues {
    (0..hlts)
        .map(|_| (0..robs).map(|_| unbounded()).collect())
        .collect()
}

impl Requests {
    /// Passes requests on until `done`; then the ports go (the servers end once their
    /// fragments end too). Returns the inbox's refusals by reason and the requests for ROBs
    /// this application does not have.
    pub(super) fn run(
        mut self,
        replies: Vec<Vec<Sender<RobReply>>>,
        done: &AtomicBool,
    ) -> (BTreeMap<String, u64>, u64) {
        let mut liveness = Liveness::new(self.hlts.iter().copied(), self.peer_timeout);
        let rob_of: BTreeMap<u32, usize> = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| (p.source_id, i))
            .collect();
        let mut foreign = 0u64;
        while !done.load(Ordering::Acquire) {
            if let Some(d) = self.inlet.receive(NET_WAKE) {
                let hlt = self.hlts.iter().position(|&h| h == d.sender);
                match (d.message, hlt) {
                    (SwrodMessage::RobRequests(asks), Some(hlt)) => {
                        for RobAsk { source_id, l1_id } in asks {
                            let Some(&rob) = rob_of.get(&source_id) else {
                                foreign += 1;
                                continue;
                            };
                            let reply = replies[hlt][rob].clone();
                            // A server drains its queue at once; it ends only after we do.
                            let _ = self.ports[rob].requests.send(RobRequest { l1_id, reply });
                        }
                    }
                    (SwrodMessage::L1aHorizon { l1as }, _) if d.sender == self.hltsv => {
                        self.horizon.fetch_max(l1as, Ordering::Relaxed);
                    }
                    (other, _) => eprintln!(
                        "swdaq: swrod: ignored an unexpected {} from application {}",
                        other.kind(),
                        d.sender
                    ),
                }
            }
            for app in liveness.newly_gone(|p| self.inlet.last_seen(p), Instant::now()) {
                eprintln!("swdaq: swrod: HLT application {app} is gone");
            }
        }
        if foreign > 0 {
            eprintln!("swdaq: swrod: {foreign} requests for ROBs this application does not have");
        }
        (self.inlet.counts().refused.clone(), foreign)
    }
}

/// Sends the servers' answers back until every server and the request side have ended;
/// returns the answers an HLT application did not take. An HLT application whose inbox is
/// full has its answers kept and sent again (it asked for them, within its credit, and is
/// only slow); after `give_up` of refusals (it is gone) they are dropped and counted.
pub(super) fn send_answers(
    queues: Vec<Vec<Receiver<RobReply>>>,
    source_ids: &[u32],
    to_hlts: &[Outlet<SwrodMessage>],
    give_up: Duration,
) -> u64 {
    let mut open: Vec<(usize, usize)> = (0..queues.len())
        .flat_map(|h| (0..source_ids.len()).map(move |r| (h, r)))
        .collect();
    let mut undelivered = 0;
    let mut outgoing: Vec<Outgoing> = (0..queues.len()).map(|_| Outgoing::default()).collect();
    while !open.is_empty() || outgoing.iter().any(|o| !o.ready.is_empty()) {
        let mut select = Select::new();
        for &(h, r) in &open {
            select.recv(&queues[h][r]);
        }
        let _ = select.ready_timeout(NET_WAKE);
        open.retain(|&(h, r)| {
            loop {
                match queues[h][r].try_recv() {
                    Ok(reply) => outgoing[h].add(source_ids[r], reply),
                    Err(TryRecvError::Empty) => break true,
                    Err(TryRecvError::Disconnected) => break false,
                }
            }
        });
        for (h, o) in outgoing.iter_mut().enumerate() {
            undelivered += o.send(&to_hlts[h], give_up);
        }
    }
    undelivered
}

/// One HLT application's answers: messages of at most `MAX_BATCH` answers, each with a
/// frame per fragment found, oldest first.
#[derive(Default)]
struct Outgoing {
    ready: VecDeque<(Vec<RobAnswer>, Vec<Vec<u8>>)>,
    /// Since when the application's inbox has refused every message.
    refused_since: Option<Instant>,
}

impl Outgoing {
    fn add(&mut self, source_id: u32, reply: RobReply) {
        if self.ready.back().is_none_or(|(a, _)| a.len() >= MAX_BATCH) {
            self.ready.push_back(Default::default());
        }
        let (answers, frames) = self.ready.back_mut().expect("pushed above");
        answers.push(RobAnswer {
            source_id,
            l1_id: reply.l1_id,
            status: reply.status,
            complete: reply.fragment.as_ref().is_some_and(|f| f.complete),
        });
        frames.extend(reply.fragment.map(|f| f.bytes().to_vec()));
    }

    /// Sends what is ready, oldest first, until the inbox refuses; the answers dropped.
    fn send(&mut self, to: &Outlet<SwrodMessage>, give_up: Duration) -> u64 {
        while let Some((answers, frames)) = self.ready.front_mut() {
            let message = SwrodMessage::RobAnswers(std::mem::take(answers));
            if to.try_send_keeping(&message, frames).is_ok() {
                self.ready.pop_front();
                self.refused_since = None;
                continue;
            }
            // Refused: the answers go back to be sent again, without a copy.
            if let SwrodMessage::RobAnswers(refused) = message {
                *answers = refused;
            }
            let since = *self.refused_since.get_or_insert_with(Instant::now);
            if since.elapsed() < give_up {
                return 0;
            }
            // Refused for `give_up`: the application is gone.
            self.refused_since = None;
            return self.ready.drain(..).map(|(a, _)| a.len() as u64).sum();
        }
        0
    }
}
