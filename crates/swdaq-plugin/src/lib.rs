//! Detector plugins (#35): a detector group's own input format, aggregation and processing,
//! loaded at run time through swdaq's stable C ABI (`include/swdaq_plugin.h`), and the
//! no-code [`PacketFormat`] for front ends whose packets a configuration can describe.
//!
//! Every value a plugin returns is checked before it is used — counts against capacities,
//! fragments against the bytes consumed, payload lengths against their buffer — and a failed
//! check is a [`PluginError`] naming the plugin and the check, counted per instance in
//! [`ErrorCounts`]: never undefined behaviour, never a panic. A plugin that cannot be loaded is
//! refused with one [`LoadError`] line naming the file and why.
//!
//! ```no_run
//! use swdaq_plugin::{Decoder, Plugin, PluginDecoder};
//! let plugin = Plugin::load("libtriggered_board.so")?;
//! let mut decoder = PluginDecoder::new(&plugin, "board = 7")?;
//! let mut fragments = Vec::new();
//! let consumed = decoder.decode(&[0u8; 64], &mut fragments);
//! # let _ = consumed;
//! # Ok::<(), swdaq_plugin::LoadError>(())
//! ```

use swdaq_plugin_abi as abi;
mod decode;
mod error;
mod load;
mod packet;
mod process;
mod section;

pub use decode::{DecodeError, DecodeProblem, Decoder, Fragment, PluginDecoder, Stream, flags};
pub use error::{ErrorCounts, ErrorKind, LoadError, PluginError};
pub use load::Plugin;
pub use packet::{
    ByteOrder, ConfigError, CrcField, CrcKind, Field, Framing, MagicField, NotAPacket,
    PacketCounts, PacketError, PacketFormat, PacketFormatConfig,
};
pub use process::{
    Aggregator, Chunk, Decision, Event, EventFilter, FragmentProcessor, FragmentRef,
    PluginAggregator, PluginEventFilter, PluginFragmentProcessor, ProcessError, TriggerPrimitive,
};
pub use section::{DecoderSection, ProcessorSection, SectionError};
