//! Names and attributes of a swdaq HDF5 file, as DUNE's `hdf5libs` (`HDF5RawDataFile`,
//! `HDF5SourceIDHandler`) writes them, so scripts and tools written for DUNE files find their
//! way around ours. Followed, all `DUNE-DAQ/hdf5libs` (the newest code whose commits are known;
//! the commit of the latest release, v3.6.2 of `coredaq-v5.7.1`, could not be established):
//! `036adeb592596b024ce8d2f7d5e4de8be1163eaf:src/HDF5RawDataFile.cpp` (file attributes,
//! integer timestamps), `03c7a5285e8f640b2e82749819646b642ee2eea5:src/HDF5SourceIDHandler.cpp`
//! (the JSON maps, geo-id packing), `2755361e079667a8bec3fb3003f479e7131eeb22:src/HDF5FileLayout.cpp`
//! (paths, `filelayout_params`). Record numbers have 5 digits, sequence numbers 4, as
//! `filelayout_params` says (hdf5libs' default is 6 digits; its readers take the file's params).
//!
//! ```text
//! /                                   attributes: run_number (u32), file_index (u64),
//!                                     creation_timestamp (u64 ms), application_name,
//!                                     filelayout_params (JSON), filelayout_version (u32),
//!                                     record_type, and once closed source_id_geo_id_map (JSON),
//!                                     recorded_size (u64), closing_timestamp (u64 ms);
//!                                     swdaq's provenance: swdaq_version, swdaq_git_commit,
//!                                     swdaq_build_profile, swdaq_build_flags,
//!                                     swdaq_run_registry, swdaq_run_type (strings)
//! /TriggerRecord00042.0000/           one group per record (trigger number . sequence number);
//!                                     attributes record_header_source_id, source_id_path_map,
//!                                     fragment_type_source_id_map, subdetector_source_id_map (JSON)
//!     RawData/
//!         TR_Builder_0x00000000_TriggerRecordHeader   the record header (DUNE v4 layout)
//!         Detector_Readout_0x00000001_WIBEth          one whole fragment (header + payload)
//!         Trigger_0x00000000_Trigger_Primitive
//! ```
//!
//! Text attributes are variable-length strings, as HighFive writes `std::string`. Every dataset
//! is `char` (HDF5 int8) with shape `[bytes, 1]`, as `hdf5libs` writes them: its reader converts
//! any other integer type (and would clip bytes above 127).
//!
//! The `swdaq_*` attributes name the run's registry entry and the software that wrote the
//! file (`swdaq_format::provenance`). hdf5libs reads a file's attributes by name
//! (`HDF5RawDataFile`'s read constructor and `get_attribute`, same commit) and lists the rest
//! (`get_attribute_names`) without judging them, as DUNE's own `dfmodules` adds its own, so
//! they change nothing for its readers; every attribute hdf5libs writes is as before.
//!
//! Not established from hdf5libs' code, so not guessed at: what an empty map is written as
//! (ours: `{"map_entries":[]}`), and the attributes DUNE's `dfmodules` (not hdf5libs) adds
//! (`operational_environment`, `offline_data_stream`, `run_was_for_test_purposes`).

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::fragment::FRAGMENT_HEADER_SIZE;
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_format::{FragmentHeader, FragmentType, SourceId, Subsystem, TriggerRecordHeader};

pub const RECORD_TYPE: &str = "TriggerRecord";
pub const RECORD_HEADER_DATASET: &str = "TriggerRecordHeader";
pub const RAW_DATA_GROUP: &str = "RawData";
/// `hdf5libs` file layout version whose names and attributes these are: 6, the first whose
/// timestamps are integers (hdf5libs' tools read them as integers from 6 on, as strings
/// before; v2.8.0 wrote strings with version 5). Whether v3.6.2 writes 6 or a later version
/// with the same names is open.
pub const LAYOUT_VERSION: u32 = 6;
const DIGITS_FOR_RECORD_NUMBER: usize = 5;
const DIGITS_FOR_SEQUENCE_NUMBER: usize = 4;

pub mod attr {
    pub const RUN_NUMBER: &str = "run_number";
    pub const FILE_INDEX: &str = "file_index";
    pub const CREATION_TIMESTAMP: &str = "creation_timestamp";
    pub const CLOSING_TIMESTAMP: &str = "closing_timestamp";
    pub const APPLICATION_NAME: &str = "application_name";
    pub const RECORDED_SIZE: &str = "recorded_size";
    pub const RECORD_TYPE: &str = "record_type";
    pub const LAYOUT_VERSION: &str = "filelayout_version";
    pub const LAYOUT_PARAMS: &str = "filelayout_params";
    pub const SOURCE_ID_GEO_ID_MAP: &str = "source_id_geo_id_map";
    pub const RECORD_HEADER_SOURCE_ID: &str = "record_header_source_id";
    pub const SOURCE_ID_PATH_MAP: &str = "source_id_path_map";
    pub const FRAGMENT_TYPE_MAP: &str = "fragment_type_source_id_map";
    pub const SUBDETECTOR_MAP: &str = "subdetector_source_id_map";
}

/// Group name of a record: `TriggerRecord` + 5-digit trigger number + `.` + 4-digit sequence.
pub fn record_group(header: &TriggerRecordHeader) -> String {
    format!(
        "{RECORD_TYPE}{:0w$}.{:0s$}",
        header.trigger_number,
        header.sequence_number,
        w = DIGITS_FOR_RECORD_NUMBER,
        s = DIGITS_FOR_SEQUENCE_NUMBER
    )
}

/// `hdf5libs` spelling of a source id (`SourceID::to_string`): `Detector_Readout_0x00000005`.
pub fn source_name(source: SourceId) -> String {
    format!("{}_0x{:08x}", source.subsystem.name(), source.id)
}

/// Dataset name of the record header inside `RawData`.
pub fn record_header_dataset(header: &TriggerRecordHeader) -> String {
    format!("{}_{RECORD_HEADER_DATASET}", source_name(header.element_id))
}

/// Dataset name of a fragment inside `RawData`: source id and fragment type.
pub fn fragment_dataset(header: &FragmentHeader) -> String {
    format!(
        "{}_{}",
        source_name(header.element_id),
        header.fragment_type.name()
    )
}

/// File name of file `index` of run `run`.
pub fn file_name(prefix: &str, run: u32, index: u32) -> String {
    format!("{prefix}_run{run:06}_{index:04}.hdf5")
}

/// The `filelayout_params` attribute: the parameters `hdf5libs` rebuilds its layout from.
pub fn layout_params() -> String {
    let group = |kind: &str, name: &str| {
        json!({"detector_group_type": kind, "detector_group_name": name,
               "element_name_prefix": "Element", "digits_for_element_number": 5})
    };
    json!({
        "record_name_prefix": RECORD_TYPE,
        "digits_for_record_number": DIGITS_FOR_RECORD_NUMBER,
        "digits_for_sequence_number": DIGITS_FOR_SEQUENCE_NUMBER,
        "record_header_dataset_name": RECORD_HEADER_DATASET,
        "raw_data_group_name": RAW_DATA_GROUP,
        "view_group_name": "Views",
        "path_param_list": [group("Detector_Readout", "TPC"), group("Trigger", "Trigger")],
    })
    .to_string()
}

fn sid(s: SourceId) -> Value {
    json!({"subsys": s.subsystem.0, "id": s.id})
}

/// The geo id of a readout fragment as `HDF5SourceIDHandler` packs it (stream << 48 |
/// slot << 32 | crate << 16 | detector), from its first frame's DAQ Ethernet header: where
/// DUNE takes it from its hardware map, swdaq has only what its links send. Fragments of
/// other types have no DAQ Ethernet header, so no geo id.
pub fn fragment_geo_id(header: &FragmentHeader, fragment: &[u8]) -> Option<u64> {
    if header.element_id.subsystem != Subsystem::DETECTOR_READOUT
        || header.fragment_type != FragmentType::WIBETH
    {
        return None;
    }
    let first = fragment.get(FRAGMENT_HEADER_SIZE..FRAGMENT_HEADER_SIZE + wibeth::FRAME_SIZE)?;
    let frame = WibEthFrame::parse(first).ok()?;
    Some(geo_id(&frame.daq_header()))
}

fn geo_id(h: &DaqEthHeader) -> u64 {
    u64::from(h.stream_id) << 48
        | u64::from(h.slot_id) << 32
        | u64::from(h.crate_id) << 16
        | u64::from(h.det_id)
}

/// The file's `source_id_geo_id_map` attribute: each readout source with its geo ids.
pub fn geo_id_map(geo_ids: &BTreeMap<SourceId, BTreeSet<u64>>) -> String {
    let entries: Vec<Value> = geo_ids
        .iter()
        .map(|(s, ids)| json!({"subsys": s.subsystem.0, "id": s.id, "geoids": ids}))
        .collect();
    json!({ "map_entries": entries }).to_string()
}

/// The record group's JSON attributes (`HDF5SourceIDHandler`), by name.
pub fn record_attributes(
    group: &str,
    header: &TriggerRecordHeader,
    fragments: &[FragmentHeader],
) -> [(&'static str, String); 4] {
    let mut paths = vec![
        json!({"subsys": header.element_id.subsystem.0, "id": header.element_id.id,
        "path": format!("/{group}/{RAW_DATA_GROUP}/{}", record_header_dataset(header))}),
    ];
    let mut by_type: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    let mut by_detector: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    for f in fragments {
        let s = f.element_id;
        paths.push(json!({"subsys": s.subsystem.0, "id": s.id,
            "path": format!("/{group}/{RAW_DATA_GROUP}/{}", fragment_dataset(f))}));
        by_type.entry(f.fragment_type.0).or_default().push(sid(s));
        by_detector
            .entry(u32::from(f.detector_id))
            .or_default()
            .push(sid(s));
    }
    let entries = |key: &str, map: BTreeMap<_, Vec<Value>>| {
        let list: Vec<Value> = map
            .into_iter()
            .map(|(k, ids)| json!({key: k, "sourceids": ids}))
            .collect();
        json!({ "map_entries": list }).to_string()
    };
    [
        (
            attr::RECORD_HEADER_SOURCE_ID,
            sid(header.element_id).to_string(),
        ),
        (
            attr::SOURCE_ID_PATH_MAP,
            json!({ "map_entries": paths }).to_string(),
        ),
        (attr::FRAGMENT_TYPE_MAP, entries("fragment_type", by_type)),
        (attr::SUBDETECTOR_MAP, entries("subdetector", by_detector)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_hdf5libs() {
        let header = TriggerRecordHeader {
            trigger_number: 42,
            trigger_timestamp: 0,
            run_number: 1,
            status_bits: 0,
            trigger_type: 0,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
            components: vec![],
        };
        assert_eq!(record_group(&header), "TriggerRecord00042.0000");
        assert_eq!(
            record_header_dataset(&header),
            "TR_Builder_0x00000000_TriggerRecordHeader"
        );
        let fragment = FragmentHeader {
            size: 72,
            trigger_number: 42,
            trigger_timestamp: 0,
            window_begin: 0,
            window_end: 0,
            run_number: 1,
            error_bits: 0,
            fragment_type: FragmentType::WIBETH,
            sequence_number: 0,
            detector_id: 3,
            element_id: SourceId::readout(100),
        };
        assert_eq!(
            fragment_dataset(&fragment),
            "Detector_Readout_0x00000064_WIBEth"
        );
        let [_, (_, paths), (_, types), _] =
            record_attributes("TriggerRecord00042.0000", &header, &[fragment]);
        assert!(paths.contains(
            r#""path":"/TriggerRecord00042.0000/RawData/Detector_Readout_0x00000064_WIBEth""#
        ));
        assert!(types.contains(r#""fragment_type":12"#));
        let params: Value = serde_json::from_str(&layout_params()).unwrap();
        assert_eq!(params["digits_for_sequence_number"], 4);
    }
}
