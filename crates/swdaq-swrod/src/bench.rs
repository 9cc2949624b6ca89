//! SW ROD benchmark (library side of `swdaq bench swrod`): decoding and aggregation with all
//! checks, on one core (thread CPU time), of blocks an emulated FELIX card produced beforehand (emulation is
//! not timed). The paper's ablation runs in the same process, rounds interleaved: the
//! memory pool against an allocation per fragment, and the power-of-two ring index against
//! a modulo.

use crate::aggregator::{Aggregator, ModuloIndex, PowerOfTwoIndex, RobConfig, SlotIndex};
use crate::decoder::BlockDecoder;
use crate::pool::Allocation;
use serde::Serialize;
use swdaq_sim::felix::{FelixCard, FelixConfig, L1_RATE_HZ};

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub elinks: u16,
    pub l1as: usize,
    pub chunk_bytes: usize,
    pub rounds: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            elinks: 192,
            l1as: 10_000,
            chunk_bytes: 40,
            rounds: 7,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RingIndex {
    PowerOfTwo,
    Modulo,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub allocation: Allocation,
    pub ring_index: RingIndex,
    pub elinks: u16,
    pub chunk_bytes: usize,
    pub chunks: u64,
    /// Median over the rounds.
    pub seconds: f64,
    pub chunks_per_second: f64,
    pub ns_per_chunk: f64,
    /// Fragments built per pass, and how many of them were complete (all of them on clean data).
    pub fragments: u64,
    pub complete_fragments: u64,
    /// FELIX cards (`elinks` e-links at 100 kHz) one core keeps up with.
    pub cards_per_core: f64,
    /// This variant's throughput over the paper's design (pool and power-of-two ring), same run.
    pub vs_pool_power_of_two: f64,
}

pub fn run(config: &BenchConfig) -> Result<Vec<VariantResult>, Box<dyn std::error::Error>> {
    let felix = FelixConfig {
        elinks: config.elinks,
        chunk_min: config.chunk_bytes,
        chunk_max: config.chunk_bytes,
        ..FelixConfig::default()
    };
    let mut card = FelixCard::new(felix)?;
    let mut blocks = Vec::new();
    for _ in 0..config.l1as {
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    let rob = RobConfig {
        elinks: (0..config.elinks).collect(),
        // Buffers sized for the chunks emulated, as a detector would configure its ROB.
        max_chunk_bytes: config.chunk_bytes,
        ..RobConfig::default()
    };
    rob.validate()?;
    let variants = [
        (Allocation::Pool, RingIndex::PowerOfTwo),
        (Allocation::Heap, RingIndex::PowerOfTwo),
        (Allocation::Pool, RingIndex::Modulo),
        (Allocation::Heap, RingIndex::Modulo),
    ];
    let mut seconds = vec![Vec::new(); variants.len()];
    let mut passes = vec![Pass::default(); variants.len()];
    for _ in 0..config.rounds.max(1) {
        for (i, &(allocation, ring)) in variants.iter().enumerate() {
            let (s, pass) = match ring {
                RingIndex::PowerOfTwo => pass::<PowerOfTwoIndex>(&blocks, &rob, allocation)?,
                RingIndex::Modulo => pass::<ModuloIndex>(&blocks, &rob, allocation)?,
            };
            seconds[i].push(s);
            passes[i] = pass;
        }
    }
    let medians: Vec<f64> = seconds
        .iter_mut()
        .map(|s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect();
    Ok(variants
        .iter()
        .enumerate()
        .map(|(i, &(allocation, ring_index))| {
            let chunks = passes[i].chunks;
            let chunks_per_second = chunks as f64 / medians[i];
            VariantResult {
                allocation,
                ring_index,
                elinks: config.elinks,
                chunk_bytes: config.chunk_bytes,
                chunks,
                seconds: medians[i],
                chunks_per_second,
                ns_per_chunk: medians[i] * 1e9 / chunks as f64,
                fragments: passes[i].fragments,
                complete_fragments: passes[i].complete,
                cards_per_core: chunks_per_second / (f64::from(config.elinks) * L1_RATE_HZ),
                vs_pool_power_of_two: medians[0] / medians[i],
            }
        })
        .collect())
}

#[derive(Debug, Clone, Copy, Default)]
struct Pass {
    chunks: u64,
    fragments: u64,
    complete: u64,
}

/// One timed pass over `blocks` with a fresh decoder and aggregator (set up untimed).
fn pass<I: SlotIndex>(
    blocks: &[u8],
    rob: &RobConfig,
    allocation: Allocation,
) -> Result<(f64, Pass), Box<dyn std::error::Error>> {
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let mut aggregator = Aggregator::<I>::new(rob.clone(), allocation)?;
    let mut complete = 0u64;
    let mut out = |f: crate::BuiltFragment| complete += u64::from(f.complete);
    // CPU time of this thread: the machine is shared, and per-core figures are the claim.
    let start = cpu_time::ThreadTime::now();
    decoder.decode_blocks(blocks, |e, chunk, trailer| {
        aggregator.add_chunk(e, chunk, trailer, &mut out)
    });
    aggregator.flush(&mut out);
    let seconds = start.elapsed().as_secs_f64();
    Ok((
        seconds,
        Pass {
            chunks: decoder.counts.chunks,
            fragments: aggregator.counts.fragments,
            complete,
        },
    ))
}
