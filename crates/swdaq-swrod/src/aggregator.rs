//! Aggregation: the chunks of all e-links of a ROB with the same L1 ID become one eformat v5
//! ROB fragment, built in place in a pooled buffer held by a ring slot indexed by L1 ID.
//!
//! A fragment is complete when every live e-link has delivered. Otherwise it is completed
//! after `timeout_fragments` newer fragments have opened (a time-out in L1 accepts, so
//! replays at any speed give the same fragments; [`Aggregator::flush`] completes the rest
//! when data stops) with `MISSING_ELINKS` status words naming the e-links that did not
//! deliver. Each missing e-link is classified once: if it has already delivered a later L1
//! ID its chunk was lost (`missing_chunks`); otherwise it has gone silent (`elinks_silent`,
//! once until it delivers again) and later fragments stop waiting for it.
//!
//! L1 IDs are ATLAS extended L1 IDs (ECR count in the upper 8 bits); an ECR restarts the
//! lower 24 bits, which index the ring, and is counted once (`ecrs`). Fragments open across
//! an ECR complete by the same rules.
//!
//! With a detector's aggregation plugin ([`Aggregator::with_payload_plugin`]) the ROD data is
//! the plugin's payload for the L1 ID's chunks; headers, status words and the missing-e-link
//! bitmask stay swdaq's. When the plugin fails for an L1 ID, the fragment keeps the chunk
//! records with `PLUGIN_FAILED` in its first status word (`plugin_errors`): nothing is lost.

use crate::elinks::{ElinkSet, MAX_ROB_ELINKS};
use crate::payload::PayloadPlugin;
use crate::pool::{Allocation, BufferPool, PooledBuf};
use std::collections::VecDeque;
use swdaq_format::eformat::{
    RodHeader, chunk_record_size, data_offset, encode_rob, put_chunk_record, rob_size, status,
};
use swdaq_format::felix::{MAX_ELINK, SubchunkTrailer};

/// Bytes of a fragment's buffer asked for past its last record (see `add_chunk`). Measured
/// against asking for the whole buffer when the fragment opens, and for one line three ahead:
/// 24 against 18-19 and 21 M chunks per CPU second in `swdaq run` of one card.
const FRAGMENT_PREFETCH_AHEAD: usize = 2 * crate::prefetch::CACHE_LINE;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobConfig {
    pub source_id: u32,
    pub run_number: u32,
    /// The ROB's e-link numbers, in the order of its status bitmask.
    pub elinks: Vec<u16>,
    /// Where the L1 ID (u32) and BCID (u16) sit in a chunk.
    pub l1id_offset: usize,
    pub bcid_offset: usize,
    /// Larger chunks are counted and dropped (fragment buffers are sized for this).
    pub max_chunk_bytes: usize,
    /// Ring slots, a power of two (the modulo index of the ablation uses the same size).
    pub ring_slots: usize,
    /// A fragment not complete when this many newer ones have opened is completed as is.
    pub timeout_fragments: usize,
}

impl Default for RobConfig {
    fn default() -> Self {
        Self {
            source_id: 0x0071_0000,
            run_number: 1,
            elinks: (0..192).collect(),
            l1id_offset: 0,
            bcid_offset: 4,
            max_chunk_bytes: 128,
            ring_slots: 4096,
            timeout_fragments: 1024,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RobConfigError {
    #[error("rob: {0}")]
    Invalid(String),
}

impl RobConfig {
    pub fn validate(&self) -> Result<(), RobConfigError> {
        let bad = |m: String| Err(RobConfigError::Invalid(m));
        if self.elinks.is_empty() || self.elinks.len() > MAX_ROB_ELINKS {
            return bad(format!(
                "{} e-links (1..={MAX_ROB_ELINKS})",
                self.elinks.len()
            ));
        }
        let mut sorted = self.elinks.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return bad("an e-link is listed twice".into());
        }
        if self.max_chunk_bytes < self.header_bytes() || self.max_chunk_bytes > 0xFFFF {
            return bad(format!(
                "max_chunk_bytes = {} must hold the L1 ID and BCID and be at most 65535",
                self.max_chunk_bytes
            ));
        }
        if let Some(e) = self.elinks.iter().find(|&&e| e > MAX_ELINK) {
            return bad(format!("e-link {e} is beyond the 11-bit e-link numbers"));
        }
        if !self.ring_slots.is_power_of_two() {
            return bad(format!(
                "ring_slots = {} must be a power of two",
                self.ring_slots
            ));
        }
        if self.timeout_fragments == 0 || self.ring_slots <= self.timeout_fragments {
            return bad(format!(
                "ring_slots = {} must exceed timeout_fragments = {} (> 0)",
                self.ring_slots, self.timeout_fragments
            ));
        }
        Ok(())
    }

    /// Bytes a chunk must have to carry its L1 ID and BCID.
    fn header_bytes(&self) -> usize {
        (self.l1id_offset + 4).max(self.bcid_offset + 2)
    }

    /// Status words naming missing e-links.
    fn bitmask_words(&self) -> usize {
        self.elinks.len().div_ceil(32)
    }

    /// Bytes of the largest fragment: every e-link with a chunk of the largest size.
    pub fn buffer_size(&self) -> usize {
        rob_size(
            1 + self.bitmask_words(),
            self.elinks.len() * chunk_record_size(self.max_chunk_bytes),
        )
    }
}

/// How an L1 ID picks its ring slot: the paper's `& (size - 1)` or `% size`.
pub trait SlotIndex {
    fn new(slots: usize) -> Self;
    fn slot(&self, l1_id: u32) -> usize;
}

/// Masked index: the ring size must be a power of two.
pub struct PowerOfTwoIndex {
    mask: usize,
}

impl SlotIndex for PowerOfTwoIndex {
    /// `slots` is a power of two ([`RobConfig::validate`]).
    fn new(slots: usize) -> Self {
        Self { mask: slots - 1 }
    }
    #[inline(always)]
    fn slot(&self, l1_id: u32) -> usize {
        (l1_id & 0x00FF_FFFF) as usize & self.mask
    }
}

/// Modulo index (a division per chunk): the ablation.
pub struct ModuloIndex {
    slots: usize,
}

impl SlotIndex for ModuloIndex {
    fn new(slots: usize) -> Self {
        Self { slots }
    }
    #[inline(always)]
    fn slot(&self, l1_id: u32) -> usize {
        (l1_id & 0x00FF_FFFF) as usize % self.slots
    }
}

/// What aggregation saw. Each injected fault of the emulator ends in exactly one of the
/// fault counters (`missing_chunks`, `elinks_silent`, `out_of_order_chunks`,
/// `truncated_chunks`, `ecrs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AggregatorCounts {
    pub chunks: u64,
    pub fragments: u64,
    pub incomplete_fragments: u64,
    pub timed_out_fragments: u64,
    pub missing_chunks: u64,
    pub elinks_silent: u64,
    pub elinks_revived: u64,
    pub late_chunks: u64,
    pub duplicate_chunks: u64,
    pub out_of_order_chunks: u64,
    pub truncated_chunks: u64,
    pub crc_error_chunks: u64,
    pub malformed_chunks: u64,
    pub oversized_chunks: u64,
    pub bcid_mismatches: u64,
    pub ecrs: u64,
    pub ring_collisions: u64,
    pub buffer_allocations: u64,
    /// L1 IDs the aggregation plugin failed for: stored with the chunk records and
    /// `PLUGIN_FAILED` (0 without a plugin).
    #[serde(default)]
    pub plugin_errors: u64,
}

/// A built ROB fragment in its (pooled) buffer.
pub struct BuiltFragment {
    buf: PooledBuf,
    start: usize,
    len: usize,
    pub l1_id: u32,
    pub complete: bool,
}

impl BuiltFragment {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// A fragment another process built, from its bytes as received.
    pub fn received(bytes: Vec<u8>, l1_id: u32, complete: bool) -> Self {
        let len = bytes.len();
        Self {
            buf: PooledBuf::unpooled(bytes),
            start: 0,
            len,
            l1_id,
            complete,
        }
    }
}

struct Slot {
    l1_id: u32,
    open: bool,
    used: bool,
    received: ElinkSet,
    count: usize,
    bcid: u16,
    status: u32,
    data_len: usize,
    buf: Option<PooledBuf>,
}

/// `a` is later than `b` in L1 ID order (extended L1 IDs, wrapping).
#[inline(always)]
pub(crate) fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

pub struct Aggregator<I: SlotIndex> {
    config: RobConfig,
    index: I,
    slots: Vec<Slot>,
    /// (slot, L1 ID, opening number) of fragments in the order they opened.
    open_order: VecDeque<(usize, u32, u64)>,
    opened: u64,
    all: ElinkSet,
    live: ElinkSet,
    live_count: usize,
    silent: ElinkSet,
    last_seen: Vec<Option<u32>>,
    latest: Vec<Option<u32>>,
    epoch: Option<u8>,
    pool: BufferPool,
    /// Where the ROD data starts in a buffer (room for the most status words before it).
    data_at: usize,
    header_bytes: usize,
    /// The detector's payload layout, if one is configured.
    payload_plugin: Option<PayloadPlugin>,
    pub counts: AggregatorCounts,
    /// Problems per e-link (ROB order): chunks lost, duplicate, out of order, truncated or
    /// flagged, BCID mismatches, going silent. Only error paths touch it.
    pub elink_errors: Vec<u64>,
}

impl<I: SlotIndex> Aggregator<I> {
    pub fn new(config: RobConfig, allocation: Allocation) -> Result<Self, RobConfigError> {
        config.validate()?;
        let n = config.elinks.len();
        // Open fragments hold a buffer each (up to `timeout_fragments`), consumers hold more
        // for a while; allocated up front for the open ones.
        let pool = BufferPool::new(
            allocation,
            config.buffer_size(),
            2 * config.ring_slots,
            config.timeout_fragments + 1,
        );
        Ok(Self {
            index: I::new(config.ring_slots),
            slots: (0..config.ring_slots)
                .map(|_| Slot {
                    l1_id: 0,
                    open: false,
                    used: false,
                    received: ElinkSet::default(),
                    count: 0,
                    bcid: 0,
                    status: 0,
                    data_len: 0,
                    buf: None,
                })
                .collect(),
            open_order: VecDeque::with_capacity(config.ring_slots),
            opened: 0,
            all: ElinkSet::first(n),
            live: ElinkSet::first(n),
            live_count: n,
            silent: ElinkSet::default(),
            last_seen: vec![None; n],
            latest: vec![None; n],
            epoch: None,
            pool,
            data_at: data_offset(1 + config.bitmask_words()),
            header_bytes: config.header_bytes(),
            config,
            payload_plugin: None,
            counts: AggregatorCounts::default(),
            elink_errors: vec![0; n],
        })
    }

    pub fn config(&self) -> &RobConfig {
        &self.config
    }

    /// Builds every fragment's ROD data with `plugin` instead of chunk records.
    pub fn with_payload_plugin(mut self, plugin: PayloadPlugin) -> Self {
        self.payload_plugin = Some(plugin);
        self
    }

    /// The aggregation plugin's first error, if it has failed.
    pub fn first_plugin_error(&self) -> Option<&swdaq_plugin::PluginError> {
        self.payload_plugin.as_ref()?.first_error.as_ref()
    }

    /// Adds the chunk of the ROB's e-link `e`; completed fragments go to `out`.
    #[inline]
    pub fn add_chunk(
        &mut self,
        e: usize,
        chunk: &[u8],
        trailer: SubchunkTrailer,
        out: &mut impl FnMut(BuiltFragment),
    ) {
        self.counts.chunks += 1;
        if chunk.len() < self.header_bytes {
            self.counts.malformed_chunks += 1;
            return;
        }
        if chunk.len() > self.config.max_chunk_bytes {
            self.counts.oversized_chunks += 1;
            return;
        }
        let at = self.config.l1id_offset;
        let l1_id = u32::from_le_bytes([chunk[at], chunk[at + 1], chunk[at + 2], chunk[at + 3]]);
        let at = self.config.bcid_offset;
        let bcid = u16::from_le_bytes([chunk[at], chunk[at + 1]]) & 0x0FFF;
        self.track_elink(e, l1_id);

        let s = self.index.slot(l1_id);
        let slot = &self.slots[s];
        if slot.open {
            if slot.l1_id != l1_id {
                if !later(l1_id, slot.l1_id) {
                    self.counts.late_chunks += 1;
                    return;
                }
                self.counts.ring_collisions += 1;
                self.complete(s, true, out);
                self.open(s, l1_id, bcid, out);
            }
        } else if slot.used && !later(l1_id, slot.l1_id) {
            self.counts.late_chunks += 1;
            return;
        } else {
            self.open(s, l1_id, bcid, out);
        }

        let slot = &mut self.slots[s];
        if slot.received.contains(e) {
            self.counts.duplicate_chunks += 1;
            self.elink_errors[e] += 1;
            return;
        }
        if slot.bcid != bcid {
            self.counts.bcid_mismatches += 1;
            self.elink_errors[e] += 1;
            slot.status |= status::BCID_CHECK_FAIL;
        }
        if trailer.truncated {
            self.counts.truncated_chunks += 1;
            self.elink_errors[e] += 1;
            slot.status |= status::DATA_CORRUPTION;
        }
        if trailer.crc_error || trailer.error {
            self.counts.crc_error_chunks += 1;
            self.elink_errors[e] += 1;
            slot.status |= status::DATA_CORRUPTION;
        }
        if let Some(buf) = slot.buf.as_mut() {
            let at = self.data_at + slot.data_len;
            slot.data_len += put_chunk_record(&mut buf[at..], self.config.elinks[e], chunk);
            // The fragment's next record comes with the next e-link's block, after the other
            // L1 IDs of this one: time for the lines it will write to arrive. A buffer back
            // from the consumers is cold (not in this core's cache).
            let next = self.data_at + slot.data_len;
            crate::prefetch::lines(buf.get(next..).unwrap_or_default(), FRAGMENT_PREFETCH_AHEAD);
        }
        slot.received.insert(e);
        slot.count += 1;
        if slot.count >= self.live_count && slot.received.covers(&self.live) {
            self.complete(s, false, out);
        }
    }

    /// Completes every open fragment (end of run, or no data for a while).
    pub fn flush(&mut self, out: &mut impl FnMut(BuiltFragment)) {
        while let Some((s, l1_id, _)) = self.open_order.pop_front() {
            if self.slots[s].open && self.slots[s].l1_id == l1_id {
                self.complete(s, true, out);
            }
        }
    }

    /// Completes every open fragment and forgets the L1 IDs, e-link states and ECR count
    /// seen (a new run: L1 IDs start again); counts and pooled buffers are kept.
    pub fn restart(&mut self, out: &mut impl FnMut(BuiltFragment)) {
        self.flush(out);
        for slot in &mut self.slots {
            slot.used = false;
        }
        self.live = self.all;
        self.live_count = self.config.elinks.len();
        self.silent = ElinkSet::default();
        self.last_seen.fill(None);
        self.latest.fill(None);
        self.epoch = None;
    }

    /// Whether every live e-link has delivered `l1_id` or a later L1 ID: the fragments up to
    /// `l1_id` have had every chunk that is coming (a stop can end here with them complete).
    pub fn has_passed(&self, l1_id: u32) -> bool {
        self.live
            .iter()
            .all(|e| self.latest[e].is_some_and(|l| !later(l1_id, l)))
    }

    /// Fragments open now.
    pub fn open_fragments(&self) -> usize {
        self.slots.iter().filter(|s| s.open).count()
    }

    fn track_elink(&mut self, e: usize, l1_id: u32) {
        if let Some(last) = self.last_seen[e]
            && !later(l1_id, last)
            && l1_id != last
        {
            self.counts.out_of_order_chunks += 1;
            self.elink_errors[e] += 1;
        }
        self.last_seen[e] = Some(l1_id);
        if self.latest[e].is_none_or(|l| later(l1_id, l)) {
            self.latest[e] = Some(l1_id);
        }
        let epoch = (l1_id >> 24) as u8;
        match self.epoch {
            None => self.epoch = Some(epoch),
            Some(current) if epoch == current.wrapping_add(1) => {
                self.counts.ecrs += 1;
                self.epoch = Some(epoch);
            }
            Some(_) => {}
        }
        if self.silent.contains(e) {
            self.silent.remove(e);
            self.live.insert(e);
            self.live_count += 1;
            self.counts.elinks_revived += 1;
        }
    }

    fn open(&mut self, s: usize, l1_id: u32, bcid: u16, out: &mut impl FnMut(BuiltFragment)) {
        let (buf, allocated) = self.pool.take();
        self.counts.buffer_allocations += u64::from(allocated);
        let slot = &mut self.slots[s];
        slot.l1_id = l1_id;
        slot.open = true;
        slot.used = true;
        slot.received = ElinkSet::default();
        slot.count = 0;
        slot.bcid = bcid;
        slot.status = 0;
        slot.data_len = 0;
        slot.buf = Some(buf);
        self.open_order.push_back((s, l1_id, self.opened));
        self.opened += 1;
        self.expire(out);
    }

    /// Completes fragments that `timeout_fragments` newer ones have overtaken.
    fn expire(&mut self, out: &mut impl FnMut(BuiltFragment)) {
        while let Some(&(s, l1_id, n)) = self.open_order.front() {
            if n + self.config.timeout_fragments as u64 >= self.opened {
                break;
            }
            self.open_order.pop_front();
            if self.slots[s].open && self.slots[s].l1_id == l1_id {
                self.complete(s, true, out);
            }
        }
    }

    fn complete(&mut self, s: usize, timed_out: bool, out: &mut impl FnMut(BuiltFragment)) {
        let slot = &mut self.slots[s];
        slot.open = false;
        let l1_id = slot.l1_id;
        let missing = self.all.minus(&slot.received);
        let mut first_status = slot.status;
        let mut status_words = 1;
        if !missing.is_empty() {
            first_status |= status::MISSING_ELINKS | if timed_out { status::TIMEOUT } else { 0 };
            status_words += self.config.bitmask_words();
            self.counts.incomplete_fragments += 1;
            self.counts.timed_out_fragments += u64::from(timed_out);
            for e in missing.iter() {
                if self.silent.contains(e) {
                    continue;
                }
                if self.latest[e].is_some_and(|l| later(l, l1_id)) {
                    self.counts.missing_chunks += 1;
                    self.elink_errors[e] += 1;
                } else {
                    self.silent.insert(e);
                    self.live.remove(e);
                    self.live_count -= 1;
                    self.counts.elinks_silent += 1;
                    self.elink_errors[e] += 1;
                }
            }
        }
        self.counts.fragments += 1;
        let slot = &mut self.slots[s];
        let Some(mut buf) = slot.buf.take() else {
            return;
        };
        let mut words = [0u32; 1 + MAX_ROB_ELINKS / 32];
        words[0] = first_status;
        for (w, m) in words[1..status_words]
            .iter_mut()
            .zip(missing.to_words(status_words - 1))
        {
            *w = m;
        }
        let mut data_len = slot.data_len;
        if let Some(plugin) = self.payload_plugin.as_mut() {
            let records = &buf[self.data_at..self.data_at + slot.data_len];
            match plugin.build(l1_id, records) {
                Some(payload) => {
                    words[0] |= status::DETECTOR_PAYLOAD;
                    data_len = payload.len();
                    let size = rob_size(1 + self.config.bitmask_words(), data_len);
                    if size > buf.len() {
                        // Larger than the built-in layout's largest fragment: a buffer of
                        // its own (the pooled one goes back to the pool).
                        buf = PooledBuf::unpooled(vec![0; size]);
                    }
                    buf[self.data_at..self.data_at + data_len].copy_from_slice(payload);
                }
                None => {
                    words[0] |= status::PLUGIN_FAILED;
                    self.counts.plugin_errors += 1;
                }
            }
        }
        let start = self.data_at - data_offset(status_words);
        let rod = RodHeader {
            source_id: self.config.source_id,
            run_number: self.config.run_number,
            l1_id,
            bc_id: u32::from(slot.bcid),
            l1_trigger_type: u32::from(crate::trigger::L1_TRIGGER_TYPE),
            detector_event_type: 0,
        };
        // Cannot fail: the buffer is sized for every e-link's largest chunk and the most
        // status words, or for the plugin's payload; chunk records and payloads are whole
        // words.
        if let Ok(len) = encode_rob(
            &mut buf[start..],
            self.config.source_id,
            &words[..status_words],
            &rod,
            data_len,
        ) {
            out(BuiltFragment {
                buf,
                start,
                len,
                l1_id,
                complete: missing.is_empty(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::eformat::{ChunkRecords, RobFragment};
    use swdaq_format::felix::SubchunkKind;
    use swdaq_plugin::{Chunk, ErrorKind, PluginError};

    /// A layout for the tests: a 3-byte header (the chunk count, the L1 ID's low bytes), then
    /// the chunks' links and bytes in the order given; fails for L1 IDs that are multiples of `fail_every`, and
    /// adds `padding` bytes of 0xAB at the end.
    struct TestLayout {
        fail_every: u32,
        padding: usize,
    }

    impl swdaq_plugin::Aggregator for TestLayout {
        fn aggregate(
            &mut self,
            l1_id: u32,
            chunks: &[Chunk<'_>],
            payload: &mut Vec<u8>,
        ) -> Result<(), PluginError> {
            payload.clear();
            if l1_id.is_multiple_of(self.fail_every) {
                return Err(PluginError {
                    plugin: "test".into(),
                    kind: ErrorKind::Reported(format!("no calibration for {l1_id}")),
                });
            }
            payload.extend([chunks.len() as u8, l1_id as u8, (l1_id >> 8) as u8]);
            for c in chunks {
                payload.push(c.link as u8);
                payload.extend_from_slice(c.data);
            }
            payload.resize(payload.len() + self.padding, 0xAB);
            Ok(())
        }
    }

    fn chunk(l1_id: u32, elink: u8) -> Vec<u8> {
        let mut c = l1_id.to_le_bytes().to_vec();
        c.extend([7, 0, elink, elink]);
        c
    }

    /// A built fragment's L1 ID, status words and ROD data.
    type Stored = (u32, Vec<u32>, Vec<u8>);

    /// Fragments of L1 IDs 1..=4 from e-links 0..3 delivered in reverse e-link order.
    fn run(layout: TestLayout) -> (Vec<Stored>, AggregatorCounts) {
        let config = RobConfig {
            elinks: vec![0, 1, 2],
            ring_slots: 16,
            timeout_fragments: 4,
            ..Default::default()
        };
        let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(config, Allocation::Pool)
            .unwrap()
            .with_payload_plugin(PayloadPlugin::new(Box::new(layout)));
        let trailer = SubchunkTrailer {
            kind: SubchunkKind::Both,
            length: 8,
            crc_error: false,
            error: false,
            truncated: false,
        };
        let mut fragments = Vec::new();
        for l1_id in 1..=4u32 {
            for e in (0..3).rev() {
                aggregator.add_chunk(e, &chunk(l1_id, e as u8), trailer, &mut |f| {
                    let rob = RobFragment::parse(f.bytes()).unwrap();
                    fragments.push((rob.rod.l1_id, rob.status().collect(), rob.data.to_vec()));
                });
            }
        }
        (fragments, aggregator.counts)
    }

    #[test]
    fn a_plugin_s_payload_is_the_rod_data_with_chunks_in_elink_order_padded_to_words() {
        let (fragments, counts) = run(TestLayout {
            fail_every: u32::MAX,
            padding: 0,
        });
        assert_eq!(fragments.len(), 4);
        for (l1_id, status, data) in fragments {
            let mut want = vec![3, l1_id as u8, 0];
            for e in 0..3u8 {
                want.push(e);
                want.extend(chunk(l1_id, e));
            }
            want.resize(want.len().next_multiple_of(4), 0);
            assert_eq!((status, data), (vec![status::DETECTOR_PAYLOAD], want));
        }
        assert_eq!(counts.plugin_errors, 0);
    }

    #[test]
    fn a_plugin_error_keeps_the_chunk_records_and_flags_the_fragment() {
        let (fragments, counts) = run(TestLayout {
            fail_every: 2,
            padding: 0,
        });
        for (l1_id, status, data) in &fragments {
            let failed = l1_id % 2 == 0;
            assert_eq!(status[0] & status::PLUGIN_FAILED != 0, failed);
            assert_eq!(status[0] & status::DETECTOR_PAYLOAD != 0, !failed);
            if failed {
                let records: Vec<_> = ChunkRecords::new(data).map(Result::unwrap).collect();
                assert_eq!(records.len(), 3);
                for r in records {
                    assert_eq!(r.data, &chunk(*l1_id, r.elink as u8)[..]);
                }
            }
        }
        assert_eq!(counts.plugin_errors, 2);
        assert_eq!(counts.fragments, 4);
    }

    #[test]
    fn a_payload_larger_than_the_pooled_buffer_gets_a_buffer_of_its_own() {
        let padding = RobConfig::default().buffer_size();
        let (fragments, counts) = run(TestLayout {
            fail_every: u32::MAX,
            padding,
        });
        assert_eq!(fragments.len(), 4);
        for (_, status, data) in fragments {
            assert_eq!(status, vec![status::DETECTOR_PAYLOAD]);
            assert_eq!(data.len(), (3 + 3 * 9 + padding).next_multiple_of(4));
        }
        assert_eq!(counts.plugin_errors, 0);
    }

    #[test]
    fn impossible_configs_are_errors() {
        let bad = |c: RobConfig| c.validate().is_err();
        assert!(RobConfig::default().validate().is_ok());
        assert!(bad(RobConfig {
            elinks: vec![],
            ..Default::default()
        }));
        assert!(bad(RobConfig {
            elinks: vec![1, 1],
            ..Default::default()
        }));
        assert!(bad(RobConfig {
            elinks: vec![0x800],
            ..Default::default()
        }));
        assert!(bad(RobConfig {
            ring_slots: 3000,
            ..Default::default()
        }));
        assert!(bad(RobConfig {
            timeout_fragments: 4096,
            ..Default::default()
        }));
        assert!(bad(RobConfig {
            max_chunk_bytes: 5,
            ..Default::default()
        }));
        assert!(
            Aggregator::<PowerOfTwoIndex>::new(
                RobConfig {
                    ring_slots: 3000,
                    ..Default::default()
                },
                Allocation::Heap
            )
            .is_err()
        );
    }
}
