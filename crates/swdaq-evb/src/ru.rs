//! A readout unit (other than the event manager): reads and checks its FEDs into
//! super-fragments, keeps them until a builder unit asks, and sends each to the builder unit
//! that asked. Requests for events it has not read yet wait for them. It stops reading its
//! FEDs while `ru_capacity` super-fragments wait (the FEDs' back-pressure), drops
//! super-fragments nobody asked for within `ru_hold_timeout` (counted: the builder unit
//! that should have asked has gone), and stops when every builder unit has gone.

use crate::message::{FragmentRequest, MAX_BATCH, SuperFragment, ToBu};
use crate::metrics::{CounterSet, FedMetrics, PUBLISH_EVERY, queue_gauge};
use crate::producer::Producer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::{Inbox, Outbox, Received};
use swdaq_monitor::{MonitorError, Registry};

const IDLE_WAIT: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuReport {
    pub read: u64,
    pub served: u64,
    /// Super-fragments dropped after `hold` with no request.
    pub expired: u64,
    /// Requests for events already dropped.
    pub unknown_requests: u64,
    /// Super-fragments never asked for when the run ended.
    pub left_at_end: u64,
    /// Times reading paused because the buffer was full.
    pub buffer_full: u64,
    /// Super-fragments a builder unit could not take (it had gone).
    pub undeliverable: u64,
}

pub struct Ru {
    pub index: u16,
    pub producer: Producer,
    pub requests: Box<dyn Inbox<FragmentRequest>>,
    pub to_bus: Vec<Box<dyn Outbox<ToBu>>>,
    pub capacity: usize,
    pub hold: Duration,
    pub max_events: Option<u64>,
}

impl Ru {
    pub fn run(mut self, registry: &Registry) -> Result<(RuReport, Producer), MonitorError> {
        let thread = format!("ru-{}", self.index);
        let ru = self.index.to_string();
        let labels = [("ru", ru.as_str())];
        let mut fed_metrics =
            FedMetrics::register(registry, &thread, self.index, self.producer.feds())?;
        let mut counters = CounterSet::register(
            registry,
            &thread,
            &labels,
            &[
                ("swdaq_evb_ru_superfragments_total", "Super-fragments built"),
                (
                    "swdaq_evb_ru_served_total",
                    "Super-fragments sent to builder units",
                ),
                (
                    "swdaq_evb_ru_expired_total",
                    "Super-fragments dropped: nobody asked in time",
                ),
            ],
        )?;
        let queue = queue_gauge(
            registry,
            &thread,
            &labels,
            "swdaq_evb_ru_buffered",
            "Super-fragments waiting for a request",
        )?;
        let mut report = RuReport::default();
        // Read in event order, so the first entry is always the oldest.
        let mut held: BTreeMap<u64, (Instant, SuperFragment)> = BTreeMap::new();
        let mut wanted: BTreeMap<u64, u16> = BTreeMap::new();
        let mut outgoing: Vec<Vec<SuperFragment>> = vec![Vec::new(); self.to_bus.len()];
        let mut closed = false;
        // The trigger pauses' shift when `held` was last looked at.
        let mut shift = self.producer.clock().pause().shift();
        let mut paused = false;
        while !closed {
            let (next, _) = self.producer.peek();
            let finished = self.max_events.is_some_and(|m| next > m) || self.producer.exhausted();
            let full = held.len() >= self.capacity;
            // Block on the inbox (not a sleep) while there is nothing to read, so a request
            // is served at once.
            let mut wait = match self.producer.not_due_for() {
                _ if finished || full => IDLE_WAIT,
                Some(not_due) => not_due.min(IDLE_WAIT),
                None => Duration::ZERO,
            };
            // Gathered super-fragments go out before blocking, when a batch is full, with the
            // answers to requests, and once every request waiting for reading is answered.
            let mut send_now = !wait.is_zero() || outgoing.iter().any(|b| b.len() >= MAX_BATCH);
            loop {
                if send_now {
                    self.flush(&mut outgoing, &mut report);
                    send_now = false;
                }
                match self.requests.receive(wait) {
                    Received::Message(r) => {
                        send_now = true;
                        for event in r.events {
                            match held.remove(&event) {
                                Some((_, sf)) => self.queue(r.bu, sf, &mut outgoing, &mut report),
                                None if event >= next => {
                                    wanted.insert(event, r.bu);
                                }
                                None => report.unknown_requests += 1,
                            }
                        }
                    }
                    Received::Nothing => break,
                    Received::Closed => {
                        closed = true;
                        break;
                    }
                }
                wait = Duration::ZERO;
            }
            if full {
                report.buffer_full += u64::from(!paused);
                paused = true;
            } else if !finished && self.producer.not_due_for().is_none() {
                paused = false;
                let (_, sf) = self.producer.take();
                report.read += 1;
                match wanted.remove(&next) {
                    Some(bu) => {
                        self.queue(bu, sf, &mut outgoing, &mut report);
                        // Caught up with every request: nothing more joins this batch soon.
                        if wanted.is_empty() {
                            self.flush(&mut outgoing, &mut report);
                        }
                    }
                    None => {
                        held.insert(next, (Instant::now(), sf));
                    }
                }
                if report.read.is_multiple_of(PUBLISH_EVERY) {
                    fed_metrics.publish(self.producer.fed_counts());
                    counters.publish(&[report.read, report.served, report.expired]);
                    queue.set(held.len() as f64);
                }
            }
            self.expire(&mut held, &mut shift, &mut report);
        }
        self.flush(&mut outgoing, &mut report);
        report.left_at_end = held.len() as u64;
        fed_metrics.publish(self.producer.fed_counts());
        counters.publish(&[report.read, report.served, report.expired]);
        queue.set(0.0);
        Ok((report, self.producer))
    }

    /// Drops the super-fragments held longer than `hold` with no request; a pause of the
    /// trigger stops that clock (what was read ahead is kept for after the resume), so its
    /// time is given back to each super-fragment held through it.
    fn expire(
        &self,
        held: &mut BTreeMap<u64, (Instant, SuperFragment)>,
        shift: &mut Duration,
        report: &mut RuReport,
    ) {
        let pause = self.producer.clock().pause();
        if pause.point().is_some() {
            return;
        }
        let now = pause.shift();
        if now > *shift {
            for (since, _) in held.values_mut() {
                *since += now - *shift;
            }
            *shift = now;
        }
        while let Some(entry) = held.first_entry() {
            if entry.get().0.elapsed() < self.hold {
                break;
            }
            entry.remove();
            report.expired += 1;
        }
    }

    fn queue(
        &self,
        bu: u16,
        sf: SuperFragment,
        outgoing: &mut [Vec<SuperFragment>],
        report: &mut RuReport,
    ) {
        match outgoing.get_mut(bu as usize) {
            Some(batch) => batch.push(sf),
            None => report.undeliverable += 1,
        }
    }

    fn flush(&self, outgoing: &mut [Vec<SuperFragment>], report: &mut RuReport) {
        for (outbox, batch) in self.to_bus.iter().zip(outgoing.iter_mut()) {
            if batch.is_empty() {
                continue;
            }
            let n = batch.len() as u64;
            match outbox.send(ToBu::Fragments(std::mem::take(batch))) {
                Ok(()) => report.served += n,
                Err(_) => report.undeliverable += n,
            }
        }
    }
}
