//! The `extern "C"` functions `export_plugin!` puts in the descriptor: each turns the ABI's
//! pointers into safe values, runs the plugin's code inside `catch_unwind`, and turns its
//! result (or its panic) into the ABI's status and outputs.

use std::any::Any;
use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{self, InstancePtr, Status};
use crate::types::{self, Chunk, Event, FragmentRef, Output, Payload, TriggerPrimitive};
use crate::{Aggregate, Decision, Decode, FilterEvents, Plugin, ProcessFragments};

/// What the host's `swdaq_instance *` points to.
struct Instance<T> {
    plugin: T,
    last_error: CString,
    /// One fragment's primitives before they are copied to the host (kept for its capacity).
    primitives: Vec<TriggerPrimitive>,
    /// The chunks of one `aggregate` call (kept for its capacity).
    chunks: Vec<Chunk<'static>>,
}

impl<T> Instance<T> {
    fn fail(&mut self, message: &str) -> Status {
        // A message with a nul byte is cut there: the host reads a C string.
        let text = message.split('\0').next().unwrap_or_default();
        self.last_error = CString::new(text).unwrap_or_default();
        abi::ERROR
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    format!("panicked: {text}")
}

/// Runs `call` on the instance, a panic becoming `SWDAQ_ERROR` with its message.
///
/// # Safety
/// `instance` was made by `create::<T>` and is not destroyed; no other call on it runs.
unsafe fn guarded<T>(
    instance: InstancePtr,
    call: impl FnOnce(&mut Instance<T>) -> Status,
) -> Status {
    // SAFETY: the caller's promise: a live, exclusively used Instance<T>.
    let instance = unsafe { &mut *instance.cast::<Instance<T>>() };
    match catch_unwind(AssertUnwindSafe(|| call(instance))) {
        Ok(status) => status,
        Err(payload) => {
            let message = panic_message(payload.as_ref());
            instance.fail(&message)
        }
    }
}

/// Writes `message` into the host's error buffer, cut to fit with its nul.
///
/// # Safety
/// `error` points to `capacity` writable bytes (or `capacity` is 0).
unsafe fn write_error(error: *mut c_char, capacity: usize, message: &str) {
    if error.is_null() || capacity == 0 {
        return;
    }
    let mut len = message.len().min(capacity - 1);
    while !message.is_char_boundary(len) {
        len -= 1;
    }
    // SAFETY: `len + 1 <= capacity` bytes, the caller's promise.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), error.cast::<u8>(), len);
        error.add(len).write(0);
    }
}

pub(crate) unsafe extern "C" fn create<T: Plugin>(
    config: *const c_char,
    config_len: usize,
    error: *mut c_char,
    error_capacity: usize,
) -> InstancePtr {
    // SAFETY: the header: `config_len` bytes at `config`, valid during the call.
    let config = unsafe { types::bytes(config.cast::<u8>(), config_len as u64) };
    let made = catch_unwind(|| match std::str::from_utf8(config) {
        Ok(text) => T::create(text),
        Err(e) => Err(format!("configuration is not UTF-8: {e}")),
    });
    let message = match made {
        Ok(Ok(plugin)) => {
            let instance = Instance {
                plugin,
                last_error: CString::default(),
                primitives: Vec::new(),
                chunks: Vec::new(),
            };
            return Box::into_raw(Box::new(instance)).cast::<c_void>();
        }
        Ok(Err(message)) => message,
        Err(payload) => panic_message(payload.as_ref()),
    };
    // SAFETY: the header: `error_capacity` writable bytes at `error`.
    unsafe { write_error(error, error_capacity, &message) };
    std::ptr::null_mut()
}

pub(crate) unsafe extern "C" fn destroy<T: Plugin>(instance: InstancePtr) {
    if instance.is_null() {
        return;
    }
    // SAFETY: made by `create::<T>` with Box::into_raw; the host destroys it exactly once.
    let instance = unsafe { Box::from_raw(instance.cast::<Instance<T>>()) };
    // A panicking Drop must not unwind into the host; nothing is left to report it to.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(instance)));
}

pub(crate) unsafe extern "C" fn last_error<T: Plugin>(instance: *const c_void) -> *const c_char {
    if instance.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a live instance made by `create::<T>`; the string lives until the next call.
    unsafe { (*instance.cast::<Instance<T>>()).last_error.as_ptr() }
}

pub(crate) unsafe extern "C" fn decode<T: Decode>(
    instance: InstancePtr,
    block: *const u8,
    block_len: usize,
    out: *mut abi::RawFragment,
    out_capacity: usize,
    out_count: *mut usize,
    consumed: *mut usize,
) -> Status {
    // SAFETY: the header: `block_len` bytes at `block`, room for `out_capacity` fragments at
    // `out`, both for the call's duration.
    let (block, mut output) = unsafe {
        (
            types::bytes(block, block_len as u64),
            Output::new(out, out_capacity),
        )
    };
    let mut done = 0;
    // SAFETY: the header's contract for `instance`.
    let status = unsafe {
        guarded::<T>(instance, |instance| {
            match instance.plugin.decode(block, &mut output) {
                Ok(bytes) => {
                    done = bytes;
                    if output.overflowed() {
                        abi::NEED_ROOM
                    } else {
                        abi::OK
                    }
                }
                Err(failure) => {
                    done = failure.consumed;
                    instance.fail(&failure.message)
                }
            }
        })
    };
    // SAFETY: the header: both outputs are writable.
    unsafe {
        out_count.write(output.count());
        consumed.write(done);
    }
    status
}

pub(crate) unsafe extern "C" fn aggregate<T: Aggregate>(
    instance: InstancePtr,
    l1_id: u32,
    chunks: *const abi::RawChunk,
    chunk_count: usize,
    payload: *mut u8,
    payload_capacity: usize,
    payload_len: *mut usize,
) -> Status {
    // SAFETY: the header: `chunk_count` chunks, each with its bytes, valid during the call.
    let raw_chunks = unsafe { types::slice(chunks, chunk_count as u64) };
    let capacity = if payload.is_null() {
        0
    } else {
        payload_capacity
    };
    // SAFETY: the header: `payload_capacity` writable bytes at `payload` during the call.
    let mut written = unsafe { Payload::new(payload, capacity) };
    let call = |instance: &mut Instance<T>| {
        let mut list = std::mem::take(&mut instance.chunks);
        // SAFETY: each chunk's bytes are valid during the call; `list` is emptied before
        // it returns, so no chunk outlives it despite the 'static in its type.
        list.extend(raw_chunks.iter().map(|c| Chunk {
            link: c.link,
            data: unsafe { types::bytes(c.data, c.length) },
        }));
        let result = instance.plugin.aggregate(l1_id, &list, &mut written);
        list.clear();
        instance.chunks = list;
        match result {
            Ok(()) if written.fits() => abi::OK,
            Ok(()) => abi::NEED_ROOM,
            Err(message) => instance.fail(&message),
        }
    };
    // SAFETY: the header's contract for `instance`.
    let status = unsafe { guarded::<T>(instance, call) };
    // SAFETY: the header: the output is writable.
    unsafe { payload_len.write(written.len()) };
    status
}

pub(crate) unsafe extern "C" fn process_fragments<T: ProcessFragments>(
    instance: InstancePtr,
    fragments: *const abi::RawFragmentRef,
    fragment_count: usize,
    out: *mut abi::RawTriggerPrimitive,
    out_capacity: usize,
    out_count: *mut usize,
    fragments_done: *mut usize,
) -> Status {
    // SAFETY: the header: `fragment_count` refs, each to bytes valid during the call.
    let refs = unsafe { types::slice(fragments, fragment_count as u64) };
    let (mut count, mut done) = (0usize, 0usize);
    let call = |instance: &mut Instance<T>| {
        for raw in refs {
            // SAFETY: the bytes of every ref are valid during the call.
            let fragment = unsafe { FragmentRef::from_raw(raw) };
            instance.primitives.clear();
            if let Err(message) = instance
                .plugin
                .process_fragment(&fragment, &mut instance.primitives)
            {
                return instance.fail(&message);
            }
            if instance.primitives.len() > out_capacity - count {
                if count == 0 {
                    let message = format!(
                        "fragment {done} has {} primitives, more than the host's {out_capacity}",
                        instance.primitives.len()
                    );
                    return instance.fail(&message);
                }
                return abi::NEED_ROOM;
            }
            for primitive in &instance.primitives {
                // SAFETY: `count < out_capacity` (checked above), room the header gives.
                unsafe { out.add(count).write(primitive.to_raw()) };
                count += 1;
            }
            done += 1;
        }
        abi::OK
    };
    // SAFETY: the header's contract for `instance`.
    let status = unsafe { guarded::<T>(instance, call) };
    // SAFETY: the header: both outputs are writable.
    unsafe {
        out_count.write(count);
        fragments_done.write(done);
    }
    status
}

pub(crate) unsafe extern "C" fn filter_events<T: FilterEvents>(
    instance: InstancePtr,
    events: *const abi::RawEvent,
    event_count: usize,
    decisions: *mut abi::RawDecision,
) -> Status {
    // SAFETY: the header: `event_count` events, each with its fragments, valid during the call.
    let events = unsafe { types::slice(events, event_count as u64) };
    let call = |instance: &mut Instance<T>| {
        for (index, raw) in events.iter().enumerate() {
            // SAFETY: the event's fragments are valid during the call.
            let event = unsafe { Event::from_raw(raw) };
            let decision = match instance.plugin.filter_event(&event) {
                Ok(Decision::Reject) => abi::RawDecision {
                    accept: 0,
                    stream: 0,
                },
                Ok(Decision::Accept { stream }) => abi::RawDecision { accept: 1, stream },
                Err(message) => return instance.fail(&message),
            };
            // SAFETY: the header: room for `event_count` decisions.
            unsafe { decisions.add(index).write(decision) };
        }
        abi::OK
    };
    // SAFETY: the header's contract for `instance`.
    unsafe { guarded::<T>(instance, call) }
}
