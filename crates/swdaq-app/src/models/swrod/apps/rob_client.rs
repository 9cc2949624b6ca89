//! An HLT application's side of the ROB requests: the HLT asks each ROB's port as in one
//! process (`RobRequest` in, `RobReply` out); here every port leads to the `swrod`
//! application that has the ROB. Requests are gathered per application into messages that
//! never wait: those to an application declared gone are answered unreachable at once, so
//! the event names the ROB missing instead of waiting for it; those its full inbox did not
//! take are answered "not yet", so the HLT asks again (until its give-up time), as a busy
//! ROS is asked again rather than left out of the event. Answers come back on the inbox (`answer`), each fragment found as a frame.

use super::NET_WAKE;
use crate::models::swrod::wire::SwrodMessage;
use crossbeam_channel::{Receiver, Select, Sender, TryRecvError, unbounded};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use swdaq_net::Outlet;
use swdaq_swrod::BuiltFragment;
use swdaq_swrod::consumers::{RobReply, RobRequest, RobRequestStatus};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::message::{MAX_BATCH, RobAnswer, RobAsk};

/// The run's ROBs as an HLT application reaches them.
pub(super) struct Robs {
    source_ids: Vec<u32>,
    index_of: BTreeMap<u32, usize>,
    /// The `swrod` application (index among them) that has each ROB.
    app_of: Vec<usize>,
    to_apps: Vec<Outlet<SwrodMessage>>,
    /// Each `swrod` application declared gone.
    gone: Vec<AtomicBool>,
    /// Where each ROB's answers go (the HLT's reply queue of that ROB, from its requests).
    reply_to: Vec<OnceLock<Sender<RobReply>>>,
}

impl Robs {
    /// `robs`: each ROB's source id with the `swrod` application (index) that has it, in the
    /// order the HLT asks them; `to_apps`: an outlet to each `swrod` application. Returns
    /// the ports the HLT asks through and the queues behind them.
    pub(super) fn new(
        robs: Vec<(u32, usize)>,
        to_apps: Vec<Outlet<SwrodMessage>>,
    ) -> (Self, Vec<RobPort>, Vec<Receiver<RobRequest>>) {
        let (ports, queues) = robs
            .iter()
            .map(|&(source_id, _)| {
                let (requests, queue) = unbounded();
                (
                    RobPort {
                        source_id,
                        requests,
                    },
                    queue,
                )
            })
            .unzip();
        let this = Self {
            index_of: robs.iter().enumerate().map(|(i, r)| (r.0, i)).collect(),
            source_ids: robs.iter().map(|r| r.0).collect(),
            app_of: robs.iter().map(|r| r.1).collect(),
            gone: to_apps.iter().map(|_| AtomicBool::new(false)).collect(),
            reply_to: robs.iter().map(|_| OnceLock::new()).collect(),
            to_apps,
        };
        (this, ports, queues)
    }

    /// `swrod` application `app` is gone: its ROBs are unreachable from now on.
    pub(super) fn app_gone(&self, app: usize) {
        self.gone[app].store(true, Ordering::Relaxed);
    }

    /// Answers from a `swrod` application, with the frames of the fragments found (in
    /// order); an answer for a ROB this HLT never asked is dropped.
    pub(super) fn answer(&self, answers: Vec<RobAnswer>, frames: Vec<zmq::Message>) {
        let mut frames = frames.into_iter();
        for a in answers {
            let fragment = (a.status == RobRequestStatus::Found)
                .then(|| frames.next())
                .flatten()
                .map(|f| Arc::new(BuiltFragment::received(f.to_vec(), a.l1_id, a.complete)));
            let Some(reply) = self
                .index_of
                .get(&a.source_id)
                .and_then(|&r| self.reply_to[r].get())
            else {
                continue;
            };
            let _ = reply.send(RobReply {
                l1_id: a.l1_id,
                status: a.status,
                fragment,
            });
        }
    }

    /// Passes the HLT's requests on until every port has closed; returns the requests that
    /// could not be delivered.
    pub(super) fn forward(&self, queues: Vec<Receiver<RobRequest>>) -> u64 {
        let mut open: Vec<usize> = (0..queues.len()).collect();
        let mut undelivered = 0;
        let mut per_app: Vec<Vec<RobRequest>> = self.to_apps.iter().map(|_| Vec::new()).collect();
        let mut asks: Vec<Vec<RobAsk>> = self.to_apps.iter().map(|_| Vec::new()).collect();
        while !open.is_empty() {
            let mut select = Select::new();
            for &r in &open {
                select.recv(&queues[r]);
            }
            if select.ready_timeout(NET_WAKE).is_err() {
                continue;
            }
            open.retain(|&r| {
                loop {
                    match queues[r].try_recv() {
                        Ok(request) => {
                            self.reply_to[r].get_or_init(|| request.reply.clone());
                            let app = self.app_of[r];
                            asks[app].push(RobAsk {
                                source_id: self.source_ids[r],
                                l1_id: request.l1_id,
                            });
                            per_app[app].push(request);
                            if asks[app].len() >= MAX_BATCH {
                                undelivered += self.send(app, &mut asks[app], &mut per_app[app]);
                            }
                        }
                        Err(TryRecvError::Empty) => break true,
                        Err(TryRecvError::Disconnected) => break false,
                    }
                }
            });
            for app in 0..self.to_apps.len() {
                undelivered += self.send(app, &mut asks[app], &mut per_app[app]);
            }
        }
        undelivered
    }

    /// Sends application `app` its gathered requests, or answers them (unreachable: it is
    /// gone; not yet: its inbox is full); the requests not delivered.
    fn send(&self, app: usize, asks: &mut Vec<RobAsk>, requests: &mut Vec<RobRequest>) -> u64 {
        if asks.is_empty() {
            return 0;
        }
        let message = SwrodMessage::RobRequests(std::mem::take(asks));
        let requests = std::mem::take(requests);
        let gone = self.gone[app].load(Ordering::Relaxed);
        if !gone && self.to_apps[app].try_send(&message).is_ok() {
            return 0;
        }
        let status = if gone {
            RobRequestStatus::Unreachable
        } else {
            RobRequestStatus::NotYet
        };
        let n = requests.len() as u64;
        for r in requests {
            let _ = r.reply.send(RobReply {
                l1_id: r.l1_id,
                status,
                fragment: None,
            });
        }
        n
    }
}
