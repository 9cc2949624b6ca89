"""ROI readout as a user reads it: `swdaq run` with `[readout.roi]` writes ROI fragments whose
regions the `swdaq` package gives as numpy (channels x samples, channel ids, first timestamp)
equal to what the Rust reader (`swdaq inspect --json`) lists and to the bytes of the field
table (swdaq-format/src/roi.rs) read with plain numpy; the summary's byte counts are the files'."""

import json
import subprocess

import numpy as np
import swdaq
from swdaq_paths import SWDAQ

CONFIG = """
[run]
duration_s = 1.5
metrics_addr = ""
[emulator]
links = 2
template_s = 0.05
[readout.roi]
enabled = true
"""


def regions_by_numpy(payload: bytes):
    """The payload's regions read straight from the field table, no swdaq code involved."""
    count, full = np.frombuffer(payload, "<u4", 1, 4)[0], np.frombuffer(payload, "<u8", 1, 8)[0]
    at, regions = 24, []
    for _ in range(count):
        first, = np.frombuffer(payload, "<u8", 1, at)
        group, channels, samples = (int(x) for x in np.frombuffer(payload, "<u4", 3, at + 8))
        ids = np.frombuffer(payload, "<u4", channels, at + 24)
        adcs = np.frombuffer(payload, "<u2", channels * samples, at + 24 + 4 * channels).reshape(channels, samples)
        regions.append((int(group), ids, int(first), adcs))
        at += -(-(24 + 4 * channels + 2 * channels * samples) // 8) * 8
    assert at == len(payload)
    return int(full), regions


def test_roi_regions_read_as_numpy_equal_the_rust_reader_and_the_field_table(tmp_path):
    config = tmp_path / "roi.toml"
    config.write_text(CONFIG)
    out = tmp_path / "data"
    run = subprocess.run([SWDAQ, "run", "--config", str(config), "--out", str(out), "--json"],
                         check=True, capture_output=True, text=True)
    summary = json.loads(run.stdout)["roi"]
    (h5,) = out.glob("*.hdf5")
    roi_bytes = full_bytes = checked = 0
    with swdaq.open(h5) as f:
        for record in f:
            listed = json.loads(subprocess.run([SWDAQ, "inspect", "--json", str(h5), "--record", str(record.trigger_number)],
                                               check=True, capture_output=True, text=True).stdout)
            fragments = listed["records"][0]["fragments"]
            for fragment, expected in zip(record.fragments, fragments):
                assert fragment.fragment_type == expected["fragment_type"]
                if fragment.fragment_type != "ROI":
                    continue
                content = expected["content"]["regions"]
                full, by_numpy = regions_by_numpy(fragment.payload())
                assert fragment.full_window_bytes == full == content["full_window_bytes"]
                roi_bytes += fragment.size
                full_bytes += full
                regions = fragment.regions()
                assert len(regions) == len(by_numpy) == len(content["regions"])
                for region, (group, ids, first, adcs), rust in zip(regions, by_numpy, content["regions"]):
                    assert region.channel_group == group == rust["channel_group"]
                    assert region.first_timestamp == first == rust["first_timestamp"]
                    assert region.samples == adcs.shape[1] == rust["samples"]
                    np.testing.assert_array_equal(region.channel_ids(), ids)
                    assert list(ids) == rust["channel_ids"]
                    got = region.adcs()
                    assert got.dtype == np.uint16 and got.shape == (len(ids), region.samples)
                    assert got.nbytes == rust["adc_bytes"]
                    np.testing.assert_array_equal(got, adcs)
                    stamps = region.timestamps()
                    assert stamps[0] == first and np.all(np.diff(stamps) == 32)
                    checked += 1
    assert checked > 0
    assert (summary["bytes"], summary["full_window_bytes"]) == (roi_bytes, full_bytes)
    assert 0 < summary["bytes_ratio"] < 0.25
