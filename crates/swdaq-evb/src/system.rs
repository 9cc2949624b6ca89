//! The whole event builder in one process: one thread per readout unit (readout unit 0 is
//! the event manager), per builder unit and per builder unit's writer, linked by in-process
//! channels behind the `swdaq_dataflow::transport` traits; with `[evb.farm]`, the filter-farm
//! stand-in's consumer threads (`farm-N`) take every closed file. Channel capacities cover
//! the most that can be in flight (builder units never hold more than `bu_capacity` events),
//! so no send between units ever waits on a unit that is itself waiting.

use crate::bu::{Bu, BuReport, WriterOutcome, run_writer, writer_counters};
use crate::build::EventBuilder;
use crate::check::FedCounts;
use crate::config::{EvbConfig, EvbConfigError};
use crate::evm::{Evm, EvmReport};
use crate::farm::{ClosedFile, FarmMetrics, FarmReport, run_consumer};
use crate::files::{FileWriter, WriterConfig, WriterError};
use crate::input::InputError;
use crate::message::{BuRequest, FragmentRequest, ToBu, ToEvm};
use crate::pause::TriggerClock;
use crate::producer::Producer;
use crate::reconcile::ReadBack;
use crate::ru::{Ru, RuReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use swdaq_dataflow::transport::{Inbox, Outbox, local};
use swdaq_dqm::sample::SampleTap;
use swdaq_monitor::{MonitorError, Registry};
use swdaq_sim::fed::FedFaultKind;

/// Queue depth between a builder unit and its writer.
const WRITER_QUEUE: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum EvbError {
    #[error(transparent)]
    Config(#[from] EvbConfigError),
    #[error(transparent)]
    Monitor(#[from] MonitorError),
    #[error(transparent)]
    Writer(#[from] WriterError),
    #[error("readout unit {ru}'s FEDs: {source}")]
    Input { ru: u16, source: InputError },
    #[error("cannot start thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("thread {0} panicked")]
    Panicked(String),
    #[error("{0}")]
    Filter(String),
}

/// Fault drills that need a hand inside the process.
#[derive(Debug, Clone, Default)]
pub struct Drills {
    /// (builder unit, events): that builder unit dies after finishing that many events.
    pub kill_bu: Option<(u16, u64)>,
}

#[derive(Debug, Default)]
pub struct EvbSummary {
    pub evm: EvmReport,
    /// Readout units 1.. (the event manager's reading is in `evm`).
    pub rus: Vec<RuReport>,
    pub bus: Vec<BuReport>,
    /// Per builder unit, with what stopped the writer if it failed.
    pub writers: Vec<WriterOutcome>,
    /// Per FED: (readout unit, FED id, counts).
    pub feds: Vec<(u16, u16, FedCounts)>,
    /// Faults the FED emulators injected, per (FED, kind): the truth.
    pub injected: BTreeMap<(u16, FedFaultKind), u64>,
    /// The filter-farm stand-in's work, over its consumers (`None`: no farm).
    pub farm: Option<FarmReport>,
    /// CPU seconds of the event builder's own threads (`evb-*`), when the caller measured them.
    pub builder_cpu_seconds: Option<f64>,
    pub elapsed: Duration,
    /// Builder units settled with what they left on disk (`settle_with_disk`).
    pub read_back: Vec<ReadBack>,
}

impl EvbSummary {
    pub fn built(&self) -> u64 {
        self.bus
            .iter()
            .map(|b| b.build.complete + b.build.incomplete)
            .sum()
    }

    pub fn incomplete(&self) -> u64 {
        self.bus.iter().map(|b| b.build.incomplete).sum()
    }

    /// Events with no FED fragment that passed the checks (garbage, or every FED silent):
    /// settled without a file.
    pub fn no_data(&self) -> u64 {
        self.bus.iter().map(|b| b.build.no_data).sum()
    }

    pub fn written(&self) -> u64 {
        self.writers.iter().map(|w| w.counts.events).sum()
    }

    pub fn written_bytes(&self) -> u64 {
        self.writers.iter().map(|w| w.counts.bytes).sum()
    }

    pub fn shed(&self) -> u64 {
        self.writers.iter().map(|w| w.counts.shed).sum()
    }

    /// Events built but never written: the writer had failed or the disk was full (shed).
    pub fn unwritten(&self) -> u64 {
        let at_writers: u64 = self
            .writers
            .iter()
            .map(|w| w.counts.unwritten + w.counts.shed)
            .sum();
        at_writers + self.bus.iter().map(|b| b.unwritten).sum::<u64>()
    }

    /// Events triggered and given out that are in no file: lost with a dead builder unit,
    /// built and never written, or assigned and never built. Every one is counted somewhere.
    pub fn lost(&self) -> u64 {
        self.evm.lost.len() as u64 + self.unwritten() + self.assigned_not_built().unwrap_or(0)
    }

    /// Events triggered that are neither written, nor without data, nor counted lost: always
    /// 0 unless an event slipped through every counter (the summary then says so).
    pub fn unaccounted(&self) -> u64 {
        self.evm
            .assigned
            .saturating_sub(self.written() + self.no_data() + self.lost())
    }

    /// Events the event manager assigned that no builder unit built, when every unit
    /// reported and none has gone (`None` otherwise: a dead unit's events are counted by
    /// number instead). Zero unless a unit dropped an assignment: the check that keeps such
    /// an event from being in no file and no counter.
    pub fn assigned_not_built(&self) -> Option<u64> {
        (self.evm.gone.is_empty() && self.bus.len() == self.evm.accounts.len()).then(|| {
            let settled = self.built() + self.no_data();
            self.evm.assigned.saturating_sub(settled)
        })
    }

    /// Build time quantile in microseconds over every builder unit.
    pub fn build_time_us(&self, quantile: f64) -> u64 {
        let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("valid precision");
        for b in &self.bus {
            let _ = all.add(&b.build_time_us);
        }
        all.value_at_quantile(quantile)
    }
}

/// Builder units' requests into the event manager's inbox.
#[derive(Clone)]
struct Requests(crossbeam_channel::Sender<ToEvm>);

impl Outbox<BuRequest> for Requests {
    fn send(&self, request: BuRequest) -> Result<(), swdaq_dataflow::transport::Disconnected> {
        Outbox::send(&self.0, ToEvm::Request(request))
    }
}

type Joined<T> = JoinHandle<Result<T, MonitorError>>;

pub struct EvbRun {
    stop: Arc<AtomicBool>,
    started: Instant,
    clock: TriggerClock,
    evm: Joined<(EvmReport, Producer)>,
    rus: Vec<Joined<(RuReport, Producer)>>,
    bus: Vec<Joined<BuReport>>,
    writers: Vec<JoinHandle<WriterOutcome>>,
    run: u32,
    output: PathBuf,
    farm: Vec<JoinHandle<FarmReport>>,
}

/// Builder unit `bu`'s directory under the run's output.
fn bu_directory(output: &Path, bu: u16) -> PathBuf {
    output.join(format!("bu{bu}"))
}

fn spawn<T: Send + 'static>(
    name: String,
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, EvbError> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(body)
        .map_err(|source| EvbError::Spawn { name, source })
}

fn join<T>(name: &str, handle: JoinHandle<T>) -> Result<T, EvbError> {
    handle
        .join()
        .map_err(|_| EvbError::Panicked(name.to_owned()))
}

impl EvbRun {
    /// Starts every thread; with `dqm`, each builder unit samples the events it hands to
    /// its writer into that tap.
    pub fn start(
        config: &EvbConfig,
        registry: &Registry,
        drills: &Drills,
        dqm: Option<&SampleTap<Vec<u8>>>,
    ) -> Result<Self, EvbError> {
        config.validate()?;
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let clock = TriggerClock::new(started);
        let n_rus = config.rus.len();
        let n_bus = config.builder_units as usize;
        let bu_inbox_size = config.bu_capacity as usize * n_rus + 8;
        let ru_inbox_size = config.bu_capacity as usize * n_bus + 8;
        let (request_tx, request_rx) = local::<ToEvm>(n_bus * 4 + 8);
        let request_tx = Requests(request_tx);
        let (to_bu_tx, to_bu_rx): (Vec<_>, Vec<_>) =
            (0..n_bus).map(|_| local::<ToBu>(bu_inbox_size)).unzip();
        let (to_ru_tx, to_ru_rx): (Vec<_>, Vec<_>) = (1..n_rus)
            .map(|_| local::<FragmentRequest>(ru_inbox_size))
            .unzip();
        let outboxes = |txs: &Vec<crossbeam_channel::Sender<ToBu>>| -> Vec<Box<dyn Outbox<ToBu>>> {
            txs.iter()
                .map(|t| Box::new(t.clone()) as Box<dyn Outbox<ToBu>>)
                .collect()
        };

        // Unbounded: a writer never waits for the farm; a slow farm shows as its backlog.
        let (closed_tx, closed_rx) = crossbeam_channel::unbounded::<ClosedFile>();
        let mut farm = Vec::new();
        let filters = config.farm.filters().map_err(EvbError::Filter)?;
        for (c, filter) in (0..).zip(filters) {
            let metrics = FarmMetrics::register(registry, c)?;
            let files = closed_rx.clone();
            farm.push(spawn(format!("farm-{c}"), move || {
                run_consumer(files, metrics, filter)
            })?);
        }
        drop(closed_rx);
        let mut writers = Vec::new();
        let mut bus = Vec::new();
        for (j, inbox) in to_bu_rx.into_iter().enumerate() {
            let bu = j as u16;
            let mut file_writer = FileWriter::new(WriterConfig {
                directory: bu_directory(&config.output, bu),
                run: config.run,
                events_per_file: config.events_per_file,
                min_free_bytes: config.min_free_bytes,
                disk_full: config.disk_full,
                source: format!("bu{j}"),
                provenance: config.provenance.clone(),
            })?;
            if !farm.is_empty() {
                file_writer = file_writer.notify_closed(closed_tx.clone());
            }
            let counters = writer_counters(registry, bu)?;
            let (events_tx, events_rx) = crossbeam_channel::bounded(WRITER_QUEUE);
            let (settled_tx, settled_rx) = crossbeam_channel::unbounded();
            let stop_on_failure = stop.clone();
            writers.push(spawn(format!("evb-writer-{j}"), move || {
                // A writer that cannot write stops the run (the default disk-full policy).
                run_writer(events_rx, file_writer, counters, settled_tx, move |_| {
                    stop_on_failure.store(true, Ordering::Relaxed)
                })
            })?);
            let cfg = config.clone();
            let unit = Bu {
                index: bu,
                lumi_of: Box::new(move |t| cfg.lumi_of(t)),
                builder: EventBuilder::new(config.run, n_rus, config.build_timeout),
                request_batch: config.request_batch,
                capacity: config.bu_capacity,
                to_evm: Box::new(request_tx.clone()),
                settled: settled_rx,
                to_rus: to_ru_tx
                    .iter()
                    .map(|t| Box::new(t.clone()) as Box<dyn Outbox<FragmentRequest>>)
                    .collect(),
                inbox: Box::new(inbox),
                writer: events_tx,
                die_after: drills.kill_bu.filter(|&(k, _)| k == bu).map(|(_, n)| n),
                sampler: dqm
                    .map(|tap| tap.sampler(registry, &format!("bu-{j}")))
                    .transpose()?,
            };
            let registry = registry.clone();
            bus.push(spawn(format!("evb-bu-{j}"), move || unit.run(&registry))?);
        }
        drop(request_tx);
        drop(to_ru_tx);
        // The farm ends once every writer has finished and dropped its sender.
        drop(closed_tx);

        let mut rus = Vec::new();
        for (k, inbox) in to_ru_rx.into_iter().enumerate() {
            let index = (k + 1) as u16;
            let producer = crate::input::open(config, k + 1, clock.clone())
                .map_err(|source| EvbError::Input { ru: index, source })?;
            let unit = Ru {
                index,
                producer,
                requests: Box::new(inbox) as Box<dyn Inbox<FragmentRequest>>,
                to_bus: outboxes(&to_bu_tx),
                capacity: config.ru_capacity,
                hold: config.ru_hold_timeout,
                max_events: config.max_events,
            };
            let registry = registry.clone();
            rus.push(spawn(format!("evb-ru-{index}"), move || {
                unit.run(&registry)
            })?);
        }
        let producer = crate::input::open(config, 0, clock.clone())
            .map_err(|source| EvbError::Input { ru: 0, source })?;
        let evm = Evm {
            producer,
            requests: Box::new(request_rx),
            to_bus: outboxes(&to_bu_tx),
            stop: stop.clone(),
            max_events: config.max_events,
            lumi_of: {
                let cfg = config.clone();
                Box::new(move |t| cfg.lumi_of(t))
            },
        };
        drop(to_bu_tx);
        let registry = registry.clone();
        let evm = spawn("evb-evm".into(), move || evm.run(&registry))?;
        Ok(Self {
            stop,
            started,
            clock,
            evm,
            rus,
            bus,
            writers,
            run: config.run,
            output: config.output.clone(),
            farm,
        })
    }

    /// The run's trigger clock, for run control's pause and resume.
    pub fn clock(&self) -> &TriggerClock {
        &self.clock
    }

    /// Asks the event manager to stop triggering; the rest drains and ends.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// True once every thread has ended.
    pub fn is_finished(&self) -> bool {
        self.evm.is_finished()
            && self.rus.iter().all(|h| h.is_finished())
            && self.bus.iter().all(|h| h.is_finished())
            && self.writers.iter().all(|h| h.is_finished())
            && self.farm.iter().all(|h| h.is_finished())
    }

    /// Waits for every thread; a builder unit that died is settled with what its writer
    /// closed (`EvbSummary::settle_with_disk`), so its lost events are exact.
    pub fn join(self) -> Result<EvbSummary, EvbError> {
        let (evm, evm_producer) = join("evb-evm", self.evm)??;
        let mut feds = Vec::new();
        let mut injected = BTreeMap::new();
        let mut absorb = |ru: u16, p: &Producer| {
            for (&fed, &c) in p.feds().iter().zip(p.fed_counts()) {
                feds.push((ru, fed, c));
            }
            for (&k, &n) in p.injected() {
                *injected.entry(k).or_insert(0) += n;
            }
        };
        absorb(0, &evm_producer);
        let mut rus = Vec::new();
        for (k, h) in self.rus.into_iter().enumerate() {
            let (report, producer) = join("evb-ru", h)??;
            absorb((k + 1) as u16, &producer);
            rus.push(report);
        }
        let bus = self
            .bus
            .into_iter()
            .map(|h| join("evb-bu", h)?.map_err(EvbError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let writers = self
            .writers
            .into_iter()
            .map(|h| join("evb-writer", h))
            .collect::<Result<Vec<_>, _>>()?;
        let mut farm: Option<FarmReport> = None;
        for h in self.farm {
            farm.get_or_insert_default().merge(join("farm", h)?);
        }
        let reported = vec![true; bus.len()];
        let mut summary = EvbSummary {
            evm,
            rus,
            bus,
            writers,
            feds,
            injected,
            farm,
            builder_cpu_seconds: None,
            elapsed: self.started.elapsed(),
            read_back: Vec::new(),
        };
        // The farm deletes the files it verified: a dead unit's directory no longer says what
        // it wrote, so its lost events stay the event manager's upper bound.
        let farmed = summary.farm.is_some();
        summary.settle_with_disk(self.run, &reported, |bu| {
            if farmed {
                Err("the filter farm consumed its files: lost is an upper bound".into())
            } else {
                Ok(bu_directory(&self.output, bu))
            }
        });
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::BuildCounts;
    use crate::evm::BuAccount;

    fn summary(assigned: u64, built_per_bu: &[u64]) -> EvbSummary {
        EvbSummary {
            evm: EvmReport {
                assigned,
                accounts: vec![BuAccount::default(); built_per_bu.len()],
                ..Default::default()
            },
            bus: built_per_bu
                .iter()
                .map(|&complete| BuReport {
                    build: BuildCounts {
                        complete,
                        ..Default::default()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_assigned_event_no_unit_built_is_counted_lost() {
        let s = summary(10, &[4, 4]);
        assert_eq!((s.assigned_not_built(), s.lost()), (Some(2), 2));
        let whole = summary(10, &[5, 5]);
        assert_eq!((whole.assigned_not_built(), whole.lost()), (Some(0), 0));
        // A unit that has gone is settled by number, not by this difference.
        let mut gone = summary(10, &[5, 3]);
        gone.evm.gone.push(1);
        gone.evm.lost = vec![9, 10];
        assert_eq!((gone.assigned_not_built(), gone.lost()), (None, 2));
    }
}
