//! A CMS-style event builder (the second dataflow model beside the DUNE request-window
//! one): FEDs send one fragment per level-1 accept; readout units read each FED through its own
//! latency buffer, place each fragment in its event by level-1 id ([`fed_link`], from the
//! emulator, files or UDP: [`input`], [`producer`]), check them and build one
//! super-fragment per event ([`check`], [`ru`]); the event manager (readout unit 0, which
//! sees the trigger) gives each event to a builder unit that has asked for work ([`evm`]);
//! the builder unit asks every readout unit for that event's super-fragments, builds an FRD
//! event with its CRC32C, flagging it incomplete with the missing readout units named when
//! one does not answer in time ([`build`], [`bu`]), and its writer thread puts events into
//! `RAW_0002` files of `events_per_file` events with the filter farm's `.jsn` bookkeeping
//! ([`files`], [`jsn`]); a stand-in for the filter farm reads them back, verifies and
//! deletes them ([`farm`]); [`ramdisk`] tells whether the RAM disk keeps files in large pages. Units talk only through `swdaq_dataflow::transport` ([`message`]);
//! [`system`] runs them all in one process; [`fed_udp`] sends emulated FEDs over UDP; [`reconcile`] settles a dead builder unit's
//! events with what it left on disk.

pub mod bench;
pub mod bench_plugin;
pub mod bench_udp;
pub mod bu;
pub mod build;
pub mod check;
pub mod config;
pub mod decoded;
pub mod evm;
pub mod farm;
pub mod farm_filter;
pub mod fed_link;
pub mod fed_tcp;
pub mod fed_udp;
pub mod ferol_tcp;
pub mod files;
pub mod input;
pub mod inspect;
pub mod jsn;
pub mod message;
pub mod metrics;
pub mod pause;
pub mod producer;
pub mod ramdisk;
pub mod reconcile;
pub mod ru;
pub mod system;

pub use config::{DiskFullPolicy, EvbConfig};
pub use system::{Drills, EvbRun, EvbSummary};
