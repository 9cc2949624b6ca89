//! The latency buffer: a preallocated, page-aligned, power-of-two ring of frame slots that
//! a link's source writes into directly and that several readers (request servers, the
//! recorder) read behind it, without locks and without the producer ever blocking.
//!
//! Discipline (producer-observer-consumer): one producer thread owns the write end. It
//! writes each frame straight into the next slot, publishes it, and may look at the frame it
//! just published (the hit finder observes in place). Readers *pin* the oldest index they
//! read; the producer refuses to overwrite a pinned slot and reports that frame as dropped
//! instead of waiting. Readers only pin indices at least `guard` frames away from the
//! overwrite point, so in practice a pin never costs a frame (a reader would have to hold a
//! pin while the producer writes `guard` more frames).
//!
//! Why it is sound: a slot is written only by the producer, and only when no reader can be
//! reading it. The producer publishes each frame with a release store of `write_index`;
//! every `check_every` frames (at most `guard`) it issues a `SeqCst` fence and reads the pins,
//! which covers the next `check_every` overwrites. A reader stores its pin and then loads
//! `write_index`, both `SeqCst`, and only pins indices at least `guard` ahead of the
//! overwrite point it saw. By the fence rules (Dekker), any producer check after the
//! `write_index` value the reader saw also sees the pin, and the checks before it cover only
//! overwrites less than `guard` frames past that point, and the pin is beyond them. A fence per frame
//! would cost ~40% of ingest bandwidth: it waits for all of the frame's stores to land.

use crossbeam_utils::CachePadded;
use memmap2::{MmapMut, MmapOptions};
use std::cell::UnsafeCell;
use std::io;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many readers may pin one buffer at once.
pub const MAX_READERS: usize = 8;
const UNPINNED: u64 = u64::MAX;

/// What the producer records about each frame beside its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotMeta {
    pub timestamp: u64,
    pub len: u32,
    /// Continuity/integrity findings for this frame (see `checks::frame_flags`).
    pub flags: u32,
}

pub struct LatencyBuffer {
    memory: UnsafeCell<MmapMut>,
    meta: Box<[UnsafeCell<SlotMeta>]>,
    mask: u64,
    slot_stride: usize,
    max_frame: usize,
    guard: u64,
    check_every: u64,
    write_index: CachePadded<AtomicU64>,
    pins: [CachePadded<AtomicU64>; MAX_READERS],
    claimed: AtomicU32,
}

// SAFETY: slot bytes and metadata are shared between one producer and pinned readers under the
// protocol in the module docs: a slot is written only while no reader can read it, and
// readers only read slots whose publication they observed with SeqCst/acquire loads.
unsafe impl Sync for LatencyBuffer {}
// SAFETY: the buffer owns its memory; moving it between threads moves ownership.
unsafe impl Send for LatencyBuffer {}

impl LatencyBuffer {
    /// Allocates `capacity` (rounded up to a power of two) slots of `max_frame` bytes, asks for
    /// transparent huge pages and faults every page in now, so the run never page-faults.
    pub fn new(capacity: usize, max_frame: usize) -> io::Result<Self> {
        let capacity = capacity.max(2).next_power_of_two();
        let slot_stride = max_frame.max(1).next_multiple_of(64);
        let bytes = capacity.checked_mul(slot_stride).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "latency buffer size overflows")
        })?;
        let memory = MmapOptions::new().len(bytes).populate().map_anon()?;
        #[cfg(target_os = "linux")]
        {
            // Best effort: not every kernel offers transparent huge pages.
            let _ = memory.advise(memmap2::Advice::HugePage);
        }
        Ok(Self {
            memory: UnsafeCell::new(memory),
            meta: (0..capacity)
                .map(|_| UnsafeCell::new(SlotMeta::default()))
                .collect(),
            mask: capacity as u64 - 1,
            slot_stride,
            max_frame,
            guard: (capacity as u64 / 16).max(1),
            check_every: (capacity as u64 / 16).clamp(1, 64),
            write_index: CachePadded::new(AtomicU64::new(0)),
            pins: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(UNPINNED))),
            claimed: AtomicU32::new(0),
        })
    }

    pub fn capacity(&self) -> usize {
        self.meta.len()
    }

    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Number of frames ever published; the newest frame has index `published() - 1`.
    pub fn published(&self) -> u64 {
        self.write_index.load(Ordering::SeqCst)
    }

    /// Oldest index a reader may pin now (older ones are, or are about to be, overwritten).
    pub fn oldest_readable(&self) -> u64 {
        self.oldest_readable_after(0)
    }

    /// Oldest index a reader may still pin after the producer has written `frames` more.
    pub fn oldest_readable_after(&self, frames: u64) -> u64 {
        (self.published() + self.guard + frames).saturating_sub(self.capacity() as u64)
    }

    /// How many more frames the producer may write with frame `index` still readable after
    /// them (0 once one more would take it).
    pub fn room_keeping(&self, index: u64) -> u64 {
        (index + self.capacity() as u64).saturating_sub(self.published() + self.guard)
    }

    fn slot_ptr(&self, index: u64) -> *mut u8 {
        let offset = (index & self.mask) as usize * self.slot_stride;
        // SAFETY: offset < capacity * slot_stride, the mapping's length; only a pointer is
        // formed here, access rules are the callers'.
        unsafe { (*self.memory.get()).as_mut_ptr().add(offset) }
    }

    /// The write end. There must be exactly one; calling this twice is a logic error the
    /// type system cannot see, so the buffer hands it out once.
    pub fn producer(&self) -> Option<Producer<'_>> {
        ProducerOf::claim(self)
    }

    /// A read end with its own pin, or `None` when [`MAX_READERS`] are in use.
    pub fn reader(&self) -> Option<Reader<'_>> {
        ReaderOf::claim(self)
    }

    /// The write end, holding the buffer: for an owner that keeps it across calls.
    pub fn shared_producer(self: &Arc<Self>) -> Option<SharedProducer> {
        ProducerOf::claim(Arc::clone(self))
    }

    /// A read end holding the buffer: for an owner that keeps it across calls.
    pub fn shared_reader(self: &Arc<Self>) -> Option<SharedReader> {
        ReaderOf::claim(Arc::clone(self))
    }

    fn claim_producer(&self) -> bool {
        let bit = 1u32 << MAX_READERS;
        self.claimed.fetch_or(bit, Ordering::AcqRel) & bit == 0
    }

    /// A free pin, now claimed.
    fn claim_pin(&self) -> Option<usize> {
        let mut claimed = self.claimed.load(Ordering::Acquire);
        loop {
            let free = (0..MAX_READERS).find(|i| claimed & (1 << i) == 0)?;
            match self.claimed.compare_exchange(
                claimed,
                claimed | 1 << free,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(free),
                Err(now) => claimed = now,
            }
        }
    }

    fn lowest_pin(&self) -> u64 {
        self.pins
            .iter()
            .map(|p| p.load(Ordering::SeqCst))
            .min()
            .unwrap_or(UNPINNED)
    }
}

/// The single write end of a [`LatencyBuffer`], reaching it through `B`: a borrow
/// ([`Producer`]) or an `Arc` ([`SharedProducer`]), which an owner of the buffer can keep
/// beside it across calls instead of claiming the write end (an atomic read-modify-write
/// each way) and reading the pins again (a fence) per frame.
pub struct ProducerOf<B: Deref<Target = LatencyBuffer>> {
    buffer: B,
    /// Write index at which the pins must be read again.
    next_check: u64,
    /// First write index that would overwrite a pinned frame, as of the last check.
    blocked_from: u64,
}

/// The write end borrowing its buffer.
pub type Producer<'a> = ProducerOf<&'a LatencyBuffer>;
/// The write end holding its buffer.
pub type SharedProducer = ProducerOf<Arc<LatencyBuffer>>;

impl<B: Deref<Target = LatencyBuffer>> ProducerOf<B> {
    /// The write end of `buffer`, unless it is already out.
    pub fn claim(buffer: B) -> Option<Self> {
        // Built only when claimed: a refused one, dropped, would release the real claim.
        buffer.claim_producer().then(|| Self {
            buffer,
            next_check: 0,
            blocked_from: u64::MAX,
        })
    }

    /// The next slot to fill, or `None` if a reader still pins the frame it would overwrite
    /// (the caller counts the frame as dropped and carries on).
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        let writable = self.writable(1) == 1;
        let b = &*self.buffer;
        let index = b.write_index.load(Ordering::Relaxed);
        // SAFETY: `writable` cleared this slot for writing (see the module docs); `&mut self`
        // keeps the slice unique on the producer side.
        writable.then(|| unsafe { std::slice::from_raw_parts_mut(b.slot_ptr(index), b.max_frame) })
    }

    /// Up to `max` consecutive slots from the next one, for a source that fills several per
    /// call (`recvmmsg`); `None` if a reader pins the next slot. Fill them in order and
    /// [`Self::publish`] each kept frame after the run is dropped.
    pub fn next_slots(&mut self, max: usize) -> Option<SlotRun<'_>> {
        let first = self.buffer.write_index.load(Ordering::Relaxed);
        let len = self.writable(max as u64) as usize;
        (len > 0).then_some(SlotRun {
            buffer: &self.buffer,
            first,
            len,
        })
    }

    /// How many slots from the next one (at most `max`) no reader can be reading, so the
    /// producer may write them. Reads the pins again whenever the run would reach past the
    /// last check's cover; checking early only costs a fence.
    fn writable(&mut self, max: u64) -> u64 {
        let b = &*self.buffer;
        let index = b.write_index.load(Ordering::Relaxed);
        if index + max > self.next_check || index + max > self.blocked_from {
            // The fence orders our last `write_index` store before the pin loads (Dekker with
            // `Reader::with_view`).
            std::sync::atomic::fence(Ordering::SeqCst);
            self.blocked_from = b.lowest_pin().saturating_add(b.capacity() as u64);
            self.next_check = index + b.check_every;
        }
        max.min(self.next_check - index)
            .min(self.blocked_from.saturating_sub(index))
    }

    /// Publishes the slot returned by the last [`Self::next_slot`] with its metadata.
    pub fn publish(&mut self, meta: SlotMeta) {
        let b = &*self.buffer;
        let index = b.write_index.load(Ordering::Relaxed);
        // SAFETY: as for `next_slot`: the slot at `index` is the producer's until published.
        unsafe { *b.meta[(index & b.mask) as usize].get() = meta };
        b.write_index.store(index + 1, Ordering::Release);
    }

    /// The frame just published, for the observer (hit finder) running on this thread.
    pub fn last_published(&self) -> Option<(SlotMeta, &[u8])> {
        let b = &*self.buffer;
        let index = b.write_index.load(Ordering::Relaxed).checked_sub(1)?;
        // SAFETY: only this thread writes slots, and it is borrowed immutably here.
        let meta = unsafe { *b.meta[(index & b.mask) as usize].get() };
        // SAFETY: the same slot, and `len <= max_frame` as the producer wrote it.
        let bytes = unsafe { std::slice::from_raw_parts(b.slot_ptr(index), meta.len as usize) };
        Some((meta, bytes))
    }
}

impl<B: Deref<Target = LatencyBuffer>> Drop for ProducerOf<B> {
    fn drop(&mut self) {
        self.buffer
            .claimed
            .fetch_and(!(1u32 << MAX_READERS), Ordering::AcqRel);
    }
}

/// Consecutive unpublished slots, cleared for writing by [`Producer::next_slots`]. Slot `i`
/// becomes frame `published() + i` if it is the `i`-th frame published after the run ends.
pub struct SlotRun<'p> {
    buffer: &'p LatencyBuffer,
    first: u64,
    len: usize,
}

impl SlotRun<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes each slot holds.
    pub fn slot_len(&self) -> usize {
        self.buffer.max_frame
    }

    fn slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.len, "slot {i} outside a run of {}", self.len);
        self.buffer.slot_ptr(self.first + i as u64)
    }

    pub fn slot(&self, i: usize) -> &[u8] {
        // SAFETY: the slot is in the run, which the producer owns (`next_slots` borrowed it
        // mutably), and no reader reads it; `&self` rules out a live `&mut` to it.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(i), self.slot_len()) }
    }

    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: as for `slot`; `&mut self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(i), self.slot_len()) }
    }

    /// Raw pointers to every slot, for a system call that fills them (each is `slot_len()`
    /// bytes, writable while the run is mutably borrowed, and no two overlap).
    pub fn slot_ptrs(&mut self) -> impl Iterator<Item = *mut u8> + '_ {
        (0..self.len).map(|i| self.slot_ptr(i))
    }

    /// Moves the first `len` bytes of slot `from` into slot `to` (closing the gap a rejected
    /// frame leaves, so kept frames stay consecutive).
    pub fn move_frame(&mut self, from: usize, to: usize, len: usize) {
        assert!(len <= self.slot_len());
        if from != to {
            // SAFETY: both slots are in the run (asserted by `slot_ptr`), distinct slots never
            // overlap, and `len` fits a slot.
            unsafe { std::ptr::copy_nonoverlapping(self.slot_ptr(from), self.slot_ptr(to), len) }
        }
    }
}

/// A read end of a [`LatencyBuffer`] with its own pin, reaching it through `B` like
/// [`ProducerOf`].
pub struct ReaderOf<B: Deref<Target = LatencyBuffer>> {
    buffer: B,
    pin: usize,
}

/// The read end borrowing its buffer.
pub type Reader<'a> = ReaderOf<&'a LatencyBuffer>;
/// The read end holding its buffer.
pub type SharedReader = ReaderOf<Arc<LatencyBuffer>>;

/// Frames `[first, end)` of a buffer, guaranteed not to change while this view lives.
pub struct PinnedView<'r> {
    buffer: &'r LatencyBuffer,
    pub first: u64,
    pub end: u64,
}

impl PinnedView<'_> {
    pub fn meta(&self, index: u64) -> SlotMeta {
        assert!(
            (self.first..self.end).contains(&index),
            "index outside the pinned view"
        );
        // SAFETY: the index is published (< end, observed with SeqCst) and pinned, so the
        // producer does not write its slot while this view lives.
        unsafe { *self.buffer.meta[(index & self.buffer.mask) as usize].get() }
    }

    pub fn frame(&self, index: u64) -> &[u8] {
        let len = self.meta(index).len as usize;
        // SAFETY: as for `meta`; `len <= max_frame` as written by the producer.
        unsafe { std::slice::from_raw_parts(self.buffer.slot_ptr(index), len) }
    }
}

impl<B: Deref<Target = LatencyBuffer>> ReaderOf<B> {
    /// A read end of `buffer` with its own pin, or `None` when [`MAX_READERS`] are in use.
    pub fn claim(buffer: B) -> Option<Self> {
        let pin = buffer.claim_pin()?;
        Some(Self { buffer, pin })
    }

    /// Pins `from` (clamped to the newest frame) and runs `f` over frames `[from, published)`.
    /// `Err(oldest)` if `from` is no longer readable; `oldest` is the oldest index that is.
    pub fn with_view<R>(
        &mut self,
        from: u64,
        f: impl FnOnce(&PinnedView<'_>) -> R,
    ) -> Result<R, u64> {
        let b = &*self.buffer;
        let pin = &b.pins[self.pin];
        pin.store(from, Ordering::SeqCst);
        let end = b.write_index.load(Ordering::SeqCst);
        let oldest = (end + b.guard).saturating_sub(b.capacity() as u64);
        let result = if from < oldest {
            Err(oldest)
        } else {
            Ok(f(&PinnedView {
                buffer: b,
                first: from.min(end),
                end,
            }))
        };
        pin.store(UNPINNED, Ordering::SeqCst);
        result
    }
}

impl<B: Deref<Target = LatencyBuffer>> Drop for ReaderOf<B> {
    fn drop(&mut self) {
        self.buffer.pins[self.pin].store(UNPINNED, Ordering::SeqCst);
        self.buffer
            .claimed
            .fetch_and(!(1u32 << self.pin), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put<B: Deref<Target = LatencyBuffer>>(p: &mut ProducerOf<B>, ts: u64) -> bool {
        match p.next_slot() {
            Some(slot) => {
                slot[..8].copy_from_slice(&ts.to_le_bytes());
                p.publish(SlotMeta {
                    timestamp: ts,
                    len: 8,
                    flags: 0,
                });
                true
            }
            None => false,
        }
    }

    #[test]
    fn capacity_is_a_power_of_two_and_slots_are_cache_aligned() {
        let b = LatencyBuffer::new(100, 7200).unwrap();
        assert_eq!(b.capacity(), 128);
        assert_eq!(b.slot_stride % 64, 0);
        assert_eq!(b.slot_ptr(0) as usize % 4096, 0);
    }

    #[test]
    fn one_producer_many_readers() {
        let b = LatencyBuffer::new(16, 8).unwrap();
        let p = b.producer().unwrap();
        assert!(b.producer().is_none());
        assert!(b.producer().is_none(), "a refused claim keeps the real one");
        drop(p);
        assert!(b.producer().is_some());
        let readers: Vec<_> = (0..MAX_READERS).map(|_| b.reader().unwrap()).collect();
        assert!(b.reader().is_none());
        drop(readers);
        assert!(b.reader().is_some());
    }

    /// Shared ends hold the buffer and their claims for as long as they live, like borrowed
    /// ones, and the buffer outlives every other handle to it.
    #[test]
    fn shared_ends_hold_the_buffer_and_their_claims() {
        let b = Arc::new(LatencyBuffer::new(16, 8).unwrap());
        let mut p = b.shared_producer().unwrap();
        assert!(b.producer().is_none() && b.shared_producer().is_none());
        let readers: Vec<_> = (0..MAX_READERS - 1).map(|_| b.reader().unwrap()).collect();
        let mut r = b.shared_reader().unwrap();
        assert!(b.reader().is_none() && b.shared_reader().is_none());
        drop(readers);
        let weak = Arc::downgrade(&b);
        drop(b);
        for ts in 0..20 {
            assert!(put(&mut p, ts));
        }
        let got = r.with_view(10, |v| {
            (v.first..v.end)
                .map(|i| v.meta(i).timestamp)
                .collect::<Vec<_>>()
        });
        assert_eq!(got.unwrap(), (10..20).collect::<Vec<_>>());
        let buffer = weak.upgrade().expect("the ends keep the buffer");
        drop(p);
        assert!(buffer.producer().is_some());
        drop((r, buffer));
        assert!(weak.upgrade().is_none(), "the last end frees it");
    }

    /// The room kept for a frame is the most frames that leave it readable, whatever has
    /// been published.
    #[test]
    fn room_keeping_a_frame_is_what_leaves_it_readable() {
        let b = LatencyBuffer::new(16, 8).unwrap();
        let mut p = b.producer().unwrap();
        for published in 0..40u64 {
            for index in b.oldest_readable()..=published {
                let room = b.room_keeping(index);
                assert!(
                    b.oldest_readable_after(room) <= index,
                    "{published} {index}"
                );
                assert!(
                    b.oldest_readable_after(room + 1) > index,
                    "{published} {index}"
                );
            }
            assert!(put(&mut p, published));
        }
    }

    #[test]
    fn readers_see_published_frames_and_old_ones_expire() {
        let b = LatencyBuffer::new(16, 8).unwrap();
        let mut p = b.producer().unwrap();
        let mut r = b.reader().unwrap();
        for ts in 0..40 {
            assert!(put(&mut p, ts * 10));
        }
        assert_eq!(p.last_published().unwrap().0.timestamp, 390);
        // 40 published, capacity 16, guard 1: indices >= 25 are readable.
        assert_eq!(r.with_view(24, |_| ()), Err(25));
        let got = r.with_view(25, |v| {
            (v.first..v.end)
                .map(|i| v.meta(i).timestamp)
                .collect::<Vec<_>>()
        });
        assert_eq!(got.unwrap(), (25..40).map(|i| i * 10).collect::<Vec<_>>());
        let bytes = r.with_view(39, |v| v.frame(39).to_vec()).unwrap();
        assert_eq!(bytes, 390u64.to_le_bytes());
    }

    #[test]
    fn producer_skips_instead_of_overwriting_a_pinned_slot() {
        let b = LatencyBuffer::new(4, 8).unwrap();
        let mut p = b.producer().unwrap();
        let mut r = b.reader().unwrap();
        for ts in 0..4 {
            assert!(put(&mut p, ts));
        }
        // Pin index 1 (readable: 4 + guard 1 - 4 = 1) and try to write over it from inside.
        let dropped = r
            .with_view(1, |_| {
                let first = put(&mut p, 4); // overwrites index 0: allowed
                let second = put(&mut p, 5); // would overwrite index 1: pinned
                (first, second)
            })
            .unwrap();
        assert_eq!(dropped, (true, false));
        assert!(put(&mut p, 5), "the pin is released after the view");
    }

    #[test]
    fn a_slot_run_fills_consecutive_frames_and_stops_short_of_a_pin() {
        // Capacity 64: guard and check_every are 4.
        let b = LatencyBuffer::new(64, 8).unwrap();
        let mut p = b.producer().unwrap();
        let mut r = b.reader().unwrap();
        let mut run = p.next_slots(3).unwrap();
        assert_eq!((run.len(), run.slot_len()), (3, 8));
        for (i, ptr) in run.slot_ptrs().enumerate() {
            // SAFETY: each pointer is a distinct writable slot of `slot_len()` = 8 bytes.
            unsafe { ptr.cast::<u64>().write_unaligned(i as u64 * 10) };
        }
        // Frame 1 is "rejected": frame 2 closes the gap.
        run.move_frame(2, 1, 8);
        assert_eq!(run.slot(1), 20u64.to_le_bytes());
        run.slot_mut(2).fill(0);
        for ts in [0, 20] {
            p.publish(SlotMeta {
                timestamp: ts,
                len: 8,
                flags: 0,
            });
        }
        let frames = r.with_view(0, |v| {
            (v.first..v.end)
                .map(|i| v.frame(i).to_vec())
                .collect::<Vec<_>>()
        });
        assert_eq!(frames.unwrap(), [0u64.to_le_bytes(), 20u64.to_le_bytes()]);
        // Fill to 64 frames, then pin index 4 (64 + guard 4 - 64): the producer may write
        // indices 64..68 (over frames 0..4) but not 68.
        for ts in 2..64 {
            assert!(put(&mut p, ts));
        }
        r.with_view(4, |_| {
            assert_eq!(p.next_slots(8).map(|run| run.len()), Some(4));
            for _ in 0..4 {
                p.publish(SlotMeta::default());
            }
            assert!(p.next_slots(8).is_none());
        })
        .unwrap();
        let run = p.next_slots(64).map(|run| run.len());
        assert_eq!(run, Some(4), "check_every caps a run");
    }

    #[test]
    fn concurrent_reader_never_sees_a_torn_or_stale_frame() {
        let b = LatencyBuffer::new(64, 64).unwrap();
        let total = 200_000u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut p = b.producer().unwrap();
                let mut ts = 0;
                while ts < total {
                    if let Some(slot) = p.next_slot() {
                        for chunk in slot.chunks_exact_mut(8) {
                            chunk.copy_from_slice(&ts.to_le_bytes());
                        }
                        p.publish(SlotMeta {
                            timestamp: ts,
                            len: 64,
                            flags: 0,
                        });
                        ts += 1;
                    }
                }
            });
            s.spawn(|| {
                let mut r = b.reader().unwrap();
                let mut checked = 0u64;
                loop {
                    let done = b.published() >= total;
                    let from = b.oldest_readable();
                    let _ = r.with_view(from, |v| {
                        for i in v.first..v.end {
                            let m = v.meta(i);
                            assert_eq!(m.timestamp, i, "slot {i} holds another frame");
                            for chunk in v.frame(i).chunks_exact(8) {
                                assert_eq!(
                                    u64::from_le_bytes(chunk.try_into().unwrap()),
                                    i,
                                    "torn frame {i}"
                                );
                            }
                            checked += 1;
                        }
                    });
                    if done {
                        break;
                    }
                }
                assert!(checked > 0);
            });
        });
    }
}
