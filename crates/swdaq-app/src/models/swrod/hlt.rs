//! The HLT side of a SW ROD run, the same in one process and in an `hlt` application: the
//! HLT asks every ROB's request server (`RobPort`) for each L1 accept it is given and builds
//! the full event; one event in `hlt_accept_every` (by its number in the run) is accepted
//! and handed to storage (`swdaq_swrod::files`), with the ends of luminosity blocks.

use super::config::SwrodSettings;
use crossbeam_channel::{Receiver, Sender};
use std::time::Duration;
use swdaq_dqm::sample::{SampleCounts, Sampler};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::event::EventEncoder;
use swdaq_swrod::files::{ToStorage, Told};
use swdaq_swrod::hlt::{HltConfig, HltCounts, HltOutput, MissingRob, RobPort, assemble_events};
use swdaq_swrod::trigger::L1Accept;

pub(super) struct HltMetrics {
    events: Counter,
    incomplete: Counter,
    not_yet: Counter,
    gone: Counter,
    published: HltCounts,
}

/// What the storage thread put in its files, counted at each flush point: an event
/// waiting in memory is not stored yet.
pub(super) struct StoreMetrics {
    events: Counter,
    bytes: Counter,
}

impl StoreMetrics {
    /// Registers the storage thread's block; the handles go to its thread.
    pub(super) fn register(registry: &Registry) -> Result<Self, swdaq_monitor::MonitorError> {
        let mut b = registry.block("storage", &[]);
        Ok(Self {
            events: b.counter(
                "swdaq_swrod_stored_events_total",
                "Events written to files (at flush points)",
            )?,
            bytes: b.counter(
                "swdaq_swrod_stored_bytes_total",
                "Bytes of events written to files (at flush points)",
            )?,
        })
    }

    /// Counts what storage tells of a flush point.
    pub(super) fn flushed(&self, told: &Told<'_>) {
        if let Told::Flushed { events, bytes } = told {
            self.events.add(*events);
            self.bytes.add(*bytes);
        }
    }
}

impl HltMetrics {
    pub(super) fn register(registry: &Registry) -> Result<Self, swdaq_monitor::MonitorError> {
        let mut b = registry.block("hlt", &[]);
        Ok(Self {
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
        })
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
pub(super) const INCOMPLETE_EXAMPLES: usize = 20;

/// An event built with ROBs missing: its L1 ID and each missing ROB's source id with why.
pub(super) type IncompleteExample = (u32, Vec<(u32, MissingRob)>);

/// Where the HLT's accepted events go: storage, and every N-th also to data-quality
/// monitoring.
pub(super) struct ToStore {
    pub(super) storage: Sender<ToStorage>,
    pub(super) sampler: Option<Sampler<Vec<u8>>>,
}

/// What the HLT did.
pub(super) struct HltResult {
    pub(super) counts: HltCounts,
    pub(super) incomplete_examples: Vec<IncompleteExample>,
    pub(super) cpu_s: f64,
    /// Stored events sampled for data-quality monitoring, and sampled ones dropped.
    pub(super) dqm_samples: SampleCounts,
}

/// Builds an event of run `run_number` for every L1 accept `l1as` brings (until it closes and every event is
/// settled) from the ROBs behind `ports`; the event is accepted when its number in the run is
/// the first or every `hlt_accept_every`-th after it. Accepted events go to `to_store`;
/// `built(global_id, accepted)` hears of every event once built.
pub(super) fn hlt_thread(
    s: &SwrodSettings,
    run_number: u32,
    l1as: Receiver<L1Accept>,
    ports: Vec<RobPort>,
    to_store: ToStore,
    mut metrics: HltMetrics,
    mut built: impl FnMut(u64, bool),
) -> HltResult {
    let ToStore {
        storage: to_storage,
        mut sampler,
    } = to_store;
    let cpu = cpu_time::ThreadTime::now();
    let config = HltConfig {
        max_in_flight: s.hlt_max_in_flight,
        retry_after: Duration::from_micros(s.hlt_retry_us),
        give_up_after: Duration::from_millis(s.hlt_give_up_ms),
    };
    let encoder = EventEncoder::new(run_number);
    let mut examples = Vec::new();
    let mut out = |o: HltOutput| {
        let message = match o {
            HltOutput::Event(e) => {
                if !e.missing.is_empty() && examples.len() < INCOMPLETE_EXAMPLES {
                    examples.push((e.l1a.l1_id, e.missing.clone()));
                }
                let global_id = e.l1a.global_id;
                let accepted = (global_id.max(1) - 1).is_multiple_of(s.hlt_accept_every);
                built(global_id, accepted);
                if !accepted {
                    return;
                }
                let bytes = encoder.encode(&e);
                if let Some(sampler) = sampler.as_mut() {
                    sampler.offer(|| bytes.clone());
                }
                ToStorage::Event {
                    global_id,
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
    HltResult {
        counts,
        incomplete_examples: examples,
        cpu_s: cpu.elapsed().as_secs_f64(),
        dqm_samples: sampler.as_ref().map(Sampler::counts).unwrap_or_default(),
    }
}
