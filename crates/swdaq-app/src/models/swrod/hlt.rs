//! The HLT of a SW ROD run in one process: asks every ROB for each L1 accept's fragment
//! (`swdaq_swrod::hlt`), names incomplete events, accepts one in `hlt_accept_every` and hands
//! its full event to storage; its counts in the monitoring registry.

use super::config::SwrodSettings;
use crossbeam_channel::{Receiver, Sender};
use std::time::Duration;
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::event::EventEncoder;
use swdaq_swrod::files::ToStorage;
use swdaq_swrod::hlt::{HltConfig, HltCounts, HltOutput, RobPort, assemble_events};
use swdaq_swrod::trigger::L1Accept;

pub(super) struct HltMetrics {
    events: Counter,
    incomplete: Counter,
    not_yet: Counter,
    gone: Counter,
    published: HltCounts,
}

pub(super) struct StoreMetrics {
    events: Counter,
    bytes: Counter,
}

impl HltMetrics {
    pub(super) fn register(
        registry: &Registry,
    ) -> Result<(Self, StoreMetrics), swdaq_monitor::MonitorError> {
        let mut b = registry.block("hlt", &[]);
        Ok((
            Self {
                events: b.counter("swdaq_swrod_events_total", "Events the HLT built")?,
                incomplete: b.counter(
                    "swdaq_swrod_incomplete_events_total",
                    "Events built with ROBs missing",
                )?,
                not_yet: b.counter(
                    "swdaq_swrod_not_yet_answers_total",
                    "Requests answered not yet (asked again)",
                )?,
                gone: b.counter(
                    "swdaq_swrod_gone_answers_total",
                    "Requests for fragments the ROB no longer had",
                )?,
                published: HltCounts::default(),
            },
            StoreMetrics {
                events: b.counter("swdaq_swrod_stored_events_total", "Events written to files")?,
                bytes: b.counter("swdaq_swrod_stored_bytes_total", "Bytes of events written")?,
            },
        ))
    }

    fn publish(&mut self, now: &HltCounts) {
        let last = self.published;
        self.events.add(now.events - last.events);
        self.incomplete
            .add(now.incomplete_events - last.incomplete_events);
        self.not_yet.add(now.not_yet - last.not_yet);
        self.gone.add(now.gone - last.gone);
        self.published = *now;
    }
}

/// Incomplete events named in the report, at most.
const INCOMPLETE_EXAMPLES: usize = 20;

pub(super) type IncompleteExample = (u32, Vec<(u32, swdaq_swrod::hlt::MissingRob)>);

pub(super) fn hlt_thread(
    s: &SwrodSettings,
    l1as: Receiver<L1Accept>,
    ports: Vec<RobPort>,
    to_storage: Sender<ToStorage>,
    (mut metrics, stored): (HltMetrics, StoreMetrics),
) -> (HltCounts, Vec<IncompleteExample>, f64) {
    let cpu = cpu_time::ThreadTime::now();
    let config = HltConfig {
        max_in_flight: s.hlt_max_in_flight,
        retry_after: Duration::from_micros(s.hlt_retry_us),
        give_up_after: Duration::from_millis(s.hlt_give_up_ms),
    };
    let encoder = EventEncoder::new(s.run_number);
    let mut examples = Vec::new();
    let mut out = |o: HltOutput| {
        let message = match o {
            HltOutput::Event(e) => {
                if !e.missing.is_empty() && examples.len() < INCOMPLETE_EXAMPLES {
                    examples.push((e.l1a.l1_id, e.missing.clone()));
                }
                // The HLT accepts the first L1 accept and every hlt_accept_every-th after it.
                if !(e.l1a.global_id - 1).is_multiple_of(s.hlt_accept_every) {
                    return;
                }
                let bytes = encoder.encode(&e);
                stored.events.inc();
                stored.bytes.add(bytes.len() as u64);
                ToStorage::Event {
                    lumi_block: e.l1a.lumi_block,
                    bytes,
                    flagged: !e.is_complete(),
                }
            }
            HltOutput::LumiBlockEnded(lb) => ToStorage::LumiBlockEnded(lb),
        };
        let _ = to_storage.send(message);
    };
    let counts = assemble_events(l1as, &ports, config, &mut out, |c| metrics.publish(c));
    drop(ports);
    (counts, examples, cpu.elapsed().as_secs_f64())
}
