"""Issue #23: a file of a default `swdaq run`, read the way DUNE's hdf5libs reads its own files
(`HDF5RawDataFile`, `HDF5SourceIDHandler`), not through swdaq's layout code: every file
attribute hdf5libs writes with hdf5libs' type, every record group's JSON maps, each map's
path a dataset and each dataset in the map. Issue #38: beside them, the run's provenance
(`swdaq_*` strings), equal to what the run registry records of the run."""

import json
import os
import re
import subprocess

import h5py
import numpy as np
import pytest

from swdaq_paths import SWDAQ, provenance_on_record

# hdf5libs' `write_attribute` of run_number_t (uint32), size_t, uint32_t and std::string.
FILE_ATTRIBUTES = {
    "run_number": np.uint32,
    "file_index": np.uint64,
    "creation_timestamp": np.uint64,
    "closing_timestamp": np.uint64,
    "recorded_size": np.uint64,
    "filelayout_version": np.uint32,
    "application_name": str,
    "filelayout_params": str,
    "record_type": str,
    "source_id_geo_id_map": str,
}
PROVENANCE = ("version", "git_commit", "build_profile", "build_flags", "run_registry", "run_type")
RECORD_ATTRIBUTES = {"record_header_source_id", "source_id_path_map", "fragment_type_source_id_map", "subdetector_source_id_map"}
READOUT = 1  # daqdataformats SourceID::Subsystem::kDetectorReadout


def attribute_type(attrs, name):
    dtype = attrs.get_id(name).dtype
    return str if h5py.check_string_dtype(dtype) else dtype.type


def sid(entry):
    return (entry["subsys"], entry["id"])


@pytest.mark.skipif("SWDAQ_BIN" not in os.environ, reason="needs the swdaq binary (SWDAQ_BIN)")
def test_a_run_writes_every_hdf5libs_attribute_and_map(tmp_path):
    subprocess.run([SWDAQ, "run", "--duration", "1", "--out", str(tmp_path), "--metrics", ""], check=True, capture_output=True)
    files = sorted(tmp_path.rglob("*.hdf5"))
    assert files, "the run wrote no file"
    records = 0
    for path in files:
        with h5py.File(path, "r") as f:
            expected = {**FILE_ATTRIBUTES, **{f"swdaq_{fact}": str for fact in PROVENANCE}}
            assert {n: attribute_type(f.attrs, n) for n in f.attrs} == expected, path
            on_record = provenance_on_record(tmp_path / "swdaq-runs.sqlite", int(f.attrs["run_number"]))
            assert {fact: f.attrs[f"swdaq_{fact}"] for fact in PROVENANCE} == on_record, path
            assert f.attrs["filelayout_version"] >= 6, "integer timestamps are layout version 6 on"
            assert f.attrs["closing_timestamp"] >= f.attrs["creation_timestamp"] > 1_600_000_000_000
            params = json.loads(f.attrs["filelayout_params"])
            prefix = f.attrs["record_type"]
            assert params["record_name_prefix"] == prefix and "raw_data_group_name" in params and "view_group_name" in params
            name = re.compile(rf"^{prefix}\d{{{params['digits_for_record_number']}}}\.\d{{{params['digits_for_sequence_number']}}}$")
            geo = {sid(e): e["geoids"] for e in json.loads(f.attrs["source_id_geo_id_map"])["map_entries"]}
            readout_seen = set()
            for group_name, group in f.items():
                assert name.match(group_name), group_name
                records += 1
                assert set(group.attrs) == RECORD_ATTRIBUTES, group_name
                for a in RECORD_ATTRIBUTES:
                    assert attribute_type(group.attrs, a) is str
                maps = {a: json.loads(group.attrs[a]) for a in RECORD_ATTRIBUTES}
                paths = {sid(e): e["path"] for e in maps["source_id_path_map"]["map_entries"]}
                datasets = []
                group.visititems(lambda n, o: datasets.append(o.name) if isinstance(o, h5py.Dataset) else None)
                assert sorted(paths.values()) == sorted(datasets), group_name
                header = paths[sid(maps["record_header_source_id"])]
                assert header.endswith("_" + params["record_header_dataset_name"])
                by_type = {e["fragment_type"]: {sid(s) for s in e["sourceids"]} for e in maps["fragment_type_source_id_map"]["map_entries"]}
                by_detector = {e["subdetector"]: {sid(s) for s in e["sourceids"]} for e in maps["subdetector_source_id_map"]["map_entries"]}
                for source, dataset_path in paths.items():
                    dataset = f[dataset_path]
                    assert dataset.dtype == np.int8 and dataset.shape[1:] == (1,), dataset_path
                    if dataset_path == header:
                        continue
                    # daqdataformats FragmentHeader v5: fragment_type at byte 56, detector_id at 62.
                    raw = dataset[:72, 0].view(np.uint8)
                    fragment_type = int(raw[56:60].view("<u4")[0])
                    detector = int(raw[62:64].view("<u2")[0])
                    assert source in by_type[fragment_type] and source in by_detector[detector], dataset_path
                    if source[0] == READOUT:
                        readout_seen.add(source)
                # Every source the type and subdetector maps name has its dataset.
                for sources in [*by_type.values(), *by_detector.values()]:
                    assert sources <= set(paths), group_name
            # Every readout source written has its geo ids, packed stream<<48|slot<<32|crate<<16|det.
            assert readout_seen <= set(geo)
            for source in readout_seen:
                assert all(g & 0xFFFF for g in geo[source]), "a geo id names its detector"
    assert records > 0
