//! The readout side of a SW ROD: some of the run's FELIX cards (all of them in one process,
//! its `cards` in a `swrod` application), one SW ROD thread per ROB decoding and
//! aggregating its e-links' blocks into ROB fragments and passing them down its consumer
//! chain — the ROB's request server, the monitoring sampler — and the request servers
//! themselves, reached through each ROB's [`RobPort`].

use super::cards::{CardEnd, RobOutput, Shared, card_thread};
use super::config::{SwrodInputKind, SwrodSettings};
use super::inputs::{
    DRAIN, RodInput, Step, TtcSource, check_card, file_card_thread, read_truth, ttc_thread,
};
use super::report::{CardResult, RodResult};
use super::sampler::{SamplerMetrics, sample};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestCounts, RequestServer, RobRequest,
    serve_requests,
};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::metrics::RobMetrics;
use swdaq_swrod::net::subscriber::Subscriber;
use swdaq_swrod::trigger::L1Accept;
use swdaq_swrod::{
    Aggregator, Allocation, BlockDecoder, BuiltFragment, PayloadPlugin, PowerOfTwoIndex, RobConfig,
};

/// How often data threads copy their counts to the registry.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Block buffers in flight from a card to one ROB.
const BLOCK_QUEUE: usize = 256;

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
    /// This ROB's own instance of the aggregation plugin, moved into its thread.
    payload_plugin: Option<PayloadPlugin>,
}

/// The threads of some cards and their ROBs, set up and not yet started.
pub(super) struct Readout {
    cards: Vec<(u16, Vec<RobOutput>, Counter)>,
    rods: Vec<Rod>,
    servers: Vec<(Receiver<Arc<BuiltFragment>>, Receiver<RobRequest>)>,
    samplers: Vec<Receiver<Arc<BuiltFragment>>>,
    sampler_metrics: SamplerMetrics,
}

/// What the readout side counted.
pub(super) struct ReadoutResult {
    pub(super) cards: Vec<CardResult>,
    /// Whether every card's injected faults are known (see `SwrodReport::truth_known`).
    pub(super) truth_known: bool,
    pub(super) robs: Vec<RodResult>,
    pub(super) requests: Vec<RequestCounts>,
    pub(super) samples: u64,
    pub(super) sample_errors: u64,
}

impl Readout {
    /// Cards `cards` of run `run_number` set up as `s` says, and their ROBs, with their
    /// metrics in `registry`; the ports of the ROBs' request servers, in ROB order.
    pub(super) fn new(
        s: &SwrodSettings,
        run_number: u32,
        cards: &[u16],
        registry: &Registry,
    ) -> anyhow::Result<(Self, Vec<RobPort>)> {
        let mut readout = Readout {
            cards: Vec::new(),
            rods: Vec::new(),
            servers: Vec::new(),
            samplers: Vec::new(),
            sampler_metrics: SamplerMetrics::register(registry)?,
        };
        let mut ports = Vec::new();
        // One load per process; an instance per ROB below.
        let plugin = s.aggregator.load()?;
        for &card in cards {
            let mut outputs = Vec::new();
            for r in 0..s.robs_per_card {
                let rob = s.rob_config(card, r, run_number);
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
                readout
                    .samplers
                    .push(chain.add("sampler", s.sample_every, s.consumer_queue));
                let (req_tx, req_rx) = bounded::<RobRequest>(s.hlt_max_in_flight.max(1024));
                ports.push(RobPort {
                    source_id: rob.source_id,
                    requests: req_tx,
                });
                readout.servers.push((to_server, req_rx));
                let thread = format!("swrod-{}", s.rob_index(card, r));
                let metrics = RobMetrics::register(
                    registry,
                    &thread,
                    rob.source_id,
                    &["requests", "sampler"],
                )?;
                let payload_plugin = plugin
                    .as_ref()
                    .map(|p| s.aggregator.instance(p))
                    .transpose()?;
                readout.rods.push(Rod {
                    card: usize::from(card),
                    rob,
                    feed,
                    chain,
                    metrics,
                    payload_plugin,
                });
            }
            let counter = registry
                .block(&format!("felix-{card}"), &[("card", &card.to_string())])
                .counter("swdaq_swrod_l1as_total", "L1 accepts of the card")?;
            readout.cards.push((card, outputs, counter));
        }
        Ok((readout, ports))
    }

    /// Starts every thread in `scope`; the first card tells `l1_ids` (the HLT in one process)
    /// of each L1 accept.
    pub(super) fn spawn<'scope, 'env>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        shared: &'env Shared,
        s: &'env SwrodSettings,
        l1_ids: Option<Sender<L1Accept>>,
    ) -> anyhow::Result<Running<'scope>> {
        let mut l1_ids = l1_ids;
        let per_rob = usize::from(s.felix.elinks / s.robs_per_card);
        let cards =
            self.cards
                .into_iter()
                .map(|(card, outputs, counter)| {
                    let l1_tx = l1_ids.take();
                    std::thread::Builder::new()
                        .name(format!("felix-{card}"))
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
                                SwrodInputKind::Tcp => server_address(s, usize::from(card))
                                    .and_then(|addr| {
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
        let rods = self
            .rods
            .into_iter()
            .map(|rod| {
                std::thread::Builder::new()
                    .name(format!(
                        "swrod-{}",
                        rod.rob.source_id - s.first_rob_source_id
                    ))
                    .spawn_scoped(scope, move || rod_thread(rod, s, shared))
            })
            .collect::<Result<_, _>>()?;
        let servers = self
            .servers
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
        let (samplers, metrics) = (self.samplers, self.sampler_metrics);
        let sampler = std::thread::Builder::new()
            .name("swrod-sampler".into())
            .spawn_scoped(scope, move || {
                sample(samplers, s.felix.l1id_offset, metrics)
            })?;
        Ok(Running {
            cards,
            rods,
            servers,
            sampler,
        })
    }
}

/// The readout side's threads, running.
pub(super) struct Running<'scope> {
    cards: Vec<ScopedJoinHandle<'scope, anyhow::Result<CardResult>>>,
    rods: Vec<ScopedJoinHandle<'scope, anyhow::Result<RodResult>>>,
    servers: Vec<ScopedJoinHandle<'scope, RequestCounts>>,
    sampler: ScopedJoinHandle<'scope, (u64, u64)>,
}

impl Running<'_> {
    /// Every card has sent its last L1 accept.
    pub(super) fn cards_done(&self) -> bool {
        self.cards.iter().all(|h| h.is_finished())
    }

    /// Waits for the cards, the SW ROD threads (each flushes its open fragments) and the
    /// sampler; then `release_ports` lets go of the request servers' ports (a server ends
    /// once its ROB's fragments and requests have both ended) and the servers are waited
    /// for. The seconds from `started` to the cards' end are the run's.
    pub(super) fn join(
        self,
        s: &SwrodSettings,
        started: Instant,
        release_ports: impl FnOnce(),
    ) -> anyhow::Result<(ReadoutResult, f64)> {
        let failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        let cards = self
            .cards
            .into_iter()
            .map(|h| h.join().map_err(|_| failed("card")))
            .collect::<Result<_, _>>()?;
        let seconds = started.elapsed().as_secs_f64();
        let robs = self
            .rods
            .into_iter()
            .map(|h| h.join().map_err(|_| failed("SW ROD")))
            .collect::<Result<_, _>>()?;
        let (samples, sample_errors) = self.sampler.join().map_err(|_| failed("sampler"))?;
        release_ports();
        let requests = self
            .servers
            .into_iter()
            .map(|h| h.join().map_err(|_| failed("request server")))
            .collect::<Result<_, _>>()?;
        let cards: Vec<anyhow::Result<CardResult>> = cards;
        let robs: Vec<anyhow::Result<RodResult>> = robs;
        let mut cards = cards.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let robs = robs.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let truth_known = read_cards_truth(s, &mut cards)?;
        Ok((
            ReadoutResult {
                cards,
                truth_known,
                robs,
                requests,
                samples,
                sample_errors,
            },
            seconds,
        ))
    }
}

/// Card `card`'s FELIX server: the configured address's port + `card`.
pub(super) fn server_address(s: &SwrodSettings, card: usize) -> anyhow::Result<SocketAddr> {
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
    for card in cards.iter_mut() {
        match read_truth(dir, card.card)? {
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
        payload_plugin,
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
    let mut decoder = BlockDecoder::with_layout(s.layout(), &rob.elinks);
    // Validated with the configuration.
    let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Pool)
        .expect("validated ROB configuration");
    if let Some(plugin) = payload_plugin {
        aggregator = aggregator.with_payload_plugin(plugin);
    }
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
        plugin_error: aggregator.first_plugin_error().map(|e| e.to_string()),
        consumers: chain.counts().map(|(n, c)| (n.to_owned(), c)).collect(),
        intake: match &input {
            RodInput::Tcp(sub) => Some(sub.counts),
            RodInput::Channel(..) => None,
        },
        cpu_s: cpu.elapsed().as_secs_f64(),
        processing_s: busy.as_secs_f64(),
    })
}
