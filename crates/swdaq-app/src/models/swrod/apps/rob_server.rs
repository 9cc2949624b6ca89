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
use crossbeam_channel::{Receiver, Select, Sender, TryRecvError, unbounded};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use swdaq_net::{Inlet, Liveness, Message, Outlet};
use swdaq_swrod::consumers::{RobReply, RobRequest};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::message::{MAX_BATCH, RobAnswer, RobAsk};

/// The inbox side: requests to the ROBs' servers, horizons to the cards.
pub(super) struct Requests {
    pub(super) inlet: Inlet,
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
                    (Message::RobRequests(asks), Some(hlt)) => {
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
                    (Message::L1aHorizon { l1as }, _) if d.sender == self.hltsv => {
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
/// returns the answers an HLT application did not take.
pub(super) fn send_answers(
    queues: Vec<Vec<Receiver<RobReply>>>,
    source_ids: &[u32],
    to_hlts: &[Outlet],
) -> u64 {
    let mut open: Vec<(usize, usize)> = (0..queues.len())
        .flat_map(|h| (0..source_ids.len()).map(move |r| (h, r)))
        .collect();
    let mut undelivered = 0;
    let mut batches: Vec<(Vec<RobAnswer>, Vec<Vec<u8>>)> = vec![Default::default(); queues.len()];
    while !open.is_empty() {
        let mut select = Select::new();
        for &(h, r) in &open {
            select.recv(&queues[h][r]);
        }
        if select.ready_timeout(NET_WAKE).is_err() {
            continue;
        }
        open.retain(|&(h, r)| {
            loop {
                match queues[h][r].try_recv() {
                    Ok(reply) => {
                        let (answers, frames) = &mut batches[h];
                        answers.push(RobAnswer {
                            source_id: source_ids[r],
                            l1_id: reply.l1_id,
                            status: reply.status,
                            complete: reply.fragment.as_ref().is_some_and(|f| f.complete),
                        });
                        frames.extend(reply.fragment.map(|f| f.bytes().to_vec()));
                        if answers.len() >= MAX_BATCH {
                            undelivered += send(&to_hlts[h], &mut batches[h]);
                        }
                    }
                    Err(TryRecvError::Empty) => break true,
                    Err(TryRecvError::Disconnected) => break false,
                }
            }
        });
        for (h, batch) in batches.iter_mut().enumerate() {
            undelivered += send(&to_hlts[h], batch);
        }
    }
    undelivered
}

/// Sends a batch of answers (none: nothing); the answers not delivered.
fn send(to: &Outlet, (answers, frames): &mut (Vec<RobAnswer>, Vec<Vec<u8>>)) -> u64 {
    if answers.is_empty() {
        return 0;
    }
    let n = answers.len() as u64;
    let message = Message::RobAnswers(std::mem::take(answers));
    // An HLT application is sent only what it asked for: a full queue means it is gone.
    match to.try_send_with_frames(&message, std::mem::take(frames)) {
        Ok(()) => 0,
        Err(_) => n,
    }
}
