//! Wire formats of swdaq: zero-copy, bounds-checked views over byte slices and the
//! encoders that write them. Every parser returns a typed [`FormatError`] on short, corrupt
//! or wrong-version input and never panics.
//!
//! DUNE-compatible layouts (byte for byte): [`wibeth`] (WIBEth TPC frames), [`protowib`]
//! (ProtoDUNE-SP WIB frames), [`tp`] (TriggerPrimitive v2), [`fragment`] (FragmentHeader v5),
//! [`source_id`] (SourceID v2), [`trigger_record`] (TriggerRecordHeader v4). CMS-compatible:
//! [`fed`] (FED fragments with their CRC-16), [`frd`] (FRD event header v6, `RAW_0002` file
//! header). ATLAS: [`felix`] (FELIX to-host blocks, GBT mode), [`eformat`] (event format v5
//! ROB/ROD), [`eformat_event`] (eformat v5 full events), [`eventstorage`] (EventStorage v6
//! files and ATLAS raw file names). Ours: [`rawfile`] (raw link files), [`roi`] (regions of interest of one link),
//! [`run_files`] (which run a file belongs to; run numbers claimed so no run overwrites another).
//! [`file_checksum`] checksums files as they are written. [`provenance`] is what every file says of its run and the software that wrote it. [`file_kind`] tells which of these a file holds. [`crc`] computes CRC32C.

pub mod adc_matrix;
pub mod board_frame;
pub mod crc;
pub mod daq_eth;
pub mod eformat;
pub mod eformat_event;
mod error;
pub mod eventstorage;
pub mod fed;
pub mod fed_detector;
pub mod felix;
pub mod ferol;
pub mod file_checksum;
pub mod file_kind;
pub mod fragment;
pub mod frame_format;
pub mod frd;
pub mod input_file;
mod le;
pub mod protowib;
pub mod provenance;
pub mod rawfile;
pub mod roi;
pub mod run_files;
pub mod source_id;
pub mod tp;
pub mod trigger_record;
pub mod wibeth;

pub use error::FormatError;
pub use fragment::{Fragment, FragmentHeader, FragmentType};
pub use frame_format::FrameFormat;
pub use source_id::{SourceId, Subsystem};
pub use tp::TriggerPrimitive;
pub use trigger_record::{ComponentRequest, TriggerRecord, TriggerRecordHeader};

/// DUNE detector id (`detdataformats::DetID::Subsystem`) of horizontal-drift TPC data.
pub const DETECTOR_ID_HD_TPC: u16 = 3;
