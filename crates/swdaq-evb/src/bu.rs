//! A builder unit: asks the event manager for events when it has room, asks every other
//! readout unit for its super-fragments of the events it is given, builds them
//! ([`crate::build`]) and hands them to its writer thread ([`crate::files`]), telling the
//! event manager with its next request which events the writer has settled. The event
//! manager's ends of lumi sections go to the writer once no event of theirs is still being
//! built, so each EoLS counts all of its lumi section's events. It finishes
//! when the event manager says the run is over and nothing is open, or when its writer
//! fails (then what it was building is counted lost).

use crate::build::{BuildCounts, EventBuilder};
use crate::files::{FileWriter, ToWriter, WriterCounts, WriterError};
use crate::message::{BuRequest, FragmentRequest, ToBu};
use crate::metrics::{CounterSet, PUBLISH_EVERY, queue_gauge};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::{Inbox, Outbox, Received};
use swdaq_dqm::sample::{SampleCounts, Sampler};
use swdaq_monitor::{MonitorError, Registry};

const IDLE_WAIT: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BuReport {
    pub build: BuildCounts,
    /// Events built but never handed to the writer: its thread had gone, or it held them
    /// when it could hand over nothing more.
    pub unwritten: u64,
    /// Build time (assignment to built) in microseconds.
    #[serde(with = "recorded_values")]
    pub build_time_us: Histogram<u64>,
    /// Built events sampled for data-quality monitoring, and sampled ones dropped.
    #[serde(default)]
    pub dqm_samples: SampleCounts,
}

impl Default for BuReport {
    fn default() -> Self {
        Self {
            build: BuildCounts::default(),
            unwritten: 0,
            build_time_us: Histogram::new(3).expect("3 significant digits is valid"),
            dqm_samples: SampleCounts::default(),
        }
    }
}

pub struct Bu {
    pub index: u16,
    pub lumi_of: Box<dyn Fn(u64) -> u32 + Send>,
    pub builder: EventBuilder,
    pub request_batch: u32,
    pub capacity: u32,
    pub to_evm: Box<dyn Outbox<BuRequest>>,
    /// Event numbers the writer has settled (closed files, shed), to report.
    pub settled: crossbeam_channel::Receiver<Vec<u64>>,
    /// Readout units 1.. (the event manager sends its part with the assignment).
    pub to_rus: Vec<Box<dyn Outbox<FragmentRequest>>>,
    pub inbox: Box<dyn Inbox<ToBu>>,
    pub writer: crossbeam_channel::Sender<ToWriter>,
    /// Fault drill: the unit dies (returns without a word) after this many events.
    pub die_after: Option<u64>,
    /// Data-quality monitoring's sampler of the events handed to the writer, each sample
    /// the event's FRD bytes.
    pub sampler: Option<Sampler<Vec<u8>>>,
}

impl Bu {
    pub fn run(mut self, registry: &Registry) -> Result<BuReport, MonitorError> {
        let thread = format!("bu-{}", self.index);
        let bu = self.index.to_string();
        let labels = [("bu", bu.as_str())];
        let mut counters = CounterSet::register(
            registry,
            &thread,
            &labels,
            &[
                (
                    "swdaq_evb_events_built_total",
                    "Events built, complete or not",
                ),
                (
                    "swdaq_evb_events_incomplete_total",
                    "Events built with a readout unit missing",
                ),
                (
                    "swdaq_evb_built_bytes_total",
                    "Bytes of built events, FRD headers included",
                ),
                (
                    "swdaq_evb_wrong_event_id_total",
                    "Super-fragments carrying another event's id",
                ),
                (
                    "swdaq_evb_late_superfragments_total",
                    "Super-fragments for events no longer being built",
                ),
                (
                    "swdaq_evb_events_no_data_total",
                    "Events with no FED fragment that passed the checks: not written",
                ),
            ],
        )?;
        let open_gauge = queue_gauge(
            registry,
            &thread,
            &labels,
            "swdaq_evb_bu_open_events",
            "Events being built",
        )?;
        let writer_gauge = queue_gauge(
            registry,
            &thread,
            &labels,
            "swdaq_evb_bu_writer_queue",
            "Built events waiting for the writer",
        )?;
        let mut report = BuReport::default();
        let mut asked: u64 = 0;
        let mut finished: u64 = 0;
        let mut settled: Vec<u64> = Vec::new();
        // The event manager said the run is over (or every sender has gone): nothing more
        // will be assigned.
        let mut end = false;
        // A request could not be sent: the event manager has ended. What it assigned before
        // that is already in the inbox, so this unit still builds it before it ends.
        let mut evm_gone = false;
        let mut writer_failed = false;
        let mut built = Vec::new();
        let mut new_events = Vec::new();
        // Lumi sections the event manager ended, (lumi, its total), not yet passed on.
        let mut ended_lumis = std::collections::VecDeque::new();
        // The run's last lumi section, once the event manager said the run is over.
        let mut last_lumi = None;
        loop {
            let in_flight = asked as usize + self.builder.open() + self.writer.len();
            let room = in_flight + self.request_batch as usize <= self.capacity as usize;
            settled.extend(self.settled.try_iter().flatten());
            if !end && !evm_gone && (room || !settled.is_empty()) {
                let count = if room { self.request_batch } else { 0 };
                let request = BuRequest {
                    bu: self.index,
                    count,
                    settled: std::mem::take(&mut settled),
                };
                if self.to_evm.send(request).is_ok() {
                    asked += count as u64;
                } else {
                    evm_gone = true;
                }
            }
            let now = Instant::now();
            let mut wait = self.builder.next_deadline().map_or(IDLE_WAIT, |d| {
                d.saturating_duration_since(now).min(IDLE_WAIT)
            });
            let mut drained = false;
            loop {
                match self.inbox.receive(wait) {
                    Received::Message(ToBu::Assigned(batch)) => {
                        for a in batch {
                            asked = asked.saturating_sub(1);
                            new_events.push(a.event);
                            let lumi = (self.lumi_of)(a.trigger_ns);
                            built.extend(self.builder.start(
                                a.event,
                                lumi,
                                a.evm_fragment,
                                Instant::now(),
                            ));
                        }
                    }
                    Received::Message(ToBu::Fragments(batch)) => {
                        let now = Instant::now();
                        for sf in batch {
                            built.extend(self.builder.add(sf.event, sf, now));
                        }
                    }
                    Received::Message(ToBu::EndOfLumi { lumi, total_events }) => {
                        ended_lumis.push_back((lumi, total_events));
                    }
                    Received::Message(ToBu::EndOfRun { last_lumi: last }) => {
                        last_lumi = last;
                        end = true;
                    }
                    Received::Closed => end = true,
                    Received::Nothing => {
                        drained = true;
                        break;
                    }
                }
                if end || new_events.len() >= self.request_batch as usize {
                    break;
                }
                wait = Duration::ZERO;
            }
            if !new_events.is_empty() {
                for ru in &self.to_rus {
                    // A readout unit that has gone shows as missing in every event it should have sent.
                    let _ = ru.send(FragmentRequest {
                        bu: self.index,
                        events: new_events.clone(),
                    });
                }
                new_events.clear();
            }
            self.builder.expire(Instant::now(), &mut built);
            for event in built.drain(..) {
                finished += 1;
                report
                    .build_time_us
                    .saturating_record(event.build_time.as_micros() as u64);
                if let Some(sampler) = self.sampler.as_mut() {
                    sampler.offer(|| event.to_vec());
                }
                if writer_failed || self.writer.send(ToWriter::Event(event)).is_err() {
                    writer_failed = true;
                    report.unwritten += 1;
                }
                if finished.is_multiple_of(PUBLISH_EVERY) {
                    publish(&mut counters, self.builder.counts());
                    open_gauge.set(self.builder.open() as f64);
                    writer_gauge.set(self.writer.len() as f64);
                }
            }
            let oldest_open = self.builder.oldest_open_lumi();
            while let Some(&(lumi, total_events)) = ended_lumis.front() {
                if oldest_open.is_some_and(|open| open <= lumi) {
                    break;
                }
                ended_lumis.pop_front();
                // A writer that has gone is counted by the events it no longer takes.
                let _ = self.writer.send(ToWriter::EndOfLumi { lumi, total_events });
            }
            if self.die_after.is_some_and(|n| finished >= n) {
                report.dqm_samples = self.sampled();
                return Ok(report);
            }
            if writer_failed {
                // Without storage this unit can finish nothing more: what it holds is lost.
                report.unwritten += self.builder.open() as u64;
                break;
            }
            if (end || evm_gone && drained) && self.builder.open() == 0 {
                break;
            }
        }
        if let Some(last_lumi) = last_lumi.filter(|_| !writer_failed) {
            let _ = self.writer.send(ToWriter::EndOfRun { last_lumi });
        }
        publish(&mut counters, self.builder.counts());
        open_gauge.set(0.0);
        report.build = self.builder.counts().clone();
        report.dqm_samples = self.sampled();
        Ok(report)
    }

    fn sampled(&self) -> SampleCounts {
        self.sampler
            .as_ref()
            .map(Sampler::counts)
            .unwrap_or_default()
    }
}

fn publish(counters: &mut CounterSet, c: &BuildCounts) {
    counters.publish(&[
        c.complete + c.incomplete,
        c.incomplete,
        c.bytes,
        c.wrong_event_id,
        c.late,
        c.no_data,
    ]);
}

/// The writer thread's counters, registered before the thread starts.
pub fn writer_counters(registry: &Registry, bu: u16) -> Result<CounterSet, MonitorError> {
    CounterSet::register(
        registry,
        &format!("writer-{bu}"),
        &[("bu", &bu.to_string())],
        &[
            ("swdaq_evb_written_events_total", "Events written to files"),
            ("swdaq_evb_written_files_total", "Files closed"),
            ("swdaq_evb_written_bytes_total", "Bytes in closed files"),
            (
                "swdaq_evb_shed_events_total",
                "Events dropped for want of disk space (shed policy)",
            ),
        ],
    )
}

/// How a writer thread ended: its counts and, if it failed, why.
#[derive(Debug)]
pub struct WriterOutcome {
    pub counts: WriterCounts,
    pub error: Option<WriterError>,
}

/// The writer thread's loop: every built event into files until the builder unit hangs up.
/// After a failure it keeps taking events, counting them unwritten, so none is lost
/// uncounted in its queue; `on_failure` is called once with the error (to stop the run). The numbers of
/// events settled (their file closed, or shed) go to `settled` as they settle.
pub fn run_writer(
    events: crossbeam_channel::Receiver<ToWriter>,
    mut writer: FileWriter,
    mut counters: CounterSet,
    settled: crossbeam_channel::Sender<Vec<u64>>,
    on_failure: impl FnOnce(&WriterError),
) -> WriterOutcome {
    let publish =
        |set: &mut CounterSet, c: WriterCounts| set.publish(&[c.events, c.files, c.bytes, c.shed]);
    let mut since_publish = 0u64;
    let mut error = None;
    let mut unwritten = 0;
    let mut on_failure = Some(on_failure);
    // Events in the open file: settled when it closes.
    let mut in_open_file: Vec<u64> = Vec::new();
    let mut last_lumi = None;
    for message in events.iter() {
        let event = match message {
            ToWriter::Event(event) => event,
            ToWriter::EndOfRun { last_lumi: last } => {
                last_lumi = Some(last);
                continue;
            }
            ToWriter::EndOfLumi { .. } if error.is_some() => continue,
            ToWriter::EndOfLumi { lumi, total_events } => {
                let before = writer.counts();
                match writer.end_lumi(lumi, total_events) {
                    Ok(()) if writer.counts().files > before.files => {
                        let _ = settled.send(std::mem::take(&mut in_open_file));
                    }
                    Ok(()) => {}
                    Err(e) => {
                        if let Some(stop) = on_failure.take() {
                            stop(&e);
                        }
                        error = Some(e);
                    }
                }
                continue;
            }
        };
        if error.is_some() {
            unwritten += 1;
            continue;
        }
        let before = writer.counts();
        let number = event.event;
        if let Err(e) = writer.write(event) {
            unwritten += 1;
            if let Some(stop) = on_failure.take() {
                stop(&e);
            }
            error = Some(e);
            continue;
        }
        let after = writer.counts();
        let mut now_settled = Vec::new();
        if after.files > before.files {
            // The file closed before this event went in: what it held is settled.
            now_settled = std::mem::take(&mut in_open_file);
        }
        if after.shed > before.shed {
            now_settled.push(number);
        } else {
            in_open_file.push(number);
        }
        if !now_settled.is_empty() {
            // The builder unit may have gone; its report then goes with it.
            let _ = settled.send(now_settled);
        }
        since_publish += 1;
        if since_publish >= PUBLISH_EVERY {
            since_publish = 0;
            publish(&mut counters, writer.counts());
        }
    }
    let mut counts = match writer.finish(last_lumi.filter(|_| error.is_none())) {
        Ok(c) => {
            let _ = settled.send(in_open_file);
            c
        }
        Err((e, c)) => {
            error.get_or_insert(e);
            c
        }
    };
    // The writer's own (a file it could not finish) and the events it was given after.
    counts.unwritten += unwritten;
    publish(&mut counters, counts);
    WriterOutcome { counts, error }
}
/// A histogram as its recorded (value, count) pairs: what a builder unit's report carries
/// between processes, and enough to merge quantiles exactly at the histogram's precision.
mod recorded_values {
    use hdrhistogram::Histogram;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<(u64, u64)> = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let mut h = Histogram::new(3).map_err(serde::de::Error::custom)?;
        for (value, count) in Vec::<(u64, u64)>::deserialize(d)? {
            h.record_n(value, count).map_err(serde::de::Error::custom)?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Assignment;

    fn assigned(event: u64) -> ToBu {
        ToBu::Assigned(vec![Assignment {
            event,
            trigger_ns: 0,
            evm_fragment: crate::build::test_part(0, event, event as u32),
        }])
    }

    /// The event manager ends right after its last assignments: the unit's next request
    /// fails, yet every event waiting in its inbox is still built, none left uncounted, and
    /// the lumi section's end and the run's reach the writer after its events.
    #[test]
    fn events_assigned_before_the_event_manager_ended_are_all_built() {
        let (to_evm, evm_inbox) = crossbeam_channel::unbounded::<BuRequest>();
        drop(evm_inbox);
        let (inbox_tx, inbox) = crossbeam_channel::unbounded();
        for event in 1..=3 {
            inbox_tx.send(assigned(event)).unwrap();
        }
        inbox_tx
            .send(ToBu::EndOfLumi {
                lumi: 1,
                total_events: 5,
            })
            .unwrap();
        inbox_tx
            .send(ToBu::EndOfRun { last_lumi: Some(1) })
            .unwrap();
        let (writer, written) = crossbeam_channel::unbounded();
        let (_settled_tx, settled) = crossbeam_channel::unbounded();
        let unit = Bu {
            index: 0,
            lumi_of: Box::new(|_| 1),
            builder: EventBuilder::new(1, 1, Duration::from_secs(5)),
            request_batch: 32,
            capacity: 512,
            to_evm: Box::new(to_evm),
            settled,
            to_rus: Vec::new(),
            inbox: Box::new(inbox),
            writer,
            die_after: None,
            sampler: None,
        };
        let report = unit.run(&Registry::new()).unwrap();
        assert_eq!(report.build.complete, 3);
        let written: Vec<String> = written
            .try_iter()
            .map(|m| match m {
                ToWriter::Event(e) => format!("event {}", e.event),
                ToWriter::EndOfLumi { lumi, total_events } => format!("EoLS {lumi} {total_events}"),
                ToWriter::EndOfRun { last_lumi } => format!("EoR {last_lumi}"),
            })
            .collect();
        assert_eq!(
            written,
            ["event 1", "event 2", "event 3", "EoLS 1 5", "EoR 1"]
        );
    }

    #[test]
    fn a_report_keeps_its_build_time_quantiles_across_serialisation() {
        let mut report = BuReport {
            build: BuildCounts {
                complete: 3,
                ..Default::default()
            },
            unwritten: 1,
            ..Default::default()
        };
        for v in [5, 5, 70, 1200, 900_000] {
            report.build_time_us.record(v).unwrap();
        }
        let back: BuReport =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back.build, report.build);
        assert_eq!(back.build_time_us.len(), 5);
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(
                back.build_time_us.value_at_quantile(q),
                report.build_time_us.value_at_quantile(q)
            );
        }
    }
}
