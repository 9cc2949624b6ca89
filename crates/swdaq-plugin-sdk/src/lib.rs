//! Write a swdaq plugin in Rust: implement [`Plugin`] and the capabilities you provide
//! ([`Decode`], [`Aggregate`], [`ProcessFragments`], [`FilterEvents`]), then
//! `export_plugin!(YourType, [decode, ...])` generates the entry symbol `swdaq_plugin_v1` and
//! the `extern "C"` functions of `include/swdaq_plugin.h` over them. Build the crate as a
//! `cdylib`; swdaq loads it like a plugin written in C.
//!
//! Every generated function runs your code inside `catch_unwind`: a panic becomes an error
//! return carrying the panic's message ("panicked: ..."), never an unwind into swdaq (which
//! would abort the process). The instance stays usable after it.
//!
//! ```
//! use swdaq_plugin_sdk::{Decode, DecodeFailure, Fragment, Output, Plugin, export_plugin};
//!
//! /// 8-byte records: source id and event number, little-endian u32s.
//! struct Records;
//!
//! impl Plugin for Records {
//!     const NAME: &'static std::ffi::CStr = c"records";
//!     const VERSION: &'static std::ffi::CStr = c"1.0";
//!     fn create(_config_toml: &str) -> Result<Self, String> {
//!         Ok(Records)
//!     }
//! }
//!
//! impl Decode for Records {
//!     fn decode(&mut self, block: &[u8], out: &mut Output<'_, Fragment>) -> Result<usize, DecodeFailure> {
//!         let mut consumed = 0;
//!         for record in block.chunks_exact(8) {
//!             let word = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap());
//!             let fragment = Fragment::at(consumed, 8).source(word(0)).event_number(word(4).into());
//!             if !out.push(fragment) {
//!                 break; // full: swdaq calls again with the rest
//!             }
//!             consumed += 8;
//!         }
//!         Ok(consumed)
//!     }
//! }
//!
//! export_plugin!(Records, [decode]);
//! ```

pub use swdaq_plugin_abi as abi;
mod shims;
mod types;

pub use types::{
    Chunk, Decision, Event, Fragment, FragmentRef, IntoRaw, Output, Payload, TriggerPrimitive,
};

use std::ffi::CStr;

/// What every plugin has: a name, a version and a constructor from its configuration.
pub trait Plugin: Sized + 'static {
    /// The name swdaq uses for the plugin in every error it reports.
    const NAME: &'static CStr;
    /// The plugin's own version.
    const VERSION: &'static CStr;
    /// Makes an instance from the plugin's own TOML table, as text. The error is shown to the
    /// operator on one line with the plugin's file.
    fn create(config_toml: &str) -> Result<Self, String>;
}

/// Why a block was not decoded cleanly: the message, and how many bytes to skip (0: the whole
/// block). The fragments pushed before are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeFailure {
    pub consumed: usize,
    pub message: String,
}

/// Input format: a front end's bytes into fragments.
pub trait Decode: Plugin {
    /// Decodes `block`, pushing fragments (offsets from the block's start) to `out`, and
    /// returns how many bytes it is done with; every fragment must lie within them. Bytes after
    /// that (a message continuing in the next block) come again at the start of the next
    /// call. When `out.push` returns `false` the host's buffer is full: return the bytes
    /// consumed so far and the host calls again with the rest.
    fn decode(
        &mut self,
        block: &[u8],
        out: &mut Output<'_, Fragment>,
    ) -> Result<usize, DecodeFailure>;
}

/// Aggregation: one L1 ID's chunks into one ROB fragment payload.
pub trait Aggregate: Plugin {
    /// Writes `l1_id`'s payload from `chunks` into `payload`. Write it all: when it does not
    /// fit, the SDK tells the host how much room is needed and swdaq calls again.
    fn aggregate(
        &mut self,
        l1_id: u32,
        chunks: &[Chunk<'_>],
        payload: &mut Payload<'_>,
    ) -> Result<(), String>;
}

/// Per-fragment processing: trigger primitives from a fragment.
pub trait ProcessFragments: Plugin {
    /// Appends `fragment`'s primitives to `out` (empty on entry). When the host's buffer
    /// cannot take them all, the same fragment is given again in the next call: keep no state
    /// that would count it twice.
    fn process_fragment(
        &mut self,
        fragment: &FragmentRef<'_>,
        out: &mut Vec<TriggerPrimitive>,
    ) -> Result<(), String>;
}

/// Per-event filtering.
pub trait FilterEvents: Plugin {
    /// Accepts (into a stream) or rejects one event.
    fn filter_event(&mut self, event: &Event<'_>) -> Result<Decision, String>;
}

/// The descriptor `export_plugin!` builds: static, shared by every thread.
#[repr(transparent)]
pub struct Descriptor(abi::RawPlugin);

// SAFETY: the descriptor is immutable once built; its pointers are to static C strings and
// its functions are thread-safe entry points (an instance's calls are never concurrent).
unsafe impl Sync for Descriptor {}

impl Descriptor {
    /// A descriptor with no capability yet.
    pub const fn new<T: Plugin>() -> Descriptor {
        Descriptor(abi::RawPlugin {
            abi_version: abi::ABI_VERSION,
            struct_size: size_of::<abi::RawPlugin>() as u32,
            name: T::NAME.as_ptr(),
            version: T::VERSION.as_ptr(),
            create: Some(shims::create::<T>),
            destroy: Some(shims::destroy::<T>),
            last_error: Some(shims::last_error::<T>),
            decode: None,
            aggregate: None,
            process_fragments: None,
            filter_events: None,
        })
    }

    /// Adds `T`'s [`Decode`].
    pub const fn decode<T: Decode>(mut self) -> Descriptor {
        self.0.decode = Some(shims::decode::<T>);
        self
    }

    /// Adds `T`'s [`Aggregate`].
    pub const fn aggregate<T: Aggregate>(mut self) -> Descriptor {
        self.0.aggregate = Some(shims::aggregate::<T>);
        self
    }

    /// Adds `T`'s [`ProcessFragments`].
    pub const fn process_fragments<T: ProcessFragments>(mut self) -> Descriptor {
        self.0.process_fragments = Some(shims::process_fragments::<T>);
        self
    }

    /// Adds `T`'s [`FilterEvents`].
    pub const fn filter_events<T: FilterEvents>(mut self) -> Descriptor {
        self.0.filter_events = Some(shims::filter_events::<T>);
        self
    }

    /// What the entry symbol returns.
    pub const fn as_ptr(&'static self) -> *const abi::RawPlugin {
        &self.0
    }
}

/// Exports a plugin: `export_plugin!(Type, [decode, aggregate, process_fragments,
/// filter_events])`, listing the capabilities `Type` implements. Use once per library.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty, [$($capability:ident),* $(,)?]) => {
        /// The swdaq plugin entry point (`include/swdaq_plugin.h`).
        #[unsafe(no_mangle)]
        pub extern "C" fn swdaq_plugin_v1() -> *const $crate::abi::RawPlugin {
            static DESCRIPTOR: $crate::Descriptor =
                $crate::Descriptor::new::<$plugin>()$(.$capability::<$plugin>())*;
            DESCRIPTOR.as_ptr()
        }
    };
}
