//! An ATLAS-style software ROD (SW ROD): FELIX e-link chunks in GBT mode ([`decoder`]) are
//! aggregated by L1 ID into eformat v5 ROB fragments ([`aggregator`]) in pooled buffers
//! ([`pool`]).

pub mod aggregator;
pub mod decoder;
pub mod elinks;
pub mod pool;

pub use aggregator::{
    Aggregator, AggregatorCounts, BuiltFragment, ModuloIndex, PowerOfTwoIndex, RobConfig, SlotIndex,
};
pub use decoder::{BlockDecoder, DecoderCounts};
pub use pool::Allocation;
