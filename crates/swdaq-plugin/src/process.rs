//! The other three capabilities: aggregation of one L1 ID's chunks, per-fragment processing
//! into trigger primitives, per-event filtering. Each is a trait the host's stages use and a
//! plugin's implementation with every returned value checked.

use crate::abi::{self, RawChunk, RawDecision, RawEvent, RawFragmentRef, RawTriggerPrimitive};
use crate::error::{ErrorCounts, ErrorKind, LoadError, PluginError};
use crate::load::{Instance, Plugin};

/// A reused array of ABI structs pointing into the caller's data, kept between calls only for
/// its capacity: every method that fills one empties it before it returns.
struct Scratch<T>(Vec<T>);

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch(Vec::new())
    }
}

impl<T> std::ops::Deref for Scratch<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

// SAFETY: a scratch array holds pointers only during one call of `aggregate`, `process` or
// `filter` (each clears it before returning), which takes `&mut self`: when its owner moves to
// another thread it is empty, so no pointer crosses threads.
unsafe impl<T> Send for Scratch<T> {}

/// One e-link's chunk of an L1 ID.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub link: u32,
    pub data: &'a [u8],
}

/// A fragment handed to processing or filtering: its bytes and what is known of it.
#[derive(Debug, Clone, Copy)]
pub struct FragmentRef<'a> {
    pub data: &'a [u8],
    pub source_id: u32,
    pub event_number: u64,
    pub timestamp: u64,
    pub flags: u32,
}

/// One event for filtering.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub event_number: u64,
    pub fragments: &'a [FragmentRef<'a>],
}

/// A trigger primitive as the ABI has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerPrimitive {
    pub timestamp: u64,
    pub channel: u32,
    pub time_over_threshold: u32,
    pub adc_peak: u32,
    pub adc_integral: u32,
    pub flags: u32,
}

/// Accept (into a stream) or reject one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Reject,
    Accept { stream: u32 },
}

/// Builds one L1 ID's ROB fragment payload from its chunks.
pub trait Aggregator {
    /// Replaces `payload`'s contents with the payload of `l1_id`'s `chunks`.
    fn aggregate(
        &mut self,
        l1_id: u32,
        chunks: &[Chunk<'_>],
        payload: &mut Vec<u8>,
    ) -> Result<(), PluginError>;
}

/// Finds trigger primitives in fragments.
pub trait FragmentProcessor {
    /// Appends the primitives of `fragments` to `out`. On an error, the primitives of the
    /// fragments it says are done are in `out`; the rest of the batch has none.
    fn process(
        &mut self,
        fragments: &[FragmentRef<'_>],
        out: &mut Vec<TriggerPrimitive>,
    ) -> Result<(), ProcessError>;
}

/// A batch of fragments not processed to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error} (after {fragments_done} fragments of the batch)")]
pub struct ProcessError {
    /// The fragments from the batch's start whose primitives were all delivered.
    pub fragments_done: usize,
    pub error: PluginError,
}

/// Accepts or rejects whole events.
pub trait EventFilter {
    /// Replaces `decisions`' contents with one decision per event.
    fn filter(
        &mut self,
        events: &[Event<'_>],
        decisions: &mut Vec<Decision>,
    ) -> Result<(), PluginError>;
}

/// A plugin's `aggregate`.
pub struct PluginAggregator {
    instance: Instance,
    aggregate: abi::AggregateFn,
    chunks: Scratch<RawChunk>,
    max_payload: usize,
}

impl PluginAggregator {
    /// The largest payload a plugin may ask room for unless [`Self::with_max_payload`] says.
    pub const DEFAULT_MAX_PAYLOAD: usize = 64 << 20;

    pub fn new(plugin: &Plugin, config_toml: &str) -> Result<PluginAggregator, LoadError> {
        let aggregate = plugin.require(plugin.functions().aggregate, "aggregate")?;
        let instance = plugin.instance(config_toml)?;
        Ok(PluginAggregator {
            instance,
            aggregate,
            chunks: Scratch::default(),
            max_payload: Self::DEFAULT_MAX_PAYLOAD,
        })
    }

    pub fn with_max_payload(mut self, bytes: usize) -> PluginAggregator {
        self.max_payload = bytes;
        self
    }

    pub fn error_counts(&self) -> &ErrorCounts {
        &self.instance.counts
    }

    /// Offers the plugin all of `payload`'s capacity. It is initialised first (only what lies
    /// beyond the Vec's length costs a fill): a plugin claiming bytes it never wrote then shows
    /// zeros or an earlier payload, never uninitialised memory.
    fn call(&mut self, l1_id: u32, payload: &mut Vec<u8>) -> (abi::Status, usize) {
        payload.resize(payload.capacity(), 0);
        let mut len = 0usize;
        // SAFETY: `chunks` points into slices borrowed for this call; the payload pointer and
        // length are the Vec's own, all initialised and writable; `len` is a local.
        let status = unsafe {
            (self.aggregate)(
                self.instance.pointer,
                l1_id,
                self.chunks.as_ptr(),
                self.chunks.len(),
                payload.as_mut_ptr(),
                payload.len(),
                &mut len,
            )
        };
        (status, len)
    }
}

impl Aggregator for PluginAggregator {
    fn aggregate(
        &mut self,
        l1_id: u32,
        chunks: &[Chunk<'_>],
        payload: &mut Vec<u8>,
    ) -> Result<(), PluginError> {
        self.chunks.clear();
        self.chunks.extend(chunks.iter().map(|c| RawChunk {
            data: c.data.as_ptr(),
            length: c.data.len() as u64,
            link: c.link,
            reserved: 0,
        }));
        let result = self.aggregate_with_room(l1_id, payload);
        // No pointer into the caller's chunks outlives the call.
        self.chunks.clear();
        match result {
            Ok(len) => payload.truncate(len),
            Err(_) => payload.clear(),
        }
        result.map(|_| ())
    }
}

impl PluginAggregator {
    /// Calls the plugin, once more with the room it asks for; the payload's checked length.
    fn aggregate_with_room(
        &mut self,
        l1_id: u32,
        payload: &mut Vec<u8>,
    ) -> Result<usize, PluginError> {
        let (mut status, mut len) = self.call(l1_id, payload);
        if status == abi::NEED_ROOM {
            if len > self.max_payload {
                let limit = self.max_payload;
                return Err(self
                    .instance
                    .fail(ErrorKind::PayloadAboveLimit { needed: len, limit }));
            }
            payload.reserve(len.saturating_sub(payload.len()));
            (status, len) = self.call(l1_id, payload);
            if status == abi::NEED_ROOM {
                return Err(self.instance.fail(ErrorKind::NeedRoomTwice));
            }
        }
        if status != abi::OK {
            return Err(self.instance.status_error(status));
        }
        let offered = payload.len();
        if len > offered {
            return Err(self.instance.fail(ErrorKind::PayloadAboveCapacity {
                len,
                capacity: offered,
            }));
        }
        Ok(len)
    }
}

/// A plugin's `process_fragments`.
pub struct PluginFragmentProcessor {
    instance: Instance,
    process: abi::ProcessFragmentsFn,
    fragments: Scratch<RawFragmentRef>,
    primitives: Vec<RawTriggerPrimitive>,
}

impl PluginFragmentProcessor {
    /// Primitives one call may return.
    pub const DEFAULT_BATCH: usize = 4096;

    /// Sets how many primitives one call may return (at least 1).
    pub fn with_batch(mut self, primitives: usize) -> PluginFragmentProcessor {
        self.primitives = vec![RawTriggerPrimitive::default(); primitives.max(1)];
        self
    }

    pub fn new(plugin: &Plugin, config_toml: &str) -> Result<PluginFragmentProcessor, LoadError> {
        let process = plugin.require(plugin.functions().process_fragments, "process_fragments")?;
        let instance = plugin.instance(config_toml)?;
        Ok(PluginFragmentProcessor {
            instance,
            process,
            fragments: Scratch::default(),
            primitives: vec![RawTriggerPrimitive::default(); Self::DEFAULT_BATCH],
        })
    }

    pub fn error_counts(&self) -> &ErrorCounts {
        &self.instance.counts
    }
}

fn raw_fragment_ref(f: &FragmentRef<'_>) -> RawFragmentRef {
    RawFragmentRef {
        data: f.data.as_ptr(),
        length: f.data.len() as u64,
        event_number: f.event_number,
        timestamp: f.timestamp,
        source_id: f.source_id,
        flags: f.flags,
    }
}

impl FragmentProcessor for PluginFragmentProcessor {
    fn process(
        &mut self,
        fragments: &[FragmentRef<'_>],
        out: &mut Vec<TriggerPrimitive>,
    ) -> Result<(), ProcessError> {
        self.fragments.clear();
        self.fragments
            .extend(fragments.iter().map(raw_fragment_ref));
        let result = self.process_all(out);
        // No pointer into the caller's fragments outlives the call.
        self.fragments.clear();
        result
    }
}

impl PluginFragmentProcessor {
    fn process_all(&mut self, out: &mut Vec<TriggerPrimitive>) -> Result<(), ProcessError> {
        let failed = |fragments_done, error| {
            Err(ProcessError {
                fragments_done,
                error,
            })
        };
        let mut start = 0;
        while start < self.fragments.len() {
            let rest = &self.fragments[start..];
            let (mut count, mut done) = (0usize, 0usize);
            // SAFETY: `rest` points at refs to slices borrowed for this call; `primitives` is
            // ours with its true length as capacity; the outputs are locals.
            let status = unsafe {
                (self.process)(
                    self.instance.pointer,
                    rest.as_ptr(),
                    rest.len(),
                    self.primitives.as_mut_ptr(),
                    self.primitives.len(),
                    &mut count,
                    &mut done,
                )
            };
            let capacity = self.primitives.len();
            // Counts that break the contract make the whole call untrusted: only the fragments
            // of earlier calls are done.
            if !matches!(status, abi::OK | abi::NEED_ROOM | abi::ERROR) {
                return failed(start, self.instance.status_error(status));
            }
            if count > capacity {
                return failed(
                    start,
                    self.instance
                        .fail(ErrorKind::CountAboveCapacity { count, capacity }),
                );
            }
            if done > rest.len() {
                let count = rest.len();
                return failed(
                    start,
                    self.instance
                        .fail(ErrorKind::DoneAboveCount { done, count }),
                );
            }
            out.extend(self.primitives[..count].iter().map(|p| TriggerPrimitive {
                timestamp: p.timestamp,
                channel: p.channel,
                time_over_threshold: p.time_over_threshold,
                adc_peak: p.adc_peak,
                adc_integral: p.adc_integral,
                flags: p.flags,
            }));
            match status {
                abi::OK if done == rest.len() => return Ok(()),
                abi::OK => {
                    let count = rest.len();
                    return failed(
                        start + done,
                        self.instance
                            .fail(ErrorKind::DoneBelowCount { done, count }),
                    );
                }
                abi::NEED_ROOM if done == 0 => {
                    return failed(start, self.instance.fail(ErrorKind::NoProgress));
                }
                abi::NEED_ROOM => start += done,
                _ => return failed(start + done, self.instance.status_error(status)),
            }
        }
        Ok(())
    }
}

/// A plugin's `filter_events`.
pub struct PluginEventFilter {
    instance: Instance,
    filter: abi::FilterEventsFn,
    fragments: Scratch<RawFragmentRef>,
    events: Scratch<RawEvent>,
    decisions: Vec<RawDecision>,
}

impl PluginEventFilter {
    pub fn new(plugin: &Plugin, config_toml: &str) -> Result<PluginEventFilter, LoadError> {
        let filter = plugin.require(plugin.functions().filter_events, "filter_events")?;
        let instance = plugin.instance(config_toml)?;
        Ok(PluginEventFilter {
            instance,
            filter,
            fragments: Scratch::default(),
            events: Scratch::default(),
            decisions: Vec::new(),
        })
    }

    pub fn error_counts(&self) -> &ErrorCounts {
        &self.instance.counts
    }

    fn call(&mut self, events: &[Event<'_>]) -> abi::Status {
        self.fragments.clear();
        self.fragments.extend(
            events
                .iter()
                .flat_map(|e| e.fragments.iter().map(raw_fragment_ref)),
        );
        // Pointers into `fragments` are taken only now that it is complete (no reallocation).
        self.events.clear();
        let mut first = 0;
        for event in events {
            self.events.push(RawEvent {
                event_number: event.event_number,
                fragments: self.fragments[first..].as_ptr(),
                fragment_count: event.fragments.len() as u64,
            });
            first += event.fragments.len();
        }
        // An `accept` the ABI does not have: a decision the plugin leaves unwritten is caught.
        let unwritten = RawDecision {
            accept: u32::MAX,
            stream: 0,
        };
        self.decisions.clear();
        self.decisions.resize(events.len(), unwritten);
        // SAFETY: `events` and the fragment refs they point to are ours and refer to slices
        // borrowed for this call; `decisions` has room for one per event, as the header says.
        let status = unsafe {
            (self.filter)(
                self.instance.pointer,
                self.events.as_ptr(),
                self.events.len(),
                self.decisions.as_mut_ptr(),
            )
        };
        // No pointer into the caller's fragments outlives the call.
        self.events.clear();
        self.fragments.clear();
        status
    }
}

impl EventFilter for PluginEventFilter {
    fn filter(
        &mut self,
        events: &[Event<'_>],
        decisions: &mut Vec<Decision>,
    ) -> Result<(), PluginError> {
        decisions.clear();
        let status = self.call(events);
        if status != abi::OK {
            return Err(self.instance.status_error(status));
        }
        if let Some((index, bad)) = self
            .decisions
            .iter()
            .enumerate()
            .find(|(_, d)| d.accept > 1)
        {
            return Err(self.instance.fail(ErrorKind::BadDecision {
                index,
                accept: bad.accept,
            }));
        }
        decisions.extend(self.decisions.iter().map(|d| match d.accept {
            0 => Decision::Reject,
            _ => Decision::Accept { stream: d.stream },
        }));
        Ok(())
    }
}
