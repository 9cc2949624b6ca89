//! The readout side of a SW ROD: some of the run's FELIX cards (all of them in one process,
//! its `cards` in a `swrod` application), one SW ROD thread per ROB decoding and
//! aggregating its e-links' blocks into ROB fragments and passing them down its consumer
//! chain — the ROB's request server, the monitoring sampler — and the request servers
//! themselves, reached through each ROB's [`RobPort`].

use super::cards::{RobOutput, Shared, card_thread};
use super::config::SwrodSettings;
use super::report::{CardResult, RodResult};
use super::sampler::{SamplerMetrics, sample};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};
use swdaq_monitor::{Counter, Registry};
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestCounts, RobRequest, serve_requests,
};
use swdaq_swrod::hlt::RobPort;
use swdaq_swrod::metrics::RobMetrics;
use swdaq_swrod::trigger::L1Accept;
use swdaq_swrod::{Aggregator, Allocation, BlockDecoder, BuiltFragment, PowerOfTwoIndex};

/// How often data threads copy their counts to the registry.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Block buffers in flight from a card to one ROB.
const BLOCK_QUEUE: usize = 256;

type Rod = (
    swdaq_swrod::RobConfig,
    Receiver<Vec<u8>>,
    Sender<Vec<u8>>,
    ConsumerChain,
    RobMetrics,
);

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
    pub(super) robs: Vec<RodResult>,
    pub(super) requests: Vec<RequestCounts>,
    pub(super) samples: u64,
    pub(super) sample_errors: u64,
}

impl Readout {
    /// Cards `cards` of the run `s` and their ROBs, with their metrics in `registry`; the
    /// ports of the ROBs' request servers, in ROB order.
    pub(super) fn new(
        s: &SwrodSettings,
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
        for &card in cards {
            let mut outputs = Vec::new();
            for r in 0..s.robs_per_card {
                let rob = s.rob_config(card, r);
                let (blocks_tx, blocks_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
                let (free_tx, free_rx) = bounded::<Vec<u8>>(BLOCK_QUEUE);
                outputs.push((blocks_tx, free_rx));
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
                readout.rods.push((rob, blocks_rx, free_tx, chain, metrics));
            }
            let counter = registry
                .block(&format!("felix-{card}"), &[("card", &card.to_string())])
                .counter(
                    "swdaq_swrod_l1as_total",
                    "L1 accepts the emulated card sent",
                )?;
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
        let cards = self
            .cards
            .into_iter()
            .map(|(card, outputs, counter)| {
                let l1_tx = l1_ids.take();
                std::thread::Builder::new()
                    .name(format!("felix-{card}"))
                    .spawn_scoped(scope, move || {
                        card_thread(card, s, shared, outputs, l1_tx, counter)
                    })
            })
            .collect::<Result<_, _>>()?;
        let rods = self
            .rods
            .into_iter()
            .map(|(rob, blocks, free, chain, metrics)| {
                std::thread::Builder::new()
                    .name(format!("swrod-{}", rob.source_id - s.first_rob_source_id))
                    .spawn_scoped(scope, move || rod_thread(rob, blocks, free, chain, metrics))
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
                            FragmentStore::new(s.request_store_fragments, PLAUSIBLE_AHEAD),
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
    cards: Vec<ScopedJoinHandle<'scope, CardResult>>,
    rods: Vec<ScopedJoinHandle<'scope, RodResult>>,
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
        Ok((
            ReadoutResult {
                cards,
                robs,
                requests,
                samples,
                sample_errors,
            },
            seconds,
        ))
    }
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
