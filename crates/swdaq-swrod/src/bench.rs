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
    let blocks = emulate(config)?;
    let rob = rob_config(config);
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

/// Paced at the card's real rate: the emulated L1 accepts are replayed again and again (a
/// new run each time: [`Aggregator::restart`]) for `seconds`, each block handed to the
/// decoder no earlier than it would have arrived.
#[derive(Debug, Clone, Serialize)]
pub struct RealtimeResult {
    pub seconds: f64,
    pub chunks: u64,
    pub chunks_per_second: f64,
    /// Fragments built, complete ones, and every chunk-level problem counted (must be 0).
    pub fragments: u64,
    pub complete_fragments: u64,
    pub problems: u64,
    /// Largest delay of a block's processing after its arrival time.
    pub max_lag_ms: f64,
    /// CPU time of the processing thread over wall time (sleeps while ahead).
    pub busy_fraction: f64,
}

pub fn realtime(
    config: &BenchConfig,
    seconds: f64,
) -> Result<RealtimeResult, Box<dyn std::error::Error>> {
    let blocks = emulate(config)?;
    let rob = rob_config(config);
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Pool)?;
    let (mut fragments, mut complete) = (0u64, 0u64);
    let mut out = |f: crate::BuiltFragment| {
        fragments += 1;
        complete += u64::from(f.complete);
    };
    let n_blocks = blocks.len() / swdaq_format::felix::BLOCK_SIZE;
    let pass_seconds = config.l1as as f64 / L1_RATE_HZ;
    // Blocks are released in batches of about 100 us of data.
    let batch = (n_blocks as f64 * 1e-4 / pass_seconds).ceil().max(1.0) as usize;
    let cpu = cpu_time::ThreadTime::now();
    let start = std::time::Instant::now();
    let mut max_lag = 0f64;
    let mut released = 0u64;
    'run: loop {
        for (i, group) in blocks
            .chunks(batch * swdaq_format::felix::BLOCK_SIZE)
            .enumerate()
        {
            let due = released as f64 * pass_seconds
                + (i * batch) as f64 * pass_seconds / n_blocks as f64;
            if due >= seconds {
                break 'run;
            }
            let now = start.elapsed().as_secs_f64();
            if now < due {
                std::thread::sleep(std::time::Duration::from_secs_f64(due - now));
            } else {
                max_lag = max_lag.max(now - due);
            }
            decoder.decode_blocks(group, |e, chunk, trailer| {
                aggregator.add_chunk(e, chunk, trailer, &mut out)
            });
        }
        released += 1;
        aggregator.restart(&mut out);
        decoder.restart();
    }
    aggregator.flush(&mut out);
    let wall = start.elapsed().as_secs_f64();
    let (d, a) = (decoder.counts, aggregator.counts);
    Ok(RealtimeResult {
        seconds: wall,
        chunks: d.chunks,
        chunks_per_second: d.chunks as f64 / wall,
        fragments,
        complete_fragments: complete,
        problems: d.corrupt_blocks
            + d.sequence_gaps
            + d.broken_chunks
            + a.late_chunks
            + a.duplicate_chunks
            + a.missing_chunks
            + a.malformed_chunks
            + a.oversized_chunks
            + a.ring_collisions,
        max_lag_ms: max_lag * 1e3,
        busy_fraction: cpu.elapsed().as_secs_f64() / wall,
    })
}

fn emulate(config: &BenchConfig) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut card = FelixCard::new(FelixConfig {
        elinks: config.elinks,
        chunk_min: config.chunk_bytes,
        chunk_max: config.chunk_bytes,
        ..FelixConfig::default()
    })?;
    let mut blocks = Vec::new();
    for _ in 0..config.l1as {
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    Ok(blocks)
}

fn rob_config(config: &BenchConfig) -> RobConfig {
    RobConfig {
        elinks: (0..config.elinks).collect(),
        // Buffers sized for the chunks emulated, as a detector would configure its ROB.
        max_chunk_bytes: config.chunk_bytes,
        ..RobConfig::default()
    }
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

/// The message sizes of the SW ROD paper's Phase-2 plot (rate with 48 links against message
/// size, 40 to 280 bytes).
pub const PHASE2_MESSAGE_BYTES: [usize; 7] = [40, 80, 120, 160, 200, 240, 280];

/// A FELIX FULL-mode shape for [`mode_run`]: `links` links of one card (one ROB), chunk sizes
/// uniform in `[chunk_min, chunk_max]`, `block_kib` KiB blocks with 32-bit trailers.
#[derive(Debug, Clone, Serialize)]
pub struct ModeBenchConfig {
    pub name: &'static str,
    pub links: u16,
    pub chunk_min: usize,
    pub chunk_max: usize,
    pub block_kib: u16,
    pub l1as: usize,
    pub rounds: usize,
}

impl ModeBenchConfig {
    /// The SW ROD paper's FULL mode: 12 links, about 5 KB per link and L1 accept.
    pub fn full_mode(l1as: usize, rounds: usize) -> Self {
        Self {
            name: "FULL mode",
            links: 12,
            chunk_min: 4600,
            chunk_max: 5400,
            block_kib: 4,
            l1as,
            rounds,
        }
    }

    /// Phase-2: 48 links at 40 to 280 bytes per link and L1 accept.
    pub fn phase2(l1as: usize, rounds: usize) -> Self {
        Self {
            name: "Phase-2",
            links: 48,
            chunk_min: PHASE2_MESSAGE_BYTES[0],
            chunk_max: PHASE2_MESSAGE_BYTES[PHASE2_MESSAGE_BYTES.len() - 1],
            block_kib: 4,
            l1as,
            rounds,
        }
    }

    /// Phase-2 with every message of `bytes`: one point of the SW ROD paper's "input rate with
    /// 48 links" against message size.
    pub fn phase2_at(bytes: usize, l1as: usize, rounds: usize) -> Self {
        Self {
            chunk_min: bytes,
            chunk_max: bytes,
            ..Self::phase2(l1as, rounds)
        }
    }
}

/// Decoding and aggregation of FULL-mode blocks on one core (thread CPU time, median over
/// the rounds), against a memcpy of the same bytes in the same rounds.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    pub config: ModeBenchConfig,
    /// Bytes of blocks decoded per pass (the card's DMA buffer), and of chunks in them.
    pub block_bytes: u64,
    pub chunk_bytes: u64,
    pub chunks: u64,
    pub seconds: f64,
    /// Chunk bytes aggregated per CPU second.
    pub gbytes_per_s: f64,
    /// The same block bytes copied, block by block, into a buffer of the same size (paged in
    /// beforehand), per CPU second.
    pub memcpy_seconds: f64,
    pub memcpy_gbytes_per_s: f64,
    /// Aggregation time over memcpy time of the same bytes: the target is >= 0.6.
    pub vs_memcpy: f64,
    pub l1as_per_s: f64,
    pub fragments: u64,
    pub complete_fragments: u64,
}

pub fn mode_run(config: &ModeBenchConfig) -> Result<ModeResult, Box<dyn std::error::Error>> {
    let felix = FelixConfig {
        mode: swdaq_sim::felix::FelixMode::Full,
        block_kib: Some(config.block_kib),
        elinks: config.links,
        chunk_min: config.chunk_min,
        chunk_max: config.chunk_max,
        ..FelixConfig::default()
    };
    let mut card = FelixCard::new(felix)?;
    let layout = card.layout();
    let mut blocks = Vec::new();
    for _ in 0..config.l1as {
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    let rob = RobConfig {
        elinks: (0..config.links).collect(),
        max_chunk_bytes: config.chunk_max,
        // Fragments of 60 KB: a ring as configs/swrod-full-mode.toml sizes it.
        ring_slots: 256,
        timeout_fragments: 128,
        ..RobConfig::default()
    };
    rob.validate()?;
    let mut copy = vec![0u8; blocks.len()];
    let (mut aggregate_s, mut memcpy_s) = (Vec::new(), Vec::new());
    let mut last = Pass::default();
    let mut chunk_bytes = 0u64;
    for _ in 0..config.rounds.max(1) {
        let mut decoder = BlockDecoder::with_layout(layout, &rob.elinks);
        let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob.clone(), Allocation::Pool)?;
        let mut complete = 0u64;
        let mut bytes = 0u64;
        let mut out = |f: crate::BuiltFragment| complete += u64::from(f.complete);
        let start = cpu_time::ThreadTime::now();
        decoder.decode_blocks(&blocks, |e, chunk, trailer| {
            bytes += chunk.len() as u64;
            aggregator.add_chunk(e, chunk, trailer, &mut out)
        });
        aggregator.flush(&mut out);
        aggregate_s.push(start.elapsed().as_secs_f64());
        chunk_bytes = bytes;
        last = Pass {
            chunks: decoder.counts.chunks,
            fragments: aggregator.counts.fragments,
            complete,
        };
        let start = cpu_time::ThreadTime::now();
        for (dst, src) in copy
            .chunks_mut(layout.block_size())
            .zip(blocks.chunks(layout.block_size()))
        {
            dst.copy_from_slice(src);
        }
        std::hint::black_box(&mut copy);
        memcpy_s.push(start.elapsed().as_secs_f64());
    }
    let median = |s: &mut Vec<f64>| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    let (seconds, memcpy_seconds) = (median(&mut aggregate_s), median(&mut memcpy_s));
    Ok(ModeResult {
        config: config.clone(),
        block_bytes: blocks.len() as u64,
        chunk_bytes,
        chunks: last.chunks,
        seconds,
        gbytes_per_s: chunk_bytes as f64 / seconds / 1e9,
        memcpy_seconds,
        memcpy_gbytes_per_s: blocks.len() as f64 / memcpy_seconds / 1e9,
        vs_memcpy: memcpy_seconds / seconds,
        l1as_per_s: config.l1as as f64 / seconds,
        fragments: last.fragments,
        complete_fragments: last.complete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_mode_and_phase2_rows_aggregate_every_chunk_into_complete_fragments() {
        for config in [
            ModeBenchConfig::full_mode(50, 1),
            ModeBenchConfig::phase2(300, 1),
        ] {
            let r = mode_run(&config).unwrap();
            assert_eq!(r.chunks, config.l1as as u64 * u64::from(config.links));
            assert_eq!(
                (r.fragments, r.complete_fragments),
                (config.l1as as u64, config.l1as as u64)
            );
            assert!(r.chunk_bytes < r.block_bytes && r.gbytes_per_s > 0.0 && r.vs_memcpy > 0.0);
        }
    }
}
