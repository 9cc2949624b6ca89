//! One FED's link into its readout unit: a latency buffer (`swdaq_readout::ring`) with one
//! fragment per slot, written straight into the slot by the FED's `FrameSource` (raw file,
//! UDP datagram) or by the emulator, and read back by the readout unit on the same thread.
//!
//! Each slot's `timestamp` holds the fragment's event number: its 24-bit level-1 id extended
//! to 64 bits around the event the readout unit builds next ([`extend_l1_id`]), so the
//! readout unit finds event N's fragment by its number, never by its position (a missing
//! fragment leaves no trace in a stream). [`place`] decides what the oldest unread fragment
//! is for event N. The producer writes only while the readout unit's cursor stays readable,
//! so a fragment is never overwritten before it is placed: a full buffer holds the source
//! back (the FED's back-pressure).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use swdaq_format::fed::{FED_L1_ID_MASK, FED_MIN_SIZE, FedHeader};
use swdaq_readout::ring::{LatencyBuffer, SharedProducer, SharedReader, SlotMeta};
use swdaq_readout::source::{Batch, FrameSource, Poll};

/// Slot flag: the fragment's header could not be read, its `timestamp` means nothing.
pub const UNREADABLE_ID: u32 = 1;
/// Most fragments one refill reads, so a busy source does not hold the unit's loop up.
const FILL_BATCH: usize = 64;
/// Fewest slots a link read from a source has: the ring keeps a sixteenth as its reader
/// guard, and a refill reads up to a batch.
pub const MIN_LINK_SLOTS: usize = 64;

/// A 24-bit level-1 id as the event number nearest to `near` with those low bits.
pub fn extend_l1_id(l1_id: u32, near: u64) -> u64 {
    let span = u64::from(FED_L1_ID_MASK) + 1;
    let candidate = (near & !(span - 1)) | u64::from(l1_id & FED_L1_ID_MASK);
    if candidate > near && candidate - near > span / 2 && candidate >= span {
        candidate - span
    } else if candidate < near && near - candidate >= span / 2 {
        candidate + span
    } else {
        candidate
    }
}

/// What a link's oldest unread fragment is to event N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// It is event N's fragment (its checks still judge it).
    Fragment,
    /// Event N has no fragment on this link; the oldest unread one belongs to a later event.
    Missing,
    /// It belongs to no event (a repeat or stray record whose successor is N): skip it.
    Stray,
    /// Cannot tell yet: more fragments may come.
    Wait,
}

/// Event numbers further ahead of the event being built than this are taken as corrupt ids
/// unless the next fragment follows on: no link buffers that many fragments.
pub const PLAUSIBLE_AHEAD: u64 = 1 << 16;

/// Places event `event` on a link from the event numbers of its oldest unread fragments
/// (`ahead`: the first one or two, `None` for an unreadable header). `settled`: nothing more
/// will arrive that could belong to `event` or `event + 1` (the source ended, the FED was
/// declared stopped, or the emulator has produced everything up to `newest`). `newest`: the
/// highest event the source can have sent yet (the emulator's last; `u64::MAX` for a
/// stream): a fragment numbered beyond it has a corrupt id.
///
/// A fragment numbered N is N's. Otherwise its successor decides first: numbered N, this one
/// is a stray; numbered N + 1, this one is N's with a corrupt id. Then a fragment numbered
/// N + 1, or a little further ahead (within [`PLAUSIBLE_AHEAD`]), or further still but
/// followed by the next number, belongs to a later event: N is missing. Anything else
/// (behind N, far ahead, unreadable) is N's fragment with a corrupt or unreadable id.
pub fn place(event: u64, ahead: &[Option<u64>], settled: bool, newest: u64) -> Placement {
    let later = |first: Option<u64>, second: Option<u64>| match first {
        Some(id) if id > event && id <= newest => {
            id <= event + PLAUSIBLE_AHEAD || second.is_some_and(|s| s == id + 1)
        }
        _ => false,
    };
    match *ahead {
        [] if settled => Placement::Missing,
        [] => Placement::Wait,
        [first, ..] if first == Some(event) => Placement::Fragment,
        [_] if !settled => Placement::Wait,
        [first] if later(first, None) => Placement::Missing,
        [_] => Placement::Fragment,
        [_, second, ..] if second == Some(event) => Placement::Stray,
        [_, second, ..] if second == Some(event + 1) => Placement::Fragment,
        [first, second, ..] if later(first, second) => Placement::Missing,
        [_, ..] => Placement::Fragment,
    }
}

/// What one FED's link took in (one writer: the readout unit's thread).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FedIngestCounts {
    pub fragments: u64,
    pub bytes: u64,
    /// Fragments larger than a slot (kept as an empty, unreadable record).
    pub oversized: u64,
    /// Reads that failed part-way (a truncated or unreadable file): the link ends there.
    pub truncated: u64,
    /// Records too short to hold a FED header and trailer (a file's zero tail, a stray
    /// datagram): no fragment of any event, so never landed or placed.
    pub too_short: u64,
    /// Datagrams the kernel dropped before the link read them (the socket's receive buffer
    /// was full): each is a missing fragment the FED did send. As of the link's last idle
    /// read; 0 for sources that cannot tell.
    pub kernel_dropped: u64,
    /// What the FED's decoder (`[evb.input.decoder]`) could not make a fragment of: bytes
    /// skipped, fragments refused or without an event number, a source id not the FED's.
    #[serde(default)]
    pub decode_errors: u64,
    /// FEROL streams over TCP (`[evb.input] kind = "tcp"`): the corruptions found in this
    /// FED's blocks, and its stream's connections, closes and stalls.
    #[serde(default)]
    pub stream: swdaq_readout::source::StreamCounts,
}

/// A landed fragment's metadata, counted in `counts`: its event number extended around
/// `near`, or unreadable (a record larger than the slot is kept empty, counted oversized).
fn judge(slot: &[u8], len: usize, near: u64, counts: &mut FedIngestCounts) -> SlotMeta {
    counts.fragments += 1;
    counts.bytes += len.min(slot.len()) as u64;
    if len > slot.len() {
        counts.oversized += 1;
        return SlotMeta {
            timestamp: 0,
            len: 0,
            flags: UNREADABLE_ID,
        };
    }
    match FedHeader::parse(&slot[..len]) {
        Ok(header) => SlotMeta {
            timestamp: extend_l1_id(header.l1_id, near),
            len: len as u32,
            flags: 0,
        },
        Err(_) => SlotMeta {
            timestamp: 0,
            len: len as u32,
            flags: UNREADABLE_ID,
        },
    }
}

/// Records a source's end, or its failure (counted as truncated), in `ended`.
fn note_end<T: PartialEq>(
    answer: &io::Result<T>,
    end: T,
    ended: &mut bool,
    counts: &mut FedIngestCounts,
) {
    match answer {
        Err(_) => {
            *ended = true;
            counts.truncated += 1;
        }
        Ok(answer) => *ended |= *answer == end,
    }
}

pub struct FedLink {
    pub fed: u16,
    buffer: Arc<LatencyBuffer>,
    /// The buffer's write and read ends, kept for the link's life: claimed per call they cost
    /// atomic read-modify-writes and a fence per fragment.
    producer: SharedProducer,
    reader: SharedReader,
    /// Index of the oldest fragment not yet placed in an event.
    cursor: u64,
    ended: bool,
    /// When the link first held an event up with nothing to read.
    stalled_since: Option<Instant>,
    /// Declared stopped after a bounded wait: events go on without it until it sends again.
    silent: bool,
    /// When a source last landed fragments here (the emulator's landings are not timed).
    last_landed: Option<Instant>,
}

impl FedLink {
    /// `slots` fragments (a power of two, at least 2) of at most `max_fragment` bytes.
    pub fn new(fed: u16, slots: usize, max_fragment: usize) -> io::Result<Self> {
        let buffer = Arc::new(LatencyBuffer::new(slots, max_fragment)?);
        let ends_taken = || io::Error::other("a new latency buffer's ends are taken");
        let producer = buffer.shared_producer().ok_or_else(ends_taken)?;
        let reader = buffer.shared_reader().ok_or_else(ends_taken)?;
        Ok(Self {
            fed,
            buffer,
            producer,
            reader,
            cursor: 0,
            ended: false,
            stalled_since: None,
            silent: false,
            last_landed: None,
        })
    }

    /// Lands one fragment, written into the next slot by `write` (which returns what a
    /// source's `next_frame` does), its event number extended around `near`, counted in
    /// `counts`. `Idle` when the buffer has no room.
    pub fn land(
        &mut self,
        near: u64,
        counts: &mut FedIngestCounts,
        write: impl FnOnce(&mut [u8]) -> io::Result<Poll>,
    ) -> io::Result<Poll> {
        // The cursor's fragment must stay readable after this write.
        if self.buffer.room_keeping(self.cursor) == 0 {
            return Ok(Poll::Idle);
        }
        let Some(slot) = self.producer.next_slot() else {
            return Ok(Poll::Idle);
        };
        let poll = write(slot);
        note_end(&poll, Poll::End, &mut self.ended, counts);
        let len = match poll? {
            Poll::Frame(len) => len,
            other => return Ok(other),
        };
        let meta = judge(slot, len, near, counts);
        self.producer.publish(meta);
        self.stalled_since = None;
        self.silent = false;
        Ok(Poll::Frame(len))
    }

    /// Lands up to `max` fragments with one `next_frames` call of `source` (one `recvmmsg`
    /// for a UDP socket), into consecutive slots, each judged and counted as [`Self::land`]
    /// does one.
    fn land_batch(
        &mut self,
        source: &mut dyn FrameSource,
        near: u64,
        counts: &mut FedIngestCounts,
        max: usize,
    ) -> io::Result<Batch> {
        // Every slot written must leave the cursor's fragment readable.
        let room = self.buffer.room_keeping(self.cursor);
        let want = (max.min(source.batch_size()).min(FILL_BATCH) as u64).min(room) as usize;
        if want == 0 {
            return Ok(Batch::Idle);
        }
        let mut metas = [SlotMeta::default(); FILL_BATCH];
        let received = {
            let Some(mut run) = self.producer.next_slots(want) else {
                return Ok(Batch::Idle);
            };
            let mut lens = [0usize; FILL_BATCH];
            let slots = run.len();
            let batch = source.next_frames(&mut run, &mut lens[..slots]);
            note_end(&batch, Batch::End, &mut self.ended, counts);
            let received = match batch? {
                Batch::Frames(n) => n,
                other => return Ok(other),
            };
            // A record too short to be a fragment is counted and its slot refilled by the
            // batch's later records: a copy paid only when a record is bad.
            let mut kept = 0;
            for (i, &len) in lens.iter().enumerate().take(received) {
                if len < FED_MIN_SIZE {
                    counts.too_short += 1;
                    continue;
                }
                metas[kept] = judge(run.slot(i), len, near, counts);
                run.move_frame(i, kept, len.min(run.slot_len()));
                kept += 1;
            }
            (received, kept)
        };
        let (received, kept) = received;
        // The run's borrow of the producer has ended: publish its slots in order.
        for meta in &metas[..kept] {
            self.producer.publish(*meta);
        }
        if kept > 0 {
            self.stalled_since = None;
            self.silent = false;
            self.last_landed = Some(Instant::now());
        }
        // Records read, landed or not: a stream of short garbage must not keep `fill` reading.
        Ok(Batch::Frames(received))
    }

    /// Reads fragments from `source` while fewer than two are unread (all [`place`] needs),
    /// up to [`FILL_BATCH`] per call, as many per read as the source takes at once; a
    /// source error ends the link (counted as truncated). When the source is idle its
    /// kernel drop count is read: nothing queued then could still arrive.
    pub fn fill(&mut self, source: &mut dyn FrameSource, near: u64, counts: &mut FedIngestCounts) {
        // A stream shared with other FEDs may have counted for this one meanwhile.
        if let Some(stream) = source.stream_counts() {
            counts.stream = stream;
        }
        if self.ended || self.unread() >= 2 {
            return;
        }
        let mut landed = 0;
        while landed < FILL_BATCH {
            match self.land_batch(source, near, counts, FILL_BATCH - landed) {
                Ok(Batch::Frames(n)) => landed += n,
                Ok(Batch::Idle) => {
                    if let Some(dropped) = source.kernel_drops() {
                        counts.kernel_dropped = dropped;
                    }
                    break;
                }
                Ok(Batch::End) | Err(_) => break,
            }
        }
        counts.decode_errors = source.decode_errors();
        if let Some(stream) = source.stream_counts() {
            counts.stream = stream;
        }
    }

    /// Fragments landed and not yet placed.
    pub fn unread(&self) -> u64 {
        self.buffer.published() - self.cursor
    }

    /// True once the source has ended and every fragment is placed.
    pub fn drained(&self) -> bool {
        self.ended && self.unread() == 0
    }

    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Event numbers of the (at most two) oldest unread fragments.
    pub fn ahead(&mut self) -> ([Option<u64>; 2], usize) {
        let mut ids = [None; 2];
        let count = self.unread().min(2) as usize;
        let cursor = self.cursor;
        let read = self.reader.with_view(cursor, |view| {
            for (i, id) in ids.iter_mut().enumerate().take(count) {
                let meta = view.meta(cursor + i as u64);
                *id = (meta.flags & UNREADABLE_ID == 0).then_some(meta.timestamp);
            }
        });
        (ids, if read.is_ok() { count } else { 0 })
    }

    /// Places `event` on this link; `settled` and `newest` as for [`place`], to which a source end and
    /// a stopped FED add. A stream link with nothing to place for longer than `stop_wait`
    /// is declared stopped.
    pub fn place(
        &mut self,
        event: u64,
        settled: bool,
        newest: u64,
        stop_wait: Duration,
    ) -> Placement {
        let (ids, count) = self.ahead();
        let settled = settled || self.ended || self.silent;
        let placement = place(event, &ids[..count], settled, newest);
        if placement == Placement::Wait {
            let since = *self.stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= stop_wait {
                self.silent = true;
                return place(event, &ids[..count], true, newest);
            }
        }
        placement
    }

    /// Size in bytes of the oldest unread fragment (0 when there is none).
    pub fn oldest_len(&mut self) -> usize {
        let cursor = self.cursor;
        if self.unread() == 0 {
            return 0;
        }
        self.reader
            .with_view(cursor, |view| view.meta(cursor).len as usize)
            .unwrap_or(0)
    }

    /// When a source last landed fragments on this link.
    pub fn last_landed(&self) -> Option<Instant> {
        self.last_landed
    }

    /// Every FED of the unit has been silent, so the data stopped (not begun, paused,
    /// ended), not necessarily this FED: forgets the link's wait and that it was taken as
    /// stopped, unless it had nothing for `stop_wait` while another FED still sent
    /// (`others_last`: the unit's last landing), which is this FED stopping.
    pub fn rearm(&mut self, others_last: Option<Instant>, stop_wait: Duration) {
        let stopped_first = match (self.stalled_since, others_last) {
            (Some(stalled), Some(last)) => stalled + stop_wait <= last,
            _ => false,
        };
        if !stopped_first {
            self.stalled_since = None;
            self.silent = false;
        }
    }

    /// Hands the oldest unread fragment to `f` and moves past it.
    pub fn consume<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> R {
        let cursor = self.cursor;
        let result = self
            .reader
            .with_view(cursor, |view| f(view.frame(cursor)))
            .expect("the producer never overwrites the cursor");
        self.cursor += 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const N: u64 = 1000;
    const M: u64 = u64::MAX;

    #[test]
    fn placement_rules() {
        use Placement::*;
        let s = Some;
        // In order, and a missing fragment (N + 1 next, or a run further on).
        assert_eq!(place(N, &[s(N)], false, M), Fragment);
        assert_eq!(place(N, &[s(N + 1), s(N + 2)], false, M), Missing);
        assert_eq!(place(N, &[s(N + 1)], true, M), Missing);
        assert_eq!(place(N, &[s(N + 3), s(N + 4)], false, M), Missing);
        assert_eq!(place(N, &[s(N + 3), None], false, M), Missing);
        // A corrupt id: N + 1 follows, or it is far off or behind.
        assert_eq!(place(N, &[s(N + 1), s(N + 1)], false, M), Fragment);
        assert_eq!(place(N, &[s(N + 5_000_000), s(N + 2)], false, M), Fragment);
        assert_eq!(place(N, &[s(7), s(N + 2)], false, M), Fragment);
        assert_eq!(place(N, &[None, s(N + 1)], false, M), Fragment);
        assert_eq!(place(N, &[None], true, M), Fragment);
        // A far-off run is a later event; a repeat before N is a stray.
        let far = N + 5_000_000;
        assert_eq!(place(N, &[s(far), s(far + 1)], false, M), Missing);
        assert_eq!(place(N, &[s(N - 1), s(N)], false, M), Stray);
        assert_eq!(place(N, &[None, s(N)], false, M), Stray);
        // Not enough to tell.
        assert_eq!(place(N, &[], false, M), Wait);
        assert_eq!(place(N, &[s(N + 1)], false, M), Wait);
        assert_eq!(place(N, &[None], false, M), Wait);
        assert_eq!(place(N, &[], true, M), Missing);
        // Beyond what the source can have sent: a corrupt id, however near.
        assert_eq!(place(N, &[s(N + 3)], true, N + 1), Fragment);
    }

    #[test]
    fn a_full_buffer_holds_the_source_back_and_never_overwrites_the_cursor() {
        let mut link = FedLink::new(3, MIN_LINK_SLOTS, 64).unwrap();
        let mut counts = FedIngestCounts::default();
        assert_eq!(link.oldest_len(), 0);
        let mut landed = 0;
        while let Ok(Poll::Frame(_)) = link.land(1, &mut counts, |slot| {
            slot[..16].copy_from_slice(&[7; 16]);
            Ok(Poll::Frame(16))
        }) {
            landed += 1;
        }
        assert!(landed > 0 && landed < MIN_LINK_SLOTS as u64, "{landed}");
        assert_eq!(link.unread(), landed);
        assert_eq!(link.oldest_len(), 16);
        assert_eq!(link.consume(|b| b.to_vec()), vec![7; 16]);
        let more = link.land(1, &mut counts, |slot| {
            slot[..8].fill(1);
            Ok(Poll::Frame(8))
        });
        assert_eq!(more.unwrap(), Poll::Frame(8));
        assert_eq!(counts.fragments, landed + 1);
    }

    #[test]
    fn oversized_and_failed_reads_are_counted() {
        let mut link = FedLink::new(3, MIN_LINK_SLOTS, 64).unwrap();
        let mut counts = FedIngestCounts::default();
        assert_eq!(
            link.land(1, &mut counts, |_| Ok(Poll::Frame(65))).unwrap(),
            Poll::Frame(65)
        );
        assert_eq!(link.ahead(), ([None, None], 1));
        assert_eq!(link.consume(<[u8]>::len), 0);
        let failed = link.land(1, &mut counts, |_| Err(io::ErrorKind::UnexpectedEof.into()));
        assert!(failed.is_err() && link.ended() && link.drained());
        assert_eq!((counts.oversized, counts.truncated), (1, 1));
    }

    #[test]
    fn a_link_with_nothing_is_declared_stopped_after_the_wait() {
        let mut link = FedLink::new(3, MIN_LINK_SLOTS, 64).unwrap();
        let wait = Duration::from_millis(20);
        assert_eq!(link.place(5, false, M, wait), Placement::Wait);
        std::thread::sleep(wait);
        assert_eq!(link.place(5, false, M, wait), Placement::Missing);
        // Still stopped for the next event, at once.
        assert_eq!(link.place(6, false, M, wait), Placement::Missing);
    }

    proptest! {
        /// Ids within half the 24-bit range of the reference come back whole, across wraps.
        #[test]
        fn extended_ids_survive_the_wrap(near in 1u64..1 << 40, offset in -(1i64 << 22)..1 << 22) {
            let id = near.saturating_add_signed(offset).max(1);
            prop_assert_eq!(extend_l1_id(id as u32 & FED_L1_ID_MASK, near), id);
        }
    }
}
