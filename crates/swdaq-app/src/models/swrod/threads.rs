//! The threads of a SW ROD run and how they end: the cards stop at one common L1 accept
//! count (fault-free for the last `clean_tail_l1as`), their channels close, each SW ROD
//! thread flushes its open fragments, the HLT settles every event it was given, the writer
//! closes its file.

use super::cards::{Progress, RobOutput, Shared, card_thread};
use super::config::{SwrodRunConfig, SwrodSettings};
use super::report::{CardResult, RodResult, SwrodReport};
use super::sampler::{SamplerMetrics, sample};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestCounts, RobRequest, serve_requests,
};
use swdaq_swrod::event::EventEncoder;
use swdaq_swrod::files::{EventFiles, ToStorage, store};
use swdaq_swrod::hlt::{HltConfig, HltCounts, HltOutput, RobPort, assemble_events};
use swdaq_swrod::metrics::RobMetrics;
use swdaq_swrod::trigger::L1Accept;
use swdaq_swrod::{Aggregator, Allocation, BlockDecoder, PowerOfTwoIndex};

/// How often data threads copy their counts to the registry.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Block buffers in flight from a card to one ROB.
const BLOCK_QUEUE: usize = 256;
const EVENT_QUEUE: usize = 1024;
const L1_ID_QUEUE: usize = 1 << 16;

/// Runs the cards, SW ROD threads, request servers, sampler, HLT and writer; `hold` pauses
/// the cards' L1 accepts while set; `on_tick` sees the run every 20 ms and may stop it.
pub fn run_threads(
    config: &SwrodRunConfig,
    registry: &Registry,
    hold: Arc<AtomicBool>,
    mut on_tick: impl FnMut(&mut Progress<'_>),
) -> anyhow::Result<SwrodReport> {
    let s = &config.swrod;
    let shared = Shared {
        stop_at: AtomicU64::new(if s.max_l1as > 0 { s.max_l1as } else { u64::MAX }),
        stopping: AtomicBool::new(false),
        hold,
        card_l1as: (0..s.cards).map(|_| AtomicU64::new(0)).collect(),
    };
    let started = Instant::now();
    let (l1_tx, l1_rx) = bounded::<L1Accept>(L1_ID_QUEUE);
    let (event_tx, event_rx) = bounded::<ToStorage>(EVENT_QUEUE);
    let mut ports = Vec::new();
    let mut rods = Vec::new();
    let mut samplers = Vec::new();
    let mut servers = Vec::new();
    let mut card_outputs: Vec<Vec<RobOutput>> = Vec::new();
    for card in 0..s.cards {
        let mut outputs = Vec::new();
        for r in 0..s.robs_per_card {
            let rob = s.rob_config(card, r);
            let (blocks_tx, blocks_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
            let (free_tx, free_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
            outputs.push((blocks_tx, free_rx));
            let mut chain = ConsumerChain::new();
            let to_server = chain.add("requests", 1, s.consumer_queue);
            samplers.push(chain.add("sampler", s.sample_every, s.consumer_queue));
            let (req_tx, req_rx) = bounded::<RobRequest>(s.hlt_max_in_flight.max(1024));
            ports.push(RobPort {
                source_id: rob.source_id,
                requests: req_tx,
            });
            servers.push((to_server, req_rx));
            let thread = format!("swrod-{}", rods.len());
            let metrics =
                RobMetrics::register(registry, &thread, rob.source_id, &["requests", "sampler"])?;
            rods.push((rob, blocks_rx, free_tx, chain, metrics));
        }
        card_outputs.push(outputs);
    }
    let hlt_metrics = HltMetrics::register(registry)?;
    let sampler_metrics = SamplerMetrics::register(registry)?;
    let card_counters = (0..s.cards)
        .map(|c| {
            registry
                .block(&format!("felix-{c}"), &[("card", &c.to_string())])
                .counter(
                    "swdaq_swrod_l1as_total",
                    "L1 accepts the emulated card sent",
                )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let files = EventFiles::new(s.file_settings())?;

    std::thread::scope(|scope| {
        let shared = &shared;
        let card_handles: Vec<_> = card_outputs
            .into_iter()
            .zip(card_counters)
            .enumerate()
            .map(|(c, (outputs, counter))| {
                let l1_tx = (c == 0).then(|| l1_tx.clone());
                std::thread::Builder::new()
                    .name(format!("felix-{c}"))
                    .spawn_scoped(scope, move || {
                        card_thread(c as u16, s, shared, outputs, l1_tx, counter)
                    })
            })
            .collect::<Result<_, _>>()?;
        drop(l1_tx);
        let rod_handles: Vec<_> = rods
            .into_iter()
            .enumerate()
            .map(|(i, (rob, blocks, free, chain, metrics))| {
                std::thread::Builder::new()
                    .name(format!("swrod-{i}"))
                    .spawn_scoped(scope, move || rod_thread(rob, blocks, free, chain, metrics))
            })
            .collect::<Result<_, _>>()?;
        let server_handles: Vec<_> = servers
            .into_iter()
            .enumerate()
            .map(|(i, (fragments, requests))| {
                std::thread::Builder::new()
                    .name(format!("swrod-req-{i}"))
                    .spawn_scoped(scope, move || {
                        serve_requests(
                            fragments,
                            requests,
                            FragmentStore::new(s.request_store_fragments, PLAUSIBLE_AHEAD),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let sampler = std::thread::Builder::new()
            .name("swrod-sampler".into())
            .spawn_scoped(scope, move || {
                sample(samplers, s.felix.l1id_offset, sampler_metrics)
            })?;
        let hlt = std::thread::Builder::new()
            .name("hlt".into())
            .spawn_scoped(scope, move || {
                hlt_thread(s, l1_rx, ports, event_tx, hlt_metrics)
            })?;
        let writer = std::thread::Builder::new()
            .name("storage".into())
            .spawn_scoped(scope, move || store(files, event_rx))?;

        let mut progress = Progress {
            shared,
            settings: s,
            last_second: Instant::now(),
        };
        let cards_done = || {
            card_handles
                .iter()
                .all(|h: &std::thread::ScopedJoinHandle<'_, _>| h.is_finished())
        };
        while !cards_done() {
            on_tick(&mut progress);
            std::thread::sleep(Duration::from_millis(20));
        }
        let join_failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        let cards: Vec<CardResult> = card_handles
            .into_iter()
            .map(|h| h.join().map_err(|_| join_failed("card")))
            .collect::<Result<_, _>>()?;
        let seconds = started.elapsed().as_secs_f64();
        let robs: Vec<RodResult> = rod_handles
            .into_iter()
            .map(|h| h.join().map_err(|_| join_failed("SW ROD")))
            .collect::<Result<_, _>>()?;
        let (hlt, incomplete_examples, hlt_cpu_s) = hlt.join().map_err(|_| join_failed("HLT"))?;
        let requests: Vec<RequestCounts> = server_handles
            .into_iter()
            .map(|h| h.join().map_err(|_| join_failed("request server")))
            .collect::<Result<_, _>>()?;
        let (samples, sample_errors) = sampler.join().map_err(|_| join_failed("sampler"))?;
        let stored = writer.join().map_err(|_| join_failed("storage"))?;
        Ok(SwrodReport {
            seconds,
            settings: s.clone(),
            cards,
            robs,
            requests,
            hlt,
            hlt_cpu_s,
            incomplete_examples,
            samples,
            sample_errors,
            stored_events: stored.events,
            stored_flagged_events: stored.flagged,
            stored_bytes: stored.bytes,
            unwritten_events: stored.unwritten,
            files: stored.files,
            storage_error: stored.error,
        })
    })
}

fn rod_thread(
    rob: swdaq_swrod::RobConfig,
    blocks: Receiver<Vec<u8>>,
    free: Sender<Vec<u8>>,
    mut chain: ConsumerChain,
    mut metrics: RobMetrics,
) -> RodResult {
    let source_id = rob.source_id;
    let mut decoder = BlockDecoder::new(&rob.elinks);
    // Validated with the configuration.
    let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Pool)
        .expect("validated ROB configuration");
    let cpu = cpu_time::ThreadTime::now();
    let mut busy = Duration::ZERO;
    let mut last_publish = Instant::now();
    let mut publish = |decoder: &BlockDecoder,
                       aggregator: &Aggregator<PowerOfTwoIndex>,
                       chain: &ConsumerChain| {
        metrics.publish(
            &decoder.counts,
            &aggregator.counts,
            aggregator.open_fragments(),
            chain.counts().map(|(_, c)| c),
        );
        // A registration failure only loses the per-e-link series; the totals stay.
        let _ = metrics.publish_elink_errors(&aggregator.config().elinks, &aggregator.elink_errors);
    };
    for buf in blocks.iter() {
        let t = Instant::now();
        decoder.decode_blocks(&buf, |e, chunk, trailer| {
            aggregator.add_chunk(e, chunk, trailer, &mut |f| chain.deliver(f))
        });
        busy += t.elapsed();
        let _ = free.try_send(buf);
        if last_publish.elapsed() >= PUBLISH_EVERY {
            last_publish = Instant::now();
            publish(&decoder, &aggregator, &chain);
        }
    }
    aggregator.flush(&mut |f| chain.deliver(f));
    publish(&decoder, &aggregator, &chain);
    RodResult {
        source_id,
        decoder: decoder.counts,
        aggregator: aggregator.counts,
        consumers: chain.counts().map(|(n, c)| (n.to_owned(), c)).collect(),
        cpu_s: cpu.elapsed().as_secs_f64(),
        processing_s: busy.as_secs_f64(),
    }
}

struct HltMetrics {
    events: Counter,
    incomplete: Counter,
    not_yet: Counter,
    gone: Counter,
    published: HltCounts,
}

struct StoreMetrics {
    events: Counter,
    bytes: Counter,
}

impl HltMetrics {
    fn register(registry: &Registry) -> Result<(Self, StoreMetrics), swdaq_monitor::MonitorError> {
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

type IncompleteExample = (u32, Vec<(u32, swdaq_swrod::hlt::MissingRob)>);

fn hlt_thread(
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
