//! An ATLAS-style software ROD (SW ROD): FELIX e-link chunks in GBT mode ([`decoder`]) are
//! aggregated by L1 ID into eformat v5 ROB fragments ([`aggregator`]) in pooled buffers
//! ([`pool`]) and handed down a chain of consumers ([`consumers`]): the data-request server,
//! recording, monitoring samples. The HLT ([`hlt`]) gathers each L1 accept's ([`trigger`])
//! fragments into an eformat v5 full event ([`event`]), which [`files`] stores in ATLAS
//! EventStorage files; [`inspect`] checks such files. Blocks come from emulated cards, from
//! raw files, or from a FELIX server over the network ([`net`]); [`message`] is what its
//! applications send each other across processes.

pub mod aggregator;
pub mod bench;
pub mod consumers;
pub mod decoder;
pub mod elinks;
pub mod event;
pub mod files;
pub mod hlt;
pub mod inspect;
pub mod message;
pub mod metrics;
pub mod net;
pub mod payload;
pub mod pool;
mod prefetch;
pub mod read_back;
pub mod trigger;

pub use aggregator::{
    Aggregator, AggregatorCounts, BuiltFragment, ModuloIndex, PowerOfTwoIndex, RobConfig, SlotIndex,
};
pub use decoder::{BlockDecoder, DecoderCounts};
pub use payload::PayloadPlugin;
pub use pool::Allocation;
