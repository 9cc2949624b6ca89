"""h5py reads files swdaq wrote, and the WIBEth ADCs decoded with numpy by
examples/read_records.py equal the ADCs swdaq put in."""

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import read_records  # noqa: E402
from swdaq_paths import write_sample  # noqa: E402


def test_decoded_adcs_equal_the_known_adcs(tmp_path):
    h5 = write_sample(tmp_path)
    expected = np.load(tmp_path / "expected_adcs.npy")  # [record, link, frame, sample, channel]
    found = list(read_records.records(str(h5)))
    assert [name for name, _ in found] == [f"TriggerRecord{n:05d}.0000" for n in (1, 2, 3)]
    for r, (_, fragments) in enumerate(found):
        for link in range(expected.shape[1]):
            header, payload = fragments[f"Detector_Readout_0x{link:08x}_WIBEth"]
            assert header["trigger_number"] == r + 1 and header["fragment_type"] == read_records.WIBETH_TYPE
            assert (header["source_subsystem"], header["source_id"]) == (1, link)
            np.testing.assert_array_equal(read_records.wibeth_adcs(payload), expected[r, link])
            stamps = read_records.wibeth_timestamps(payload)
            assert stamps[0] == header["window_begin"] and np.all(np.diff(stamps) == 2048)
    with h5py.File(h5, "r") as f:
        assert f.attrs["run_number"] == 1 and f.attrs["record_type"] == "TriggerRecord"
        assert f.attrs["filelayout_version"] == 6 and "closing_timestamp" in f.attrs
        header = read_records.as_bytes(f["TriggerRecord00002.0000/RawData/TR_Builder_0x00000000_TriggerRecordHeader"])
        assert header[:8].view("<u4").tolist() == [0x33334444, 4] and header[8:16].view("<u8")[0] == 2


def test_the_example_prints_records(tmp_path):
    h5 = write_sample(tmp_path, 1)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "read_records.py"), str(h5)], check=True, capture_output=True, text=True).stdout
    assert "TriggerRecord00001.0000" in out and "Detector_Readout_0x00000003_WIBEth" in out


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


@pytest.mark.skipif("SWDAQ_BIN" not in os.environ, reason="needs the swdaq binary (SWDAQ_BIN)")
def test_h5py_reads_what_swdaq_gen_wrote(tmp_path):
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
