//! Names and attributes of a swdaq HDF5 file, modelled on DUNE's `hdf5libs` default layout
//! so scripts written for DUNE files find their way around ours:
//!
//! ```text
//! /                                   attributes: run_number, file_index, creation_timestamp,
//!                                     closing_timestamp, application_name, recorded_size,
//!                                     record_type ("TriggerRecord"), filelayout_version
//! /TriggerRecord00042.0000/           one group per record (trigger number . sequence number)
//!     TriggerRecordHeader             u8 dataset: the record header (DUNE v4 layout)
//!     RawData/
//!         Detector_Readout_0x00000001_WIBEth   u8 dataset: one whole fragment (header + payload)
//!         Trigger_0x00000000_Trigger_Primitive
//! ```

use swdaq_format::{FragmentHeader, TriggerRecordHeader};

pub const RECORD_TYPE: &str = "TriggerRecord";
pub const RECORD_HEADER_DATASET: &str = "TriggerRecordHeader";
pub const RAW_DATA_GROUP: &str = "RawData";
/// Version of this layout, stored as `filelayout_version`.
pub const LAYOUT_VERSION: u32 = 1;

/// Group name of a record: `TriggerRecord` + 5-digit trigger number + `.` + 4-digit sequence.
pub fn record_group(header: &TriggerRecordHeader) -> String {
    format!(
        "{RECORD_TYPE}{:05}.{:04}",
        header.trigger_number, header.sequence_number
    )
}

/// Dataset name of a fragment inside `RawData`: source subsystem, hex source id, fragment type.
pub fn fragment_dataset(header: &FragmentHeader) -> String {
    let s = header.element_id;
    format!(
        "{}_0x{:08x}_{}",
        s.subsystem.name(),
        s.id,
        header.fragment_type.name()
    )
}

/// File name of file `index` of run `run`.
pub fn file_name(prefix: &str, run: u32, index: u32) -> String {
    format!("{prefix}_run{run:06}_{index:04}.hdf5")
}

pub mod attr {
    pub const RUN_NUMBER: &str = "run_number";
    pub const FILE_INDEX: &str = "file_index";
    pub const CREATION_TIMESTAMP: &str = "creation_timestamp";
    pub const CLOSING_TIMESTAMP: &str = "closing_timestamp";
    pub const APPLICATION_NAME: &str = "application_name";
    pub const RECORDED_SIZE: &str = "recorded_size";
    pub const RECORD_TYPE: &str = "record_type";
    pub const LAYOUT_VERSION: &str = "filelayout_version";
}
