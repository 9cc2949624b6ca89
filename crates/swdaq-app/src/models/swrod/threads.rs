//! The threads of a SW ROD run in one process and how they end. The cards' blocks come from
//! emulated cards, raw files or FELIX servers (`[swrod.input]`); a stop ends every card's L1
//! accepts at one common count (emulated: fault-free for the last `clean_tail_l1as`), each
//! SW ROD thread flushes its open fragments once its input has ended or it has built that
//! far, the HLT settles every event it was given (card 0 tells it of each L1 accept), the
//! writer closes its files.

use super::cards::{Progress, Shared};
use super::config::SwrodRunConfig;
use super::hlt::{HltMetrics, StoreMetrics, ToStore, hlt_thread};
use super::readout::Readout;
use super::report::SwrodReport;
use crate::runtime::dqm::DqmView;
use crate::runtime::dqm_stream::StreamMessage;
use crossbeam_channel::bounded;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use swdaq_dqm::HistSet;
use swdaq_format::FormatError;
use swdaq_monitor::Registry;
use swdaq_swrod::files::{EventFiles, ToStorage, Told, store_telling};
use swdaq_swrod::trigger::L1Accept;

const EVENT_QUEUE: usize = 1024;
const L1_ID_QUEUE: usize = 1 << 16;

/// Runs the cards, SW ROD threads, request servers, sampler, HLT and writer; `hold` pauses
/// the cards' L1 accepts while set; `on_dqm` hears of online monitoring (`[dqm]`) once it has
/// started; `watch` supervises the run (it may stop it) and returns once every card has ended.
pub fn run_threads(
    config: &SwrodRunConfig,
    registry: &Registry,
    hold: Arc<AtomicBool>,
    on_dqm: impl FnOnce(DqmView),
    watch: impl FnOnce(&mut Progress<'_>),
) -> anyhow::Result<SwrodReport> {
    let s = &config.swrod;
    let shared = Shared::new(s, hold, Arc::new(AtomicU64::new(u64::MAX)));
    let started = Instant::now();
    let (l1_tx, l1_rx) = bounded::<L1Accept>(L1_ID_QUEUE);
    let (event_tx, event_rx) = bounded::<ToStorage>(EVENT_QUEUE);
    let all_cards: Vec<u16> = (0..s.cards).collect();
    let (readout, ports) = Readout::new(s, config.run.number, &all_cards, registry)?;
    let hlt_metrics = HltMetrics::register(registry)?;
    let store_metrics = StoreMetrics::register(registry)?;
    let files = EventFiles::new(s.file_settings(&config.run))?;
    let dqm = config
        .dqm
        .start(&config.run.output_dir, fill_dqm, registry)?;
    let sampler = (dqm.as_ref())
        .map(|d| d.tap().sampler(registry, "hlt"))
        .transpose()?;
    if let Some(dqm) = &dqm {
        on_dqm(dqm.view());
    }
    let storage_failed = AtomicBool::new(false);

    std::thread::scope(|scope| {
        let shared = &shared;
        let storage_failed = &storage_failed;
        let running = readout.spawn(scope, shared, s, Some(l1_tx))?;
        let hlt = std::thread::Builder::new()
            .name("hlt".into())
            .spawn_scoped(scope, move || {
                hlt_thread(
                    s,
                    config.run.number,
                    l1_rx,
                    ports,
                    ToStore {
                        storage: event_tx,
                        sampler,
                    },
                    hlt_metrics,
                    |_, _| {},
                )
            })?;
        let writer = std::thread::Builder::new()
            .name("storage".into())
            .spawn_scoped(scope, move || {
                store_telling(files, event_rx, |told| {
                    if let Told::Failed(_) = told {
                        storage_failed.store(true, Ordering::Relaxed);
                    }
                    store_metrics.flushed(&told)
                })
            })?;

        watch(&mut Progress {
            shared,
            settings: s,
            storage_failed,
            cards_done: &|| running.cards_done(),
        });
        // The HLT lets go of the servers' ports once it has settled its last event.
        let (readout, seconds) = running.join(s, started, || {})?;
        let join_failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        let hlt = hlt.join().map_err(|_| join_failed("HLT"))?;
        let stored = writer.join().map_err(|_| join_failed("storage"))?;
        let dqm = dqm.map(|d| d.finish(&config.run, hlt.dqm_samples));
        Ok(SwrodReport {
            run_number: config.run.number,
            seconds,
            settings: s.clone(),
            l1as_to_hlt: readout.cards.first().map_or(0, |c| c.l1as),
            cards: readout.cards,
            truth_known: readout.truth_known,
            robs: readout.robs,
            requests: readout.requests,
            hlt: hlt.counts,
            hlt_cpu_s: hlt.cpu_s,
            incomplete_examples: hlt.incomplete_examples,
            samples: readout.samples,
            sample_errors: readout.sample_errors,
            stored_events: stored.events,
            stored_flagged_events: stored.flagged,
            stored_bytes: stored.bytes,
            unwritten_events: stored.unwritten,
            files: stored.files,
            storage_error: stored.error,
            apps: None,
            dqm,
        })
    })
}

/// One sampled full event into the run's histograms, as `swdaq dqm` fills them from
/// EventStorage files.
fn fill_dqm(set: &mut HistSet, event: Vec<u8>) -> Result<(), FormatError> {
    swdaq_dqm::swrod::fill_event(set, &event)
}

/// One message of an HLT application's event stream into the run's histograms, as an event
/// sampled in one process is filled; a message that is not one event is refused with why
/// (counted unreadable).
pub(super) fn fill_published(set: &mut HistSet, message: StreamMessage) -> Result<(), String> {
    (message.fill_sample(set, fill_dqm)).map_err(|e| format!("event stream message: {e}"))
}
