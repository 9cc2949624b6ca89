//! The threads of a SW ROD run and how they end. The cards' blocks come from emulated cards,
//! raw files or FELIX servers (`[swrod.input]`); a stop ends every card's L1 accepts at one
//! common count (emulated: fault-free for the last `clean_tail_l1as`), each SW ROD thread
//! flushes its open fragments once its input has ended or it has built that far, the HLT
//! settles every event it was given, the writer closes its file.

use super::cards::{CardEnd, Progress, RobOutput, Shared, card_thread};
use super::config::{SwrodInputKind, SwrodRunConfig, SwrodSettings};
use super::hlt::{HltMetrics, hlt_thread};
use super::inputs::{
    DRAIN, RodInput, Step, TtcSource, check_card, file_card_thread, read_truth, ttc_thread,
};
use super::report::{CardResult, RodResult, SwrodReport};
use super::sampler::{SamplerMetrics, sample};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_monitor::Registry;
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestCounts, RequestServer, RobRequest,
    serve_requests,
};
use swdaq_swrod::files::{EventFiles, ToStorage, store};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::metrics::RobMetrics;
use swdaq_swrod::net::subscriber::Subscriber;
use swdaq_swrod::trigger::L1Accept;
use swdaq_swrod::{Aggregator, Allocation, BlockDecoder, PowerOfTwoIndex, RobConfig};

/// How often data threads copy their counts to the registry.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Block buffers in flight from a card to one ROB.
const BLOCK_QUEUE: usize = 256;
const EVENT_QUEUE: usize = 1024;
const L1_ID_QUEUE: usize = 1 << 16;

/// Where a SW ROD thread's input comes from, before its thread starts.
enum RodFeed {
    /// Buffers from the card's thread (emulator or file).
    Channel(Receiver<Vec<u8>>, Sender<Vec<u8>>),
    /// Its own subscription to the card's FELIX server, made by the thread.
    Tcp(SocketAddr),
}

struct Rod {
    card: usize,
    rob: RobConfig,
    feed: RodFeed,
    chain: ConsumerChain,
    metrics: RobMetrics,
}

/// Runs the cards (or reads them), SW ROD threads, request servers, sampler, HLT and writer;
/// `hold` pauses emulated cards' L1 accepts while set; `on_tick` sees the run every 20 ms
/// and may stop it.
pub fn run_threads(
    config: &SwrodRunConfig,
    registry: &Registry,
    hold: Arc<AtomicBool>,
    mut on_tick: impl FnMut(&mut Progress<'_>),
) -> anyhow::Result<SwrodReport> {
    let s = &config.swrod;
    let shared = Shared::new(s, hold);
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
            let feed = match s.input.kind {
                SwrodInputKind::Tcp => RodFeed::Tcp(server_address(s, usize::from(card))?),
                SwrodInputKind::Emulator | SwrodInputKind::File => {
                    let (blocks_tx, blocks_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
                    let (free_tx, free_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
                    outputs.push((blocks_tx, free_rx));
                    RodFeed::Channel(blocks_rx, free_tx)
                }
            };
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
            rods.push(Rod {
                card: usize::from(card),
                rob,
                feed,
                chain,
                metrics,
            });
        }
        card_outputs.push(outputs);
    }
    let hlt_metrics = HltMetrics::register(registry)?;
    let sampler_metrics = SamplerMetrics::register(registry)?;
    let card_counters = (0..s.cards)
        .map(|c| {
            registry
                .block(&format!("felix-{c}"), &[("card", &c.to_string())])
                .counter("swdaq_swrod_l1as_total", "L1 accepts of the card")
        })
        .collect::<Result<Vec<_>, _>>()?;
    let files = EventFiles::new(s.file_settings())?;

    std::thread::scope(|scope| {
        let shared = &shared;
        let per_rob = usize::from(s.felix.elinks / s.robs_per_card);
        let card_handles: Vec<_> = card_outputs
            .into_iter()
            .zip(card_counters)
            .enumerate()
            .map(|(c, (outputs, counter))| {
                let l1_tx = (c == 0).then(|| l1_tx.clone());
                let card = c as u16;
                std::thread::Builder::new()
                    .name(format!("felix-{c}"))
                    .spawn_scoped(scope, move || {
                        let result = match s.input.kind {
                            SwrodInputKind::Emulator => {
                                Ok(card_thread(card, s, shared, outputs, l1_tx, counter))
                            }
                            SwrodInputKind::File => file_card_thread(
                                card,
                                &s.input.directory,
                                outputs,
                                per_rob,
                                TtcSource::new(card, s, shared, l1_tx, counter),
                            ),
                            SwrodInputKind::Tcp => server_address(s, c).and_then(|addr| {
                                ttc_thread(
                                    card,
                                    addr,
                                    TtcSource::new(card, s, shared, l1_tx, counter),
                                    |a, e| subscribe(s, shared, a, e),
                                )
                            }),
                        };
                        if result.is_err() {
                            // Every other thread gives up waiting for its input.
                            shared.stopping.store(true, Ordering::Relaxed);
                        }
                        result
                    })
            })
            .collect::<Result<_, _>>()?;
        drop(l1_tx);
        let rod_handles: Vec<_> = rods
            .into_iter()
            .enumerate()
            .map(|(i, rod)| {
                std::thread::Builder::new()
                    .name(format!("swrod-{i}"))
                    .spawn_scoped(scope, move || rod_thread(rod, s, shared))
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
                            RequestServer::new(
                                FragmentStore::new(s.request_store_fragments, PLAUSIBLE_AHEAD),
                                Duration::from_millis(s.request_hold_ms),
                            ),
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
        let cards: Vec<anyhow::Result<CardResult>> = card_handles
            .into_iter()
            .map(|h| h.join().map_err(|_| join_failed("card")))
            .collect::<Result<_, _>>()?;
        let seconds = started.elapsed().as_secs_f64();
        let robs: Vec<anyhow::Result<RodResult>> = rod_handles
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
        let mut cards = cards.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let robs = robs.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let truth_known = read_cards_truth(s, &mut cards)?;
        Ok(SwrodReport {
            seconds,
            settings: s.clone(),
            cards,
            truth_known,
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

/// Card `card`'s FELIX server: the configured address's port + `card`.
fn server_address(s: &SwrodSettings, card: usize) -> anyhow::Result<SocketAddr> {
    let base = s
        .input
        .tcp_address
        .ok_or_else(|| anyhow::anyhow!("swrod.input.tcp_address is not set"))?;
    Ok(swdaq_readout::udp::port_offset(base, card)?)
}

/// Subscribes to e-links of the FELIX server at `addr`, giving up on a stop.
fn subscribe(
    s: &SwrodSettings,
    shared: &Shared,
    addr: SocketAddr,
    elinks: &[u16],
) -> anyhow::Result<Subscriber> {
    Ok(Subscriber::connect(
        addr,
        elinks,
        Duration::from_secs_f64(s.input.connect_timeout_s),
        Duration::from_secs_f64(s.input.reconnect_s),
        || shared.stopping.load(Ordering::Relaxed),
    )?)
}

/// Reads every card's injected faults where the input has them: an emulated card knows its
/// own; a generator's truth is read from its directory. Whether every card's truth is known.
fn read_cards_truth(s: &SwrodSettings, cards: &mut [CardResult]) -> anyhow::Result<bool> {
    let dir = match s.input.kind {
        SwrodInputKind::Emulator => return Ok(true),
        SwrodInputKind::File => &s.input.directory,
        SwrodInputKind::Tcp if s.input.truth.as_os_str().is_empty() => return Ok(false),
        SwrodInputKind::Tcp => &s.input.truth,
    };
    let mut known = true;
    for (c, card) in cards.iter_mut().enumerate() {
        match read_truth(dir, c as u16)? {
            Some(faults) => card.faults = faults,
            None => known = false,
        }
    }
    Ok(known)
}

fn rod_thread(rod: Rod, s: &SwrodSettings, shared: &Shared) -> anyhow::Result<RodResult> {
    let Rod {
        card,
        rob,
        feed,
        mut chain,
        mut metrics,
    } = rod;
    let source_id = rob.source_id;
    let mut input = match feed {
        RodFeed::Channel(blocks, free) => RodInput::Channel(blocks, free),
        RodFeed::Tcp(addr) => {
            let subscribed = subscribe(s, shared, addr, &rob.elinks).and_then(|sub| {
                check_card(&sub, card as u16, s)?;
                Ok(sub)
            });
            match subscribed {
                Ok(sub) => RodInput::Tcp(Box::new(sub)),
                Err(e) => {
                    shared.stopping.store(true, Ordering::Relaxed);
                    return Err(e.context(format!("ROB 0x{source_id:08x}")));
                }
            }
        }
    };
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
    let mut draining_since = None;
    loop {
        let t = Instant::now();
        let step = input.next(|blocks| {
            decoder.decode_blocks(blocks, |e, chunk, trailer| {
                aggregator.add_chunk(e, chunk, trailer, &mut |f| chain.deliver(f))
            })
        });
        match step {
            Step::Data => busy += t.elapsed(),
            Step::Idle => {}
            Step::End => break,
        }
        // After a stop (file or TCP input), the card's last L1 accept is the end.
        if let Some(end) = shared.card_end(card) {
            let since = *draining_since.get_or_insert_with(Instant::now);
            let built = match end {
                CardEnd::At(l1_id) => aggregator.has_passed(l1_id),
                CardEnd::BeforeAny => true,
            };
            if built || since.elapsed() >= DRAIN {
                break;
            }
        }
        if last_publish.elapsed() >= PUBLISH_EVERY {
            last_publish = Instant::now();
            publish(&decoder, &aggregator, &chain);
        }
    }
    aggregator.flush(&mut |f| chain.deliver(f));
    publish(&decoder, &aggregator, &chain);
    Ok(RodResult {
        source_id,
        decoder: decoder.counts,
        aggregator: aggregator.counts,
        consumers: chain.counts().map(|(n, c)| (n.to_owned(), c)).collect(),
        intake: match &input {
            RodInput::Tcp(sub) => Some(sub.counts),
            RodInput::Channel(..) => None,
        },
        cpu_s: cpu.elapsed().as_secs_f64(),
        processing_s: busy.as_secs_f64(),
    })
}
