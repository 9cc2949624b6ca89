//! The threads of a SW ROD run and how they end: the cards stop at one common L1 accept
//! count (fault-free for the last `clean_tail_l1as`), their channels close, each SW ROD
//! thread flushes its open fragments, the HLT settles every event it was given, the writer
//! closes its file.

use super::config::{SwrodRunConfig, SwrodSettings};
use super::report::{CardResult, RodResult, SwrodReport};
use crossbeam_channel::{Receiver, Select, Sender, bounded};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use swdaq_format::eformat::{ChunkRecords, RobFragment};
use swdaq_format::felix::{BLOCK_SIZE, BlockHeader};
use swdaq_monitor::{Counter, Registry};
use swdaq_sim::felix::{FelixCard, FelixFaults};
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestCounts, RobRequest, serve_requests,
};
use swdaq_swrod::event::EventEncoder;
use swdaq_swrod::files::{EventFiles, ToStorage, store};
use swdaq_swrod::hlt::{HltConfig, HltCounts, HltOutput, RobPort, assemble_events};
use swdaq_swrod::metrics::RobMetrics;
use swdaq_swrod::trigger::L1Accept;
use swdaq_swrod::{Aggregator, Allocation, BlockDecoder, BuiltFragment, PowerOfTwoIndex};

/// How often data threads copy their counts to the registry.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Cards emit L1 accepts in batches of about this much time.
const BATCH_SECONDS: f64 = 100e-6;
/// Batch of L1 accepts when not paced.
const UNPACED_BATCH: u64 = 64;
/// Block buffers in flight from a card to one ROB.
const BLOCK_QUEUE: usize = 256;
const EVENT_QUEUE: usize = 1024;
const L1_ID_QUEUE: usize = 1 << 16;

/// A card's link to one ROB: block buffers out, emptied buffers back for reuse.
type RobOutput = (Sender<Vec<u8>>, Receiver<Vec<u8>>);

struct Shared {
    stop_at: AtomicU64,
    stopping: AtomicBool,
    card_l1as: Vec<AtomicU64>,
}

/// What the run loop sees while the threads work.
pub struct Progress<'a> {
    shared: &'a Shared,
    settings: &'a SwrodSettings,
    last_second: Instant,
}

impl Progress<'_> {
    /// Ends data taking at a common L1 accept count a little ahead of every card.
    pub fn stop(&self) {
        if self.shared.stopping.swap(true, Ordering::Relaxed) {
            return;
        }
        let furthest = self
            .shared
            .card_l1as
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let target = furthest + self.settings.clean_tail_l1as + 2 * batch_l1as(self.settings);
        self.shared.stop_at.fetch_min(target, Ordering::Relaxed);
    }

    pub fn second_passed(&mut self) -> bool {
        if self.last_second.elapsed() >= Duration::from_secs(1) {
            self.last_second = Instant::now();
            true
        } else {
            false
        }
    }
}

fn batch_l1as(s: &SwrodSettings) -> u64 {
    if s.l1a_rate_hz > 0.0 {
        ((s.l1a_rate_hz * BATCH_SECONDS).round() as u64).max(1)
    } else {
        UNPACED_BATCH
    }
}

pub fn run_threads(
    config: &SwrodRunConfig,
    registry: &Registry,
    mut on_tick: impl FnMut(&mut Progress<'_>),
) -> anyhow::Result<SwrodReport> {
    let s = &config.swrod;
    let shared = Shared {
        stop_at: AtomicU64::new(if s.max_l1as > 0 { s.max_l1as } else { u64::MAX }),
        stopping: AtomicBool::new(false),
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

fn card_thread(
    c: u16,
    s: &SwrodSettings,
    shared: &Shared,
    outputs: Vec<RobOutput>,
    l1_tx: Option<Sender<L1Accept>>,
    l1as_counter: Counter,
) -> CardResult {
    let cpu = cpu_time::ThreadTime::now();
    let mut felix = s.felix.clone();
    felix.seed = felix.seed.wrapping_add(u64::from(c));
    // Validated with the configuration.
    let mut card = FelixCard::new(felix).expect("validated FELIX configuration");
    let per_rob = usize::from(s.felix.elinks / s.robs_per_card);
    let batch = batch_l1as(s);
    let start = Instant::now();
    let mut result = CardResult::default();
    let mut blocks = Vec::new();
    let mut clean = false;
    let mut published = 0;
    let ecr_every = u64::from(s.felix.ecr_every);
    loop {
        let stop_at = shared.stop_at.load(Ordering::Relaxed);
        // Never end right after an ECR: the truth lists it, and no chunk would carry it.
        let at_ecr = ecr_every > 0 && result.l1as > 0 && result.l1as.is_multiple_of(ecr_every);
        if result.l1as >= stop_at && !at_ecr {
            break;
        }
        if s.l1a_rate_hz > 0.0 {
            let due = result.l1as as f64 / s.l1a_rate_hz;
            let now = start.elapsed().as_secs_f64();
            if now < due {
                std::thread::sleep(Duration::from_secs_f64(due - now));
            } else {
                result.max_lag_ms = result.max_lag_ms.max((now - due) * 1e3);
            }
        }
        for _ in 0..batch {
            if !clean && result.l1as + s.clean_tail_l1as >= shared.stop_at.load(Ordering::Relaxed) {
                card.set_fault_rates(FelixFaults::default());
                clean = true;
            }
            let l1a = L1Accept::next(&card, result.l1as, s.lumi_block_length(), start);
            card.l1_accept(&mut blocks);
            result.l1as += 1;
            if let Some(tx) = &l1_tx {
                let t = Instant::now();
                if tx.send(l1a).is_err() {
                    break;
                }
                result.waited_for_hlt_s += t.elapsed().as_secs_f64();
            }
            if result.l1as >= shared.stop_at.load(Ordering::Relaxed) {
                break;
            }
        }
        shared.card_l1as[usize::from(c)].store(result.l1as, Ordering::Relaxed);
        l1as_counter.add(result.l1as - published);
        published = result.l1as;
        result.waited_for_rod_s += route(&blocks, per_rob, &outputs);
        blocks.clear();
    }
    card.flush(&mut blocks);
    result.waited_for_rod_s += route(&blocks, per_rob, &outputs);
    result.faults = card.faults().to_vec();
    result.cpu_s = cpu.elapsed().as_secs_f64();
    result
}

/// Hands each ROB the blocks of its e-links (card e-link `i` is number `i`); returns the
/// seconds spent waiting for a ROB's queue.
fn route(blocks: &[u8], per_rob: usize, outputs: &[RobOutput]) -> f64 {
    let mut buffers: Vec<Vec<u8>> = outputs
        .iter()
        .map(|(_, free)| {
            let mut b = free.try_recv().unwrap_or_default();
            b.clear();
            b
        })
        .collect();
    for block in blocks.chunks(BLOCK_SIZE) {
        // The emulator writes whole blocks; a header it could not have written goes to the
        // first ROB, whose decoder counts it corrupt.
        let rob = BlockHeader::decode(block)
            .map_or(0, |h| usize::from(h.elink) / per_rob)
            .min(outputs.len() - 1);
        buffers[rob].extend_from_slice(block);
    }
    let mut waited = 0.0;
    for ((tx, _), b) in outputs.iter().zip(buffers) {
        if b.is_empty() {
            continue;
        }
        let t = Instant::now();
        let _ = tx.send(b);
        waited += t.elapsed().as_secs_f64();
    }
    waited
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

struct SamplerMetrics {
    samples: Counter,
    errors: Counter,
}

impl SamplerMetrics {
    fn register(registry: &Registry) -> Result<Self, swdaq_monitor::MonitorError> {
        let mut b = registry.block("swrod-sampler", &[]);
        Ok(Self {
            samples: b.counter(
                "swdaq_swrod_sampled_fragments_total",
                "ROB fragments the monitoring sampler checked",
            )?,
            errors: b.counter(
                "swdaq_swrod_sample_errors_total",
                "Sampled fragments that did not parse or held a chunk of another L1 ID",
            )?,
        })
    }
}

/// The monitoring sampler: checks every sampled fragment's layout and that each chunk
/// carries the fragment's L1 ID.
fn sample(
    inputs: Vec<Receiver<Arc<BuiltFragment>>>,
    l1id_offset: usize,
    metrics: SamplerMetrics,
) -> (u64, u64) {
    let (mut samples, mut errors) = (0, 0);
    let mut open: Vec<bool> = vec![true; inputs.len()];
    while open.iter().any(|&o| o) {
        let mut sel = Select::new();
        let ids: Vec<usize> = (0..inputs.len()).filter(|&i| open[i]).collect();
        for &i in &ids {
            sel.recv(&inputs[i]);
        }
        let op = sel.select();
        let i = ids[op.index()];
        match op.recv(&inputs[i]) {
            Ok(f) => {
                samples += 1;
                metrics.samples.inc();
                if !fragment_is_sound(&f, l1id_offset) {
                    errors += 1;
                    metrics.errors.inc();
                }
            }
            Err(_) => open[i] = false,
        }
    }
    (samples, errors)
}

fn fragment_is_sound(f: &BuiltFragment, l1id_offset: usize) -> bool {
    let Ok(rob) = RobFragment::parse(f.bytes()) else {
        return false;
    };
    let l1_id = rob.rod.l1_id.to_le_bytes();
    ChunkRecords::new(rob.data)
        .all(|r| r.is_ok_and(|r| r.data.get(l1id_offset..l1id_offset + 4) == Some(&l1_id[..])))
}
