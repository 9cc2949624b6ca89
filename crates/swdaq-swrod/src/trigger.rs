//! What the emulated level-1 trigger tells the HLT of each L1 accept, as ATLAS's central
//! trigger does through its own ROB: the L1 ID, BCID, trigger type and time, the event's
//! global id and its luminosity block, and the L1 trigger info words an event header carries;
//! and how a SW ROD fed from files or a FELIX server reads them off a card's TTC-to-host
//! e-link ([`TtcDecoder`]).

use crate::decoder::BlockDecoder;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use swdaq_format::felix::{TTC_TO_HOST_ELINK, TtcRecord};
use swdaq_sim::felix::{FelixCard, bcid_of, l1_id_of};

pub use swdaq_sim::felix::L1_TRIGGER_TYPE;

/// Words in each of the three L1 trigger info blocks (TBP, TAP, TAV: the trigger items
/// before prescale, after prescale and after veto), one bit per item: 512 items.
pub const L1_ITEM_WORDS: usize = 16;

/// The emulated L1's one trigger item (random, on every filled bunch).
pub const L1_ITEM: usize = 0;

/// One L1 accept as the HLT gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct L1Accept {
    /// Extended L1 ID: ECR count in the upper 8 bits, L1 accept count in the lower 24.
    pub l1_id: u32,
    /// The accept's number in the run, from 1: unique, unlike the L1 ID, which ECRs reset.
    pub global_id: u64,
    pub bc_id: u16,
    pub trigger_type: u8,
    pub lumi_block: u32,
    /// When it was given (Unix time).
    pub time_seconds: u32,
    pub time_nanoseconds: u32,
}

impl L1Accept {
    /// The card's next L1 accept, the run's `index`-th (from 0), the run having begun at
    /// `start`.
    pub fn next(card: &FelixCard, index: u64, lumi: LumiBlockLength, start: Instant) -> Self {
        Self::of(
            TtcRecord {
                l1_id: card.next_l1_id(),
                bcid: card.next_bcid(),
                trigger_type: L1_TRIGGER_TYPE,
            },
            index,
            lumi,
            start,
        )
    }

    /// The run's `index`-th L1 accept (from 0) with an ECR every `ecr_every` L1 accepts, as
    /// every card numbers it: what the trigger tells the HLT in another process than the
    /// cards'.
    pub fn counted(index: u64, ecr_every: u32, lumi: LumiBlockLength, start: Instant) -> Self {
        Self::of(
            TtcRecord {
                l1_id: l1_id_of(index, ecr_every),
                bcid: bcid_of(index),
                trigger_type: L1_TRIGGER_TYPE,
            },
            index,
            lumi,
            start,
        )
    }

    /// The L1 accept a TTC-to-host record tells of, the run's `index`-th (from 0), stamped
    /// now; the run having begun at `start`.
    pub fn of(ttc: TtcRecord, index: u64, lumi: LumiBlockLength, start: Instant) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            l1_id: ttc.l1_id,
            global_id: index + 1,
            bc_id: ttc.bcid,
            trigger_type: ttc.trigger_type,
            lumi_block: lumi.block_of(index, start.elapsed()),
            time_seconds: now.as_secs() as u32,
            time_nanoseconds: now.subsec_nanos(),
        }
    }

    /// The L1 trigger info words of the event header: TBP, TAP and TAV, each with the
    /// emulated item's bit set (nothing prescales or vetoes it).
    pub fn trigger_info(&self) -> Vec<u32> {
        let mut words = vec![0u32; 3 * L1_ITEM_WORDS];
        for block in 0..3 {
            words[block * L1_ITEM_WORDS + L1_ITEM / 32] |= 1 << (L1_ITEM % 32);
        }
        words
    }
}

/// Reads a card's TTC-to-host e-link: its blocks in, one [`TtcRecord`] per L1 accept out.
pub struct TtcDecoder {
    decoder: BlockDecoder,
    /// Chunks that are not TTC records (counted, skipped).
    pub malformed: u64,
    /// Records read.
    pub records: u64,
}

impl Default for TtcDecoder {
    fn default() -> Self {
        Self::with_layout(swdaq_format::felix::BlockLayout::GBT)
    }
}

impl TtcDecoder {
    /// A decoder of a card whose blocks have `layout` (the TTC-to-host e-link's blocks are
    /// the card's, GBT or FULL mode).
    pub fn with_layout(layout: swdaq_format::felix::BlockLayout) -> Self {
        Self {
            decoder: BlockDecoder::with_layout(layout, &[TTC_TO_HOST_ELINK]),
            malformed: 0,
            records: 0,
        }
    }

    /// Decodes whole blocks of the TTC-to-host e-link (blocks of other e-links are counted
    /// foreign by the block decoder and skipped); each record goes to `out`.
    pub fn decode(&mut self, blocks: &[u8], mut out: impl FnMut(TtcRecord)) {
        let (malformed, records) = (&mut self.malformed, &mut self.records);
        self.decoder
            .decode_blocks(blocks, |_, chunk, _| match TtcRecord::decode(chunk) {
                Ok(r) => {
                    *records += 1;
                    out(r);
                }
                Err(_) => *malformed += 1,
            });
    }

    /// Blocks lost or broken on the TTC-to-host e-link (sequence gaps, corrupt blocks,
    /// broken chunks): L1 accepts the HLT may never hear of.
    pub fn problems(&self) -> u64 {
        let c = &self.decoder.counts;
        c.sequence_gaps + c.corrupt_blocks + c.broken_chunks + c.foreign_blocks
    }
}

/// How long a luminosity block lasts: a time, or a number of L1 accepts. Blocks count from
/// 1, as ATLAS's do once a run is going.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LumiBlockLength {
    Seconds(f64),
    L1as(u64),
}

impl LumiBlockLength {
    /// The block of the L1 accept with index `index` (from 0), given `elapsed` since the run
    /// began.
    pub fn block_of(&self, index: u64, elapsed: Duration) -> u32 {
        let n = match *self {
            Self::L1as(n) => index / n.max(1),
            Self::Seconds(s) => (elapsed.as_secs_f64() / s) as u64,
        };
        u32::try_from(n + 1).unwrap_or(u32::MAX)
    }

    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Self::L1as(0) => Err("a luminosity block needs at least 1 L1 accept".into()),
            Self::Seconds(s) if !(s > 0.0 && s.is_finite()) => {
                Err(format!("a luminosity block of {s} s: must be more than 0"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_advance_by_count_or_time() {
        let by_count = LumiBlockLength::L1as(100);
        assert_eq!(by_count.block_of(0, Duration::ZERO), 1);
        assert_eq!(by_count.block_of(99, Duration::from_secs(1000)), 1);
        assert_eq!(by_count.block_of(100, Duration::ZERO), 2);
        let by_time = LumiBlockLength::Seconds(0.5);
        assert_eq!(by_time.block_of(1_000_000, Duration::from_millis(499)), 1);
        assert_eq!(by_time.block_of(0, Duration::from_millis(1600)), 4);
        assert!(LumiBlockLength::L1as(0).validate().is_err());
        assert!(LumiBlockLength::Seconds(0.0).validate().is_err());
        assert!(LumiBlockLength::Seconds(f64::NAN).validate().is_err());
    }

    #[test]
    fn ttc_records_come_back_as_the_card_sent_them() {
        use swdaq_sim::felix::FelixConfig;
        let mut card = FelixCard::new(FelixConfig {
            elinks: 4,
            ecr_every: 50,
            ttc_to_host: true,
            ..FelixConfig::default()
        })
        .unwrap();
        let mut want = Vec::new();
        let mut blocks = Vec::new();
        for i in 0..300 {
            want.push(L1Accept::next(
                &card,
                i,
                LumiBlockLength::L1as(100),
                Instant::now(),
            ));
            card.l1_accept(&mut blocks);
        }
        card.flush(&mut blocks);
        let (ttc_blocks, data_blocks): (Vec<&[u8]>, Vec<&[u8]>) = blocks
            .chunks(swdaq_format::felix::BLOCK_SIZE)
            .partition(|b| {
                swdaq_format::felix::BlockHeader::decode(b).unwrap().elink == TTC_TO_HOST_ELINK
            });
        let (ttc_blocks, data_blocks) = (ttc_blocks.concat(), data_blocks.concat());
        assert!(!data_blocks.is_empty());
        let mut ttc = TtcDecoder::default();
        let mut got = Vec::new();
        ttc.decode(&ttc_blocks, |r| got.push(r));
        assert_eq!(got.len(), 300);
        for (i, (r, w)) in got.iter().zip(&want).enumerate() {
            let l1a = L1Accept::of(*r, i as u64, LumiBlockLength::L1as(100), Instant::now());
            assert_eq!(
                (
                    l1a.l1_id,
                    l1a.bc_id,
                    l1a.trigger_type,
                    l1a.global_id,
                    l1a.lumi_block
                ),
                (w.l1_id, w.bc_id, w.trigger_type, w.global_id, w.lumi_block)
            );
        }
        assert_eq!((ttc.malformed, ttc.problems()), (0, 0));
        // Another e-link's blocks are not TTC records: counted, never read as L1 accepts.
        ttc.decode(&data_blocks, |_| panic!("a data block read as TTC"));
        assert!(ttc.problems() > 0);
    }

    #[test]
    fn the_item_fires_in_all_three_blocks() {
        let info = L1Accept::default().trigger_info();
        assert_eq!(info.len(), 48);
        assert_eq!((info[0], info[16], info[32]), (1, 1, 1));
        assert_eq!(info.iter().map(|w| w.count_ones()).sum::<u32>(), 3);
    }
}
