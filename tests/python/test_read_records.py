"""h5py reads a file written by `swdaq gen --records`, and the WIBEth ADCs decoded from it
equal those in the raw files the emulator wrote in the same run."""

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import read_records  # noqa: E402


def raw_frames(path: Path) -> np.ndarray:
    """Frames of a swdaq raw file: 64-byte header, then [u32 length, u32 reserved, frame]."""
    data = np.fromfile(path, dtype=np.uint8)
    assert bytes(data[:8]) == b"SWDAQRAW"
    frames, at = [], 64
    while at < data.size:
        length = int(data[at : at + 4].view("<u4")[0])
        frames.append(data[at + 8 : at + 8 + length])
        at += 8 + length
    return np.concatenate(frames)


def test_h5py_reads_what_swdaq_wrote(tmp_path):
    binary = os.environ["SWDAQ_BIN"]
    subprocess.run(
        [binary, "gen", "--seconds", "0.01", "--links", "2", "--records", "3", "--seed", "5", "--out", str(tmp_path)],
        check=True,
    )
    (h5,) = tmp_path.glob("*.hdf5")
    found = list(read_records.records(str(h5)))
    assert [name for name, _ in found] == [f"TriggerRecord{n:05d}.0000" for n in (1, 2, 3)]
    for link in (0, 1):
        expected = read_records.wibeth_adcs(raw_frames(tmp_path / f"link{link}.swraw"))
        name = f"Detector_Readout_0x{link:08x}_WIBEth"
        from_file = np.concatenate([read_records.wibeth_adcs(frags[name][1]) for _, frags in found])
        assert from_file.shape == (expected.shape[0] // 3 * 3, 64, 64)
        np.testing.assert_array_equal(from_file, expected[: from_file.shape[0]])
        # Realistic values: pedestals of collection (~900) and induction (~2350) channels.
        assert 500 < from_file.mean() < 2600
    header, payload = found[1][1]["Detector_Readout_0x00000000_WIBEth"]
    assert header["trigger_number"] == 2 and header["run_number"] == 1
    stamps = read_records.wibeth_timestamps(payload)
    assert stamps[0] == header["window_begin"] and np.all(np.diff(stamps) == 2048)
    with h5py.File(h5, "r") as f:
        assert f.attrs["run_number"] == 1 and f.attrs["record_type"] == "TriggerRecord"
