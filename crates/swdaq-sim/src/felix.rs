//! FELIX card emulator: e-links that each send one chunk per L1 accept, packed into to-host
//! blocks as the card writes them to host memory ([`swdaq_format::felix`]), with injected
//! faults recorded as truth. GBT mode (`mode = "gbt"`, the default): 1 KiB blocks with
//! 16-bit trailers, many small e-links. FULL mode (`mode = "full"`): each "e-link" is a whole
//! link, as a FULL-mode card delivers one chunk per link per L1 accept (about 5 KB in the
//! SW ROD paper, 40-280 bytes at Phase-2 rates), in `block_kib` KiB blocks with 32-bit
//! trailers. Faults and truth are the same in both modes.
//!
//! Chunk contents: the extended L1 ID (u32, little-endian; ECR count in the upper 8 bits,
//! L1 accept count in the lower 24) at `l1id_offset`, the BCID (u16, 12 bits used) at
//! `bcid_offset`, the rest a pattern derived from the e-link and L1 ID. E-link `i` of the
//! card has e-link number `i`.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use swdaq_format::felix::{
    BlockLayout, BlockPacker, ChunkFlags, MAX_BLOCK_KIB, MAX_ELINK, TTC_TO_HOST_ELINK, TtcRecord,
};

/// Card `card`'s raw file of blocks in `dir` (`swdaq gen --format felix`).
pub fn card_raw_path(dir: &std::path::Path, card: u16) -> std::path::PathBuf {
    dir.join(format!("card{card}.swraw"))
}

/// Card `card`'s injected faults (CSV) in `dir`, beside its raw file or its server's output.
pub fn card_truth_path(dir: &std::path::Path, card: u16) -> std::path::PathBuf {
    dir.join(format!("card{card}_faults.csv"))
}

/// L1 accept rate of the emulated cards' e-links (the SW ROD paper's 100 kHz).
pub const L1_RATE_HZ: f64 = 100e3;

/// The L1 trigger type of every emulated L1 accept (8 bits in TTC records, event and ROD
/// headers).
pub const L1_TRIGGER_TYPE: u8 = 0x81;

/// Bunch crossings per LHC orbit: BCIDs count modulo this.
pub const BUNCHES_PER_ORBIT: u32 = 3564;

/// The FULL-mode block size when the configuration names none (swdaq's choice: the FELIX
/// sources read give the block size as a firmware register, not a value).
pub const FULL_MODE_BLOCK_KIB: u16 = 4;

/// Which to-host layout the card writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FelixMode {
    /// 1 KiB blocks, 16-bit trailers: GBT e-links.
    #[default]
    Gbt,
    /// Larger blocks, 32-bit trailers: one chunk per link per L1 accept.
    Full,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FelixConfig {
    /// GBT mode or FULL mode.
    pub mode: FelixMode,
    /// FULL mode: the block size in KiB (1 to 64; [`FULL_MODE_BLOCK_KIB`] when absent).
    /// GBT blocks are 1 KiB, always.
    pub block_kib: Option<u16>,
    /// E-links (FULL mode: links), numbered 0, 1, ...
    pub elinks: u16,
    /// Chunk sizes are uniform in `[chunk_min, chunk_max]` bytes.
    pub chunk_min: usize,
    pub chunk_max: usize,
    /// Where the L1 ID (4 bytes) and BCID (2 bytes) sit in a chunk.
    pub l1id_offset: usize,
    pub bcid_offset: usize,
    /// An ECR resets the L1 accept count every this many L1 accepts (0: never).
    pub ecr_every: u32,
    pub seed: u64,
    /// Also send each L1 accept's TTC information on the TTC-to-host e-link
    /// ([`TTC_TO_HOST_ELINK`]): how a SW ROD fed from the card's files or over the network
    /// learns the L1 accepts.
    pub ttc_to_host: bool,
    pub faults: FelixFaults,
}

impl Default for FelixConfig {
    fn default() -> Self {
        Self {
            mode: FelixMode::Gbt,
            block_kib: None,
            elinks: 192,
            chunk_min: 40,
            chunk_max: 40,
            l1id_offset: 0,
            bcid_offset: 4,
            ecr_every: 0,
            seed: 1,
            ttc_to_host: false,
            faults: FelixFaults::default(),
        }
    }
}

impl FelixConfig {
    /// The block layout of this card's mode.
    pub fn layout(&self) -> Result<BlockLayout, FelixConfigError> {
        match (self.mode, self.block_kib) {
            (FelixMode::Gbt, None | Some(1)) => Ok(BlockLayout::GBT),
            (FelixMode::Gbt, Some(kib)) => Err(FelixConfigError::Invalid(format!(
                "block_kib = {kib}: GBT-mode blocks are 1 KiB (block_kib is for mode = \"full\")"
            ))),
            (FelixMode::Full, kib) => {
                let kib = kib.unwrap_or(FULL_MODE_BLOCK_KIB);
                BlockLayout::full(kib).map_err(|_| {
                    FelixConfigError::Invalid(format!(
                        "block_kib = {kib}: FULL-mode blocks are 1 to {MAX_BLOCK_KIB} KiB"
                    ))
                })
            }
        }
    }

    /// The mode in words for a run's description: "GBT mode (1 KiB blocks)" or "FULL mode
    /// (4 KiB blocks)"; an invalid combination is named as configured.
    pub fn mode_words(&self) -> String {
        let mode = match self.mode {
            FelixMode::Gbt => "GBT mode",
            FelixMode::Full => "FULL mode",
        };
        match self.layout() {
            Ok(layout) => format!("{mode} ({} KiB blocks)", layout.block_size() / 1024),
            Err(_) => format!("{mode} (block_kib = {:?})", self.block_kib),
        }
    }
}

/// The extended L1 ID of the run's L1 accept number `index` (from 0) with an ECR every
/// `ecr_every` L1 accepts (0: never): the ECR count in the upper 8 bits, the L1 accepts since
/// the last ECR in the lower 24. Whoever follows the same L1A sequence (every card, the
/// trigger's stand-in in another process) computes the same L1 IDs from it.
pub fn l1_id_of(index: u64, ecr_every: u32) -> u32 {
    let (ecrs, count) = match u64::from(ecr_every) {
        0 => (0, index),
        every => (index / every, index % every),
    };
    ((ecrs & 0xFF) as u32) << 24 | (count & 0x00FF_FFFF) as u32
}

/// The bunch crossing of the run's L1 accept number `index` (from 0), the same for every
/// card and for the trigger's stand-in in another process.
pub fn bcid_of(index: u64) -> u16 {
    ((index * 37) % u64::from(BUNCHES_PER_ORBIT)) as u16
}

/// Fault probabilities (per chunk or per block) and scheduled dead e-links.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FelixFaults {
    /// A chunk is never sent.
    pub missing_chunk: f64,
    /// A chunk arrives cut to half its size with the truncation flag set.
    pub truncated_chunk: f64,
    /// After a chunk, the card closes the block and the next block's sequence number skips one.
    pub sequence_gap: f64,
    /// A chunk is sent after the e-link's next chunk.
    pub l1id_out_of_order: f64,
    /// E-links that stop sending for good.
    pub dead_elinks: Vec<DeadElink>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadElink {
    pub elink: u16,
    /// The number of L1 accepts it still sends before it goes silent.
    pub after_l1as: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FelixFaultKind {
    MissingChunk,
    TruncatedChunk,
    SequenceGap,
    L1idOutOfOrder,
    Ecr,
    DeadElink,
}

/// One injected fault (ECRs are listed too: they are what the SW ROD must handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FelixFault {
    pub kind: FelixFaultKind,
    pub elink: u16,
    /// The extended L1 ID of the L1 accept it happened at.
    pub l1_id: u32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FelixConfigError {
    #[error("felix: {0}")]
    Invalid(String),
}

struct Elink {
    number: u16,
    packer: BlockPacker,
    /// A chunk held back to be sent after the next one (out-of-order fault).
    held: Option<(Vec<u8>, ChunkFlags)>,
    dead_after: Option<u64>,
}

/// One emulated card. Call [`FelixCard::l1_accept`] per L1 accept; blocks are appended to
/// the caller's buffer in the order the card completes them, as DMA lands them.
pub struct FelixCard {
    config: FelixConfig,
    elinks: Vec<Elink>,
    rng: Xoshiro256PlusPlus,
    l1as: u64,
    chunk: Vec<u8>,
    faults: Vec<FelixFault>,
    /// The TTC-to-host e-link's packer, when it is on.
    ttc: Option<BlockPacker>,
    layout: BlockLayout,
}

impl FelixCard {
    pub fn new(config: FelixConfig) -> Result<Self, FelixConfigError> {
        let invalid = |m: String| Err(FelixConfigError::Invalid(m));
        let layout = config.layout()?;
        if config.elinks == 0 || config.elinks > MAX_ELINK + 1 {
            return invalid(format!("elinks = {} (1..=2048)", config.elinks));
        }
        let need = (config.l1id_offset + 4).max(config.bcid_offset + 2);
        if config.chunk_min < need || config.chunk_max < config.chunk_min {
            return invalid(format!(
                "chunk sizes {}..={} must hold the L1 ID and BCID ({need} bytes) and be ordered",
                config.chunk_min, config.chunk_max
            ));
        }
        let f = &config.faults;
        for (key, p) in [
            ("missing_chunk", f.missing_chunk),
            ("truncated_chunk", f.truncated_chunk),
            ("sequence_gap", f.sequence_gap),
            ("l1id_out_of_order", f.l1id_out_of_order),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return invalid(format!(
                    "faults.{key} = {p}: a per-chunk probability, 0 to 1"
                ));
            }
        }
        if config.chunk_max > u16::MAX as usize {
            return invalid(format!("chunk_max = {} (at most 65535)", config.chunk_max));
        }
        if config.ttc_to_host && config.elinks > TTC_TO_HOST_ELINK {
            return invalid(format!(
                "elinks = {} with ttc_to_host: e-link {TTC_TO_HOST_ELINK} is the TTC-to-host e-link (at most {TTC_TO_HOST_ELINK} data e-links)",
                config.elinks
            ));
        }
        let elinks = (0..config.elinks)
            .map(|e| Elink {
                number: e,
                packer: BlockPacker::with_layout(layout, e, 0),
                held: None,
                dead_after: config
                    .faults
                    .dead_elinks
                    .iter()
                    .find(|d| d.elink == e)
                    .map(|d| d.after_l1as),
            })
            .collect();
        Ok(Self {
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            elinks,
            l1as: 0,
            chunk: Vec::with_capacity(config.chunk_max),
            faults: Vec::new(),
            ttc: config
                .ttc_to_host
                .then(|| BlockPacker::with_layout(layout, TTC_TO_HOST_ELINK, 0)),
            layout,
            config,
        })
    }

    pub fn config(&self) -> &FelixConfig {
        &self.config
    }

    /// The layout of the blocks this card writes.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// The extended L1 ID the next L1 accept will carry.
    pub fn next_l1_id(&self) -> u32 {
        l1_id_of(self.l1as, self.config.ecr_every)
    }

    /// The bunch crossing of the next L1 accept.
    pub fn next_bcid(&self) -> u16 {
        bcid_of(self.l1as)
    }

    /// The number of L1 accepts sent so far (the next one's index in the run).
    pub fn l1as(&self) -> u64 {
        self.l1as
    }

    pub fn ecr_every(&self) -> u32 {
        self.config.ecr_every
    }

    /// Replaces the fault probabilities from now on (dead e-links stay as configured).
    pub fn set_fault_rates(&mut self, faults: FelixFaults) {
        self.config.faults = FelixFaults {
            dead_elinks: std::mem::take(&mut self.config.faults.dead_elinks),
            ..faults
        };
    }

    /// Every fault injected so far.
    pub fn faults(&self) -> &[FelixFault] {
        &self.faults
    }

    /// Emits one L1 accept on every e-link (and its TTC-to-host record, if on); completed
    /// blocks go to `out`.
    pub fn l1_accept(&mut self, out: &mut impl BlockSink) {
        let l1_id = self.next_l1_id();
        let bcid = self.next_bcid();
        let rates = FaultRates::of(&self.config.faults);
        let fixed_size =
            (self.config.chunk_min == self.config.chunk_max).then_some(self.config.chunk_min);
        for e in 0..self.elinks.len() {
            let elink = e as u16;
            let link = &mut self.elinks[e];
            match link.dead_after {
                Some(after) if self.l1as >= after => {
                    if self.l1as == after {
                        self.faults
                            .push(fault(FelixFaultKind::DeadElink, elink, l1_id));
                        // The card's block time-out sends what the e-link delivered.
                        if let Some((chunk, flags)) = link.held.take() {
                            link.packer.push(&chunk, flags, |b| out.block(elink, b));
                        }
                        link.packer.flush(|b| out.block(elink, b));
                    }
                    continue;
                }
                _ => {}
            }
            if chance(&mut self.rng, rates.missing_chunk) {
                self.faults
                    .push(fault(FelixFaultKind::MissingChunk, elink, l1_id));
                release_held(
                    link,
                    &mut self.rng,
                    rates.sequence_gap,
                    &mut self.faults,
                    l1_id,
                    out,
                );
                continue;
            }
            let size = match fixed_size {
                Some(size) => size,
                None => self
                    .rng
                    .random_range(self.config.chunk_min..=self.config.chunk_max),
            };
            if rates.truncated_chunk == 0.0 && rates.l1id_out_of_order == 0.0 {
                // No fault can change the chunk: written once, where it lands in the block.
                let config = &self.config;
                link.packer.push_in_place(
                    size,
                    ChunkFlags::default(),
                    |chunk| fill_chunk(chunk, config, l1_id, bcid, elink),
                    &mut self.chunk,
                    |b| out.block(elink, b),
                );
                gap_after_chunk(
                    link,
                    &mut self.rng,
                    rates.sequence_gap,
                    &mut self.faults,
                    l1_id,
                    out,
                );
            } else {
                // Sized only when the size changes: no memset per chunk.
                self.chunk.resize(size, 0);
                fill_chunk(&mut self.chunk, &self.config, l1_id, bcid, elink);
                let mut flags = ChunkFlags::default();
                if chance(&mut self.rng, rates.truncated_chunk) {
                    self.faults
                        .push(fault(FelixFaultKind::TruncatedChunk, elink, l1_id));
                    let keep = (size / 2)
                        .max((self.config.l1id_offset + 4).max(self.config.bcid_offset + 2));
                    self.chunk.truncate(keep);
                    flags.truncated = true;
                }
                if link.held.is_none() && chance(&mut self.rng, rates.l1id_out_of_order) {
                    self.faults
                        .push(fault(FelixFaultKind::L1idOutOfOrder, elink, l1_id));
                    link.held = Some((self.chunk.clone(), flags));
                    continue;
                }
                push(
                    link,
                    &self.chunk,
                    flags,
                    &mut self.rng,
                    rates.sequence_gap,
                    &mut self.faults,
                    l1_id,
                    out,
                );
            }
            release_held(
                link,
                &mut self.rng,
                rates.sequence_gap,
                &mut self.faults,
                l1_id,
                out,
            );
        }
        if let Some(ttc) = &mut self.ttc {
            let record = TtcRecord {
                l1_id,
                bcid,
                trigger_type: L1_TRIGGER_TYPE,
            };
            ttc.push(&record.encode(), ChunkFlags::default(), |b| {
                out.block(TTC_TO_HOST_ELINK, b)
            });
        }
        self.l1as += 1;
        if self.config.ecr_every > 0 && self.l1as.is_multiple_of(u64::from(self.config.ecr_every)) {
            self.faults
                .push(fault(FelixFaultKind::Ecr, 0, self.next_l1_id()));
        }
    }

    /// Sends held chunks and closes every e-link's partly filled block (end of run).
    pub fn flush(&mut self, out: &mut impl BlockSink) {
        for link in &mut self.elinks {
            let elink = link.number;
            if let Some((chunk, flags)) = link.held.take() {
                link.packer.push(&chunk, flags, |b| out.block(elink, b));
            }
            link.packer.flush(|b| out.block(elink, b));
        }
        if let Some(ttc) = &mut self.ttc {
            ttc.flush(|b| out.block(TTC_TO_HOST_ELINK, b));
        }
    }
}

/// Where a card's blocks go as it completes them: appended to one buffer (a `Vec<u8>`, as
/// DMA lands them), or routed by e-link.
pub trait BlockSink {
    fn block(&mut self, elink: u16, block: &[u8]);
}

impl BlockSink for Vec<u8> {
    #[inline]
    fn block(&mut self, _elink: u16, block: &[u8]) {
        self.extend_from_slice(block);
    }
}

/// The fault probabilities of one L1 accept (the configuration's, copied once per L1 accept).
#[derive(Clone, Copy)]
struct FaultRates {
    missing_chunk: f64,
    truncated_chunk: f64,
    sequence_gap: f64,
    l1id_out_of_order: f64,
}

impl FaultRates {
    fn of(f: &FelixFaults) -> Self {
        Self {
            missing_chunk: f.missing_chunk,
            truncated_chunk: f.truncated_chunk,
            sequence_gap: f.sequence_gap,
            l1id_out_of_order: f.l1id_out_of_order,
        }
    }
}

/// A Bernoulli draw that draws nothing for a fault that is off (most runs have none on: a
/// draw per chunk and fault kind was a third of the emulator's time).
#[inline(always)]
fn chance(rng: &mut Xoshiro256PlusPlus, p: f64) -> bool {
    p > 0.0 && rng.random_bool(p)
}

impl crate::truth::CsvRecord for FelixFault {
    const COLUMNS: &'static [&'static str] = &["kind", "elink", "l1_id"];
}

fn fault(kind: FelixFaultKind, elink: u16, l1_id: u32) -> FelixFault {
    FelixFault { kind, elink, l1_id }
}

/// The chunk's bytes: byte `i` is byte `i % 4` of a seed from the L1 ID and e-link, xor `i`;
/// then the L1 ID and BCID at their offsets. Written eight bytes at a time from a table of
/// `i as u8`, in place: byte by byte into a growing vector it was half the emulator's time,
/// which is a core at 100 kHz.
fn fill_chunk(chunk: &mut [u8], c: &FelixConfig, l1_id: u32, bcid: u16, elink: u16) {
    let seed = l1_id.wrapping_mul(0x9E37_79B9) ^ u32::from(elink);
    let seed8 = u64::from(seed) | u64::from(seed) << 32;
    let start = chunk.len() / 8 * 8;
    let mut words = chunk.chunks_exact_mut(8);
    for (w, word) in (&mut words).enumerate() {
        // 8 divides 256: a word never straddles the table's wrap.
        let at = (w * 8) % 256;
        let counts = u64::from_le_bytes(BYTE_COUNTS[at..at + 8].try_into().expect("8 bytes"));
        word.copy_from_slice(&(counts ^ seed8).to_le_bytes());
    }
    let seed = seed.to_le_bytes();
    for (k, b) in words.into_remainder().iter_mut().enumerate() {
        let i = start + k;
        *b = seed[i % 4] ^ i as u8;
    }
    chunk[c.l1id_offset..c.l1id_offset + 4].copy_from_slice(&l1_id.to_le_bytes());
    chunk[c.bcid_offset..c.bcid_offset + 2].copy_from_slice(&bcid.to_le_bytes());
}

/// Byte `i` is `i`: the counting part of every chunk's pattern.
const BYTE_COUNTS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = i as u8;
        i += 1;
    }
    table
};

#[allow(clippy::too_many_arguments)]
fn push(
    link: &mut Elink,
    chunk: &[u8],
    flags: ChunkFlags,
    rng: &mut Xoshiro256PlusPlus,
    gap_rate: f64,
    faults: &mut Vec<FelixFault>,
    l1_id: u32,
    out: &mut impl BlockSink,
) {
    let elink = link.number;
    link.packer.push(chunk, flags, |b| out.block(elink, b));
    gap_after_chunk(link, rng, gap_rate, faults, l1_id, out);
}

/// Injects a sequence gap after the chunk just pushed, by chance. The gap goes where a block
/// ends at a chunk boundary (the card closes the block as on a time-out): a gap inside a
/// chunk would also break that chunk, a second fault.
// Inlined: it runs after every chunk, and with no gap fault on it is one comparison (a call
// per chunk was 3% of the emulator's time).
#[inline(always)]
fn gap_after_chunk(
    link: &mut Elink,
    rng: &mut Xoshiro256PlusPlus,
    gap_rate: f64,
    faults: &mut Vec<FelixFault>,
    l1_id: u32,
    out: &mut impl BlockSink,
) {
    if chance(rng, gap_rate) {
        end_block_with_gap(link, faults, l1_id, out);
    }
}

#[cold]
fn end_block_with_gap(
    link: &mut Elink,
    faults: &mut Vec<FelixFault>,
    l1_id: u32,
    out: &mut impl BlockSink,
) {
    let elink = link.number;
    link.packer.flush(|b| out.block(elink, b));
    link.packer.skip_sequence(1);
    faults.push(fault(FelixFaultKind::SequenceGap, elink, l1_id));
}

fn release_held(
    link: &mut Elink,
    rng: &mut Xoshiro256PlusPlus,
    gap_rate: f64,
    faults: &mut Vec<FelixFault>,
    l1_id: u32,
    out: &mut impl BlockSink,
) {
    if let Some((chunk, flags)) = link.held.take() {
        push(link, &chunk, flags, rng, gap_rate, faults, l1_id, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::felix::{Block, SubchunkIndex, SubchunkKind};

    /// The blocks `card` sends for `l1as` L1 accepts, flushed.
    fn blocks_of(card: &mut FelixCard, l1as: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..l1as {
            card.l1_accept(&mut out);
        }
        card.flush(&mut out);
        out
    }

    /// (e-link, L1 ID) of every whole chunk in `blocks`, in arrival order.
    fn chunks(blocks: &[u8]) -> Vec<(u16, u32)> {
        chunks_as(BlockLayout::GBT, blocks)
    }

    fn chunks_as(layout: BlockLayout, blocks: &[u8]) -> Vec<(u16, u32)> {
        let mut index = SubchunkIndex::default();
        let mut partial: std::collections::HashMap<u16, Vec<u8>> = Default::default();
        let mut out = Vec::new();
        for b in blocks.chunks(layout.block_size()) {
            let block = Block::parse_as(layout, b).unwrap();
            block.index(&mut index).unwrap();
            let e = block.header.elink;
            for s in block.subchunks(&index) {
                let whole = match s.trailer.kind {
                    SubchunkKind::Both => Some(s.data.to_vec()),
                    SubchunkKind::First | SubchunkKind::Middle => {
                        partial.entry(e).or_default().extend_from_slice(s.data);
                        None
                    }
                    SubchunkKind::Last => {
                        let mut c = partial.remove(&e).unwrap();
                        c.extend_from_slice(s.data);
                        Some(c)
                    }
                    _ => None,
                };
                if let Some(c) = whole {
                    out.push((e, u32::from_le_bytes(c[0..4].try_into().unwrap())));
                }
            }
        }
        out
    }

    #[test]
    fn every_elink_sends_one_chunk_per_l1a_in_order() {
        let mut card = FelixCard::new(FelixConfig {
            elinks: 8,
            chunk_min: 20,
            chunk_max: 300,
            ecr_every: 50,
            ..FelixConfig::default()
        })
        .unwrap();
        let out = blocks_of(&mut card, 120);
        let got = chunks(&out);
        assert_eq!(got.len(), 8 * 120);
        for e in 0..8 {
            let ids: Vec<u32> = got.iter().filter(|c| c.0 == e).map(|c| c.1).collect();
            let want: Vec<u32> = (0..120u32).map(|i| (i / 50) << 24 | (i % 50)).collect();
            assert_eq!(ids, want);
        }
        let ecrs = card
            .faults()
            .iter()
            .filter(|f| f.kind == FelixFaultKind::Ecr)
            .count();
        assert_eq!(ecrs, 2);
    }

    #[test]
    fn full_mode_sends_one_5_kb_chunk_per_link_per_l1a_in_4_kib_blocks() {
        let mut card = FelixCard::new(FelixConfig {
            mode: FelixMode::Full,
            elinks: 12,
            chunk_min: 4800,
            chunk_max: 5200,
            ecr_every: 40,
            ttc_to_host: true,
            ..FelixConfig::default()
        })
        .unwrap();
        let layout = card.layout();
        assert_eq!((layout.block_size(), layout.trailer_size()), (4096, 4));
        let out = blocks_of(&mut card, 100);
        assert_eq!(out.len() % 4096, 0);
        let got = chunks_as(layout, &out);
        assert_eq!(got.len(), 13 * 100, "12 links and the TTC-to-host e-link");
        for e in 0..12 {
            let ids: Vec<u32> = got.iter().filter(|c| c.0 == e).map(|c| c.1).collect();
            let want: Vec<u32> = (0..100u32).map(|i| (i / 40) << 24 | (i % 40)).collect();
            assert_eq!(ids, want);
        }
        // Faults work as in GBT mode.
        let mut faulty = FelixCard::new(FelixConfig {
            mode: FelixMode::Full,
            block_kib: Some(8),
            elinks: 4,
            chunk_min: 40,
            chunk_max: 280,
            faults: FelixFaults {
                missing_chunk: 0.02,
                truncated_chunk: 0.02,
                sequence_gap: 0.01,
                l1id_out_of_order: 0.02,
                dead_elinks: vec![],
            },
            ..FelixConfig::default()
        })
        .unwrap();
        let out = blocks_of(&mut faulty, 2000);
        let missing = faulty
            .faults()
            .iter()
            .filter(|f| f.kind == FelixFaultKind::MissingChunk)
            .count();
        assert!(missing > 0 && faulty.faults().len() > missing);
        assert_eq!(chunks_as(faulty.layout(), &out).len(), 4 * 2000 - missing);
    }

    #[test]
    fn block_sizes_belong_to_their_mode() {
        let card = |mode, block_kib| {
            FelixCard::new(FelixConfig {
                mode,
                block_kib,
                ..FelixConfig::default()
            })
        };
        assert!(card(FelixMode::Gbt, Some(4)).is_err());
        assert!(card(FelixMode::Full, Some(0)).is_err());
        assert!(card(FelixMode::Full, Some(65)).is_err());
        assert_eq!(
            card(FelixMode::Full, Some(64))
                .unwrap()
                .layout()
                .block_size(),
            65536
        );
        assert_eq!(
            card(FelixMode::Gbt, Some(1)).unwrap().layout(),
            BlockLayout::GBT
        );
    }

    #[test]
    fn l1_ids_follow_the_l1a_count_across_ecrs_and_wraps() {
        assert_eq!(l1_id_of(0, 0), 0);
        assert_eq!(l1_id_of((1 << 24) + 5, 0), 5, "the 24-bit count wraps");
        assert_eq!(l1_id_of(49, 50), 49);
        assert_eq!(l1_id_of(50, 50), 1 << 24);
        assert_eq!(l1_id_of(256 * 50 + 3, 50), 3, "the 8-bit ECR count wraps");
        let mut card = FelixCard::new(FelixConfig {
            elinks: 1,
            ecr_every: 7,
            ..FelixConfig::default()
        })
        .unwrap();
        let mut blocks = Vec::new();
        for i in 0..100 {
            assert_eq!(card.next_l1_id(), l1_id_of(i, 7));
            card.l1_accept(&mut blocks);
        }
    }

    #[test]
    fn faults_are_recorded_and_visible_in_the_data() {
        let mut card = FelixCard::new(FelixConfig {
            elinks: 16,
            faults: FelixFaults {
                missing_chunk: 0.01,
                truncated_chunk: 0.01,
                sequence_gap: 0.002,
                l1id_out_of_order: 0.01,
                dead_elinks: vec![DeadElink {
                    elink: 3,
                    after_l1as: 100,
                }],
            },
            ..FelixConfig::default()
        })
        .unwrap();
        let out = blocks_of(&mut card, 1000);
        let count = |k| card.faults().iter().filter(|f| f.kind == k).count();
        let missing = count(FelixFaultKind::MissingChunk);
        assert!(missing > 0 && count(FelixFaultKind::TruncatedChunk) > 0);
        assert!(
            count(FelixFaultKind::SequenceGap) > 0 && count(FelixFaultKind::L1idOutOfOrder) > 0
        );
        assert_eq!(count(FelixFaultKind::DeadElink), 1);
        let got = chunks(&out);
        assert_eq!(got.len(), 16 * 1000 - missing - 900);
        let missing_on_3 = card
            .faults()
            .iter()
            .filter(|f| f.kind == FelixFaultKind::MissingChunk && f.elink == 3)
            .count();
        assert_eq!(got.iter().filter(|c| c.0 == 3).count(), 100 - missing_on_3);
    }

    #[test]
    fn chunk_bytes_follow_their_definition_at_every_size() {
        let config = FelixConfig {
            l1id_offset: 8,
            bcid_offset: 2,
            ..FelixConfig::default()
        };
        let mut chunk = Vec::new();
        for size in [12, 13, 39, 40, 41, 255, 256, 257, 600, 1031] {
            for (l1_id, elink) in [(0, 0), (0x0512_3456, 191), (u32::MAX, 2047)] {
                chunk.resize(size, 0);
                fill_chunk(&mut chunk, &config, l1_id, 0x0ABC, elink);
                let seed = (l1_id.wrapping_mul(0x9E37_79B9) ^ u32::from(elink)).to_le_bytes();
                let mut want: Vec<u8> = (0..size).map(|i| seed[i % 4] ^ i as u8).collect();
                want[8..12].copy_from_slice(&l1_id.to_le_bytes());
                want[2..4].copy_from_slice(&0x0ABCu16.to_le_bytes());
                assert_eq!(chunk, want, "size {size}, L1 ID {l1_id:#x}, e-link {elink}");
            }
        }
    }

    #[test]
    fn chunks_written_in_place_are_the_bytes_the_fault_path_writes() {
        for size in [40, 100, 333] {
            let config = FelixConfig {
                elinks: 5,
                chunk_min: size,
                chunk_max: size,
                ecr_every: 70,
                ..FelixConfig::default()
            };
            let mut in_place = FelixCard::new(config.clone()).unwrap();
            // A fault that is on but never drawn: every chunk takes the general path.
            let mut general = FelixCard::new(FelixConfig {
                faults: FelixFaults {
                    truncated_chunk: f64::MIN_POSITIVE,
                    ..FelixFaults::default()
                },
                ..config
            })
            .unwrap();
            assert_eq!(blocks_of(&mut in_place, 300), blocks_of(&mut general, 300));
            assert!(
                general
                    .faults()
                    .iter()
                    .all(|f| f.kind == FelixFaultKind::Ecr)
            );
        }
    }

    #[test]
    fn impossible_configs_are_errors() {
        let bad = |c: FelixConfig| FelixCard::new(c).is_err();
        assert!(bad(FelixConfig {
            elinks: 0,
            ..Default::default()
        }));
        assert!(bad(FelixConfig {
            chunk_min: 3,
            ..Default::default()
        }));
        assert!(bad(FelixConfig {
            chunk_max: 39,
            ..Default::default()
        }));
    }
}
