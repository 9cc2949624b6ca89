//! The values a plugin sees and makes, over the ABI's structs.

use std::marker::PhantomData;

use crate::abi;

/// A fragment found by a decoder. Build it with [`Fragment::at`] and the setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fragment {
    pub offset: usize,
    pub length: usize,
    pub source_id: u32,
    pub event_number: Option<u64>,
    pub timestamp: Option<u64>,
    /// `CORRUPT` (0x4), `TRUNCATED` (0x8), and the detector's own bits 16-31.
    pub flags: u32,
}

impl Fragment {
    pub const CORRUPT: u32 = 0x4;
    pub const TRUNCATED: u32 = 0x8;

    /// The `length` bytes at `offset` of the block.
    pub fn at(offset: usize, length: usize) -> Fragment {
        Fragment {
            offset,
            length,
            ..Fragment::default()
        }
    }

    pub fn source(self, source_id: u32) -> Fragment {
        Fragment { source_id, ..self }
    }

    pub fn event_number(self, event_number: u64) -> Fragment {
        Fragment {
            event_number: Some(event_number),
            ..self
        }
    }

    pub fn timestamp(self, timestamp: u64) -> Fragment {
        Fragment {
            timestamp: Some(timestamp),
            ..self
        }
    }

    pub fn flags(self, flags: u32) -> Fragment {
        Fragment { flags, ..self }
    }

    fn to_raw(self) -> abi::RawFragment {
        let has = |present: bool, bit: u32| if present { bit } else { 0 };
        abi::RawFragment {
            offset: self.offset as u64,
            length: self.length as u64,
            event_number: self.event_number.unwrap_or(0),
            timestamp: self.timestamp.unwrap_or(0),
            source_id: self.source_id,
            flags: self.flags
                | has(self.event_number.is_some(), abi::FRAGMENT_HAS_EVENT_NUMBER)
                | has(self.timestamp.is_some(), abi::FRAGMENT_HAS_TIMESTAMP),
        }
    }
}

/// A trigger primitive, as the ABI has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerPrimitive {
    pub timestamp: u64,
    pub channel: u32,
    pub time_over_threshold: u32,
    pub adc_peak: u32,
    pub adc_integral: u32,
    pub flags: u32,
}

impl TriggerPrimitive {
    pub(crate) fn to_raw(self) -> abi::RawTriggerPrimitive {
        abi::RawTriggerPrimitive {
            timestamp: self.timestamp,
            channel: self.channel,
            time_over_threshold: self.time_over_threshold,
            adc_peak: self.adc_peak,
            adc_integral: self.adc_integral,
            flags: self.flags,
            reserved: 0,
        }
    }
}

/// Accept (into a stream; 0 is the default one) or reject an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Reject,
    Accept { stream: u32 },
}

/// One e-link's chunk of an L1 ID.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub link: u32,
    pub data: &'a [u8],
}

/// A fragment given to processing or filtering.
#[derive(Debug, Clone, Copy)]
pub struct FragmentRef<'a> {
    pub data: &'a [u8],
    pub source_id: u32,
    pub event_number: u64,
    pub timestamp: u64,
    pub flags: u32,
}

impl FragmentRef<'_> {
    /// # Safety
    /// `raw.data` points to `raw.length` bytes valid for `'a` (the host's call).
    pub(crate) unsafe fn from_raw<'a>(raw: &abi::RawFragmentRef) -> FragmentRef<'a> {
        FragmentRef {
            // SAFETY: the caller's promise; a zero-length fragment may have any pointer.
            data: unsafe { bytes(raw.data, raw.length) },
            source_id: raw.source_id,
            event_number: raw.event_number,
            timestamp: raw.timestamp,
            flags: raw.flags,
        }
    }
}

/// One event given to filtering: its fragments, read from the host's array as needed.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub event_number: u64,
    raw: &'a [abi::RawFragmentRef],
}

impl<'a> Event<'a> {
    /// # Safety
    /// `raw.fragments` points to `raw.fragment_count` refs, each to bytes valid for `'a`.
    pub(crate) unsafe fn from_raw(raw: &abi::RawEvent) -> Event<'a> {
        // SAFETY: the caller's promise.
        let refs = unsafe { slice(raw.fragments, raw.fragment_count) };
        Event {
            event_number: raw.event_number,
            raw: refs,
        }
    }

    pub fn fragment_count(&self) -> usize {
        self.raw.len()
    }

    pub fn fragments(&self) -> impl Iterator<Item = FragmentRef<'a>> + '_ {
        // SAFETY: `from_raw`'s promise covers every ref of the event.
        self.raw
            .iter()
            .map(|raw| unsafe { FragmentRef::from_raw(raw) })
    }
}

/// A value the plugin hands the host, written as its ABI struct.
pub trait IntoRaw: Copy {
    type Raw;
    fn into_raw(self) -> Self::Raw;
}

impl IntoRaw for Fragment {
    type Raw = abi::RawFragment;
    fn into_raw(self) -> abi::RawFragment {
        self.to_raw()
    }
}

/// The host's output array for one call, written in place: `push` until it returns `false`
/// (full).
pub struct Output<'a, T: IntoRaw> {
    out: *mut T::Raw,
    capacity: usize,
    count: usize,
    refused: bool,
    _host: PhantomData<&'a mut [T::Raw]>,
}

impl<T: IntoRaw> Output<'_, T> {
    /// # Safety
    /// `out` points to room for `capacity` `T::Raw`s, writable during the call and not read
    /// by anyone else meanwhile.
    pub(crate) unsafe fn new(out: *mut T::Raw, capacity: usize) -> Self {
        Output {
            out,
            capacity,
            count: 0,
            refused: false,
            _host: PhantomData,
        }
    }

    /// Adds `item`; `false` (and nothing added) when the host's buffer is full.
    pub fn push(&mut self, item: T) -> bool {
        if self.count == self.capacity {
            self.refused = true;
            return false;
        }
        // SAFETY: `count < capacity`, and `new`'s promise makes that slot writable.
        unsafe { self.out.add(self.count).write(item.into_raw()) };
        self.count += 1;
        true
    }

    /// How many more items fit.
    pub fn room(&self) -> usize {
        self.capacity - self.count
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Whether a push was refused: the host's buffer was too small for the block.
    pub(crate) fn overflowed(&self) -> bool {
        self.refused
    }
}

/// The host's payload buffer for one `aggregate` call. Write the whole payload: bytes beyond
/// the buffer are not stored but counted, and the host is told the size it needs.
pub struct Payload<'a> {
    // A pointer, not a slice: the host's buffer may be uninitialised, which a `&mut [u8]`
    // must never be.
    buffer: *mut u8,
    capacity: usize,
    len: usize,
    _host: PhantomData<&'a mut [u8]>,
}

impl Payload<'_> {
    /// # Safety
    /// `buffer` points to `capacity` bytes writable during the call (or `capacity` is 0).
    pub(crate) unsafe fn new(buffer: *mut u8, capacity: usize) -> Self {
        Payload {
            buffer,
            capacity,
            len: 0,
            _host: PhantomData,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        if end <= self.capacity {
            // SAFETY: `len..end` lies within the `capacity` writable bytes `new` was promised;
            // `bytes` is ours, so the two cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.buffer.add(self.len),
                    bytes.len(),
                )
            };
        }
        self.len = end;
    }

    /// Bytes written so far (also those that did not fit).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn fits(&self) -> bool {
        self.len <= self.capacity
    }
}

/// # Safety
/// `data` points to `length` bytes valid for `'a`, or `length` is 0.
pub(crate) unsafe fn bytes<'a>(data: *const u8, length: u64) -> &'a [u8] {
    // SAFETY: the caller's promise.
    unsafe { slice(data, length) }
}

/// # Safety
/// `data` points to `count` `T`s valid for `'a`, or `count` is 0.
pub(crate) unsafe fn slice<'a, T>(data: *const T, count: u64) -> &'a [T] {
    if count == 0 || data.is_null() {
        return &[];
    }
    // SAFETY: the caller's promise; the host's arrays are in memory, so the count fits a usize.
    unsafe { std::slice::from_raw_parts(data, count as usize) }
}
