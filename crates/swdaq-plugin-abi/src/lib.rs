//! The `#[repr(C)]` mirror of `include/swdaq_plugin.h`, version 1, field for field as the
//! header has it, shared by the host (`swdaq-plugin`) and the Rust SDK (`swdaq-plugin-sdk`) so
//! both speak one layout; `tests/layout.rs` compares every size and offset with what a C
//! compiler makes of the header.

use std::ffi::{c_char, c_void};

pub const ABI_VERSION: u32 = 1;
pub const ENTRY_SYMBOL: &[u8] = b"swdaq_plugin_v1\0";

pub type Status = i32;
pub const OK: Status = 0;
pub const NEED_ROOM: Status = 1;
pub const ERROR: Status = -1;

pub const FRAGMENT_HAS_EVENT_NUMBER: u32 = 0x1;
pub const FRAGMENT_HAS_TIMESTAMP: u32 = 0x2;
pub const FRAGMENT_KNOWN_FLAGS: u32 = 0xF;
pub const FRAGMENT_DETECTOR_FLAGS: u32 = 0xFFFF_0000;

/// `swdaq_instance *`: the plugin's own state, never read by the host.
pub type InstancePtr = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RawFragment {
    pub offset: u64,
    pub length: u64,
    pub event_number: u64,
    pub timestamp: u64,
    pub source_id: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawChunk {
    pub data: *const u8,
    pub length: u64,
    pub link: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawFragmentRef {
    pub data: *const u8,
    pub length: u64,
    pub event_number: u64,
    pub timestamp: u64,
    pub source_id: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RawTriggerPrimitive {
    pub timestamp: u64,
    pub channel: u32,
    pub time_over_threshold: u32,
    pub adc_peak: u32,
    pub adc_integral: u32,
    pub flags: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawEvent {
    pub event_number: u64,
    pub fragments: *const RawFragmentRef,
    pub fragment_count: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct RawDecision {
    pub accept: u32,
    pub stream: u32,
}

pub type CreateFn = unsafe extern "C" fn(*const c_char, usize, *mut c_char, usize) -> InstancePtr;
pub type DestroyFn = unsafe extern "C" fn(InstancePtr);
pub type LastErrorFn = unsafe extern "C" fn(*const c_void) -> *const c_char;
pub type DecodeFn = unsafe extern "C" fn(
    InstancePtr,
    *const u8,
    usize,
    *mut RawFragment,
    usize,
    *mut usize,
    *mut usize,
) -> Status;
pub type AggregateFn = unsafe extern "C" fn(
    InstancePtr,
    u32,
    *const RawChunk,
    usize,
    *mut u8,
    usize,
    *mut usize,
) -> Status;
pub type ProcessFragmentsFn = unsafe extern "C" fn(
    InstancePtr,
    *const RawFragmentRef,
    usize,
    *mut RawTriggerPrimitive,
    usize,
    *mut usize,
    *mut usize,
) -> Status;
pub type FilterEventsFn =
    unsafe extern "C" fn(InstancePtr, *const RawEvent, usize, *mut RawDecision) -> Status;

#[repr(C)]
pub struct RawPlugin {
    pub abi_version: u32,
    pub struct_size: u32,
    pub name: *const c_char,
    pub version: *const c_char,
    pub create: Option<CreateFn>,
    pub destroy: Option<DestroyFn>,
    pub last_error: Option<LastErrorFn>,
    pub decode: Option<DecodeFn>,
    pub aggregate: Option<AggregateFn>,
    pub process_fragments: Option<ProcessFragmentsFn>,
    pub filter_events: Option<FilterEventsFn>,
}

pub type EntryFn = unsafe extern "C" fn() -> *const RawPlugin;
