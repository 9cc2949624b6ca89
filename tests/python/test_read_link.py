"""Link raw files (`.swraw`, what `swdaq gen` and recorded bursts write) read with the `swdaq`
package: frames -> ADCs. Every frame and what the continuity checks found in it equal
`swdaq inspect --json` of the same file, the records equal an independent numpy walk of the
file, the ADCs equal the numpy decoder of examples/read_records.py and the HDF5 records
`swdaq gen` packaged from the same frames; a copy with a gap and a cut last record reads as
far as inspect reads it and names the same frames."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import swdaq
from swdaq_paths import SWDAQ  # also puts examples/ on the path

import read_records  # noqa: E402

HEADER_BYTES, RECORD_HEADER_BYTES = 64, 8


def inspect(path: Path) -> dict:
    """`swdaq inspect --json` (its exit status is 1 for a file with problems)."""
    return json.loads(subprocess.run([SWDAQ, "inspect", "--json", str(path)], capture_output=True, text=True).stdout)


def gen(out: Path, *args: str) -> Path:
    subprocess.run([SWDAQ, "gen", "--links", "1", "--seed", "3", "--out", str(out), *args], check=True, capture_output=True)
    return out


def numpy_records(path: Path):
    """(offset, frame bytes) of each whole record, read with numpy alone: a 64-byte header
    starting `SWDAQRAW`, then records of a u32 length, 4 reserved bytes and the frame."""
    data = np.fromfile(path, dtype=np.uint8)
    assert bytes(data[:8]) == b"SWDAQRAW"
    at, records = HEADER_BYTES, []
    while at + RECORD_HEADER_BYTES <= data.size:
        length = int(data[at: at + 4].view("<u4")[0])
        if at + RECORD_HEADER_BYTES + length > data.size:
            break
        records.append((at, data[at + RECORD_HEADER_BYTES: at + RECORD_HEADER_BYTES + length]))
        at += RECORD_HEADER_BYTES + length
    return records


def assert_equals_inspect(f, report: dict):
    """The header, the frames, the checks and every flagged frame as inspect reports them."""
    assert (f.format, f.left_open) == (report["format"], report["left_open"])
    names = ("frame_format", "fragment_type", "frame_size", "source_id", "run_number", "created_unix_ns")
    assert f.header == {**{k: report[k] for k in names}, "first_timestamp": report["header_first_timestamp"]}
    assert f.checks == report["checks"] and len(f) == report["frames"]
    frames = list(f)
    assert sum(RECORD_HEADER_BYTES + x.size for x in frames) + HEADER_BYTES == report["bytes"]
    stamps = [x.timestamp for x in frames if x.timestamp is not None]
    assert (stamps[0], stamps[-1]) == (report["first_timestamp"], report["last_timestamp"])
    flagged = [{"frame": x.index, "offset": x.offset, "timestamp": x.timestamp, "findings": x.problems,
                "missing_before": x.missing_before} for x in frames if not x.ok]
    assert (len(flagged), flagged) == (report["flagged_frames"], report["flagged"])
    assert sum(x.missing_before for x in frames) == report["checks"]["missing_frames"]
    assert [p["reason"] for p in f.problems] == ([report["error"]] if report["error"] else [])


@pytest.fixture(scope="module")
def wibeth(tmp_path_factory):
    """0.01 s of one WIBEth link (306 frames) and two trigger records packaged from them."""
    return gen(tmp_path_factory.mktemp("wibeth"), "--seconds", "0.01", "--records", "2")


def test_wibeth_frames_equal_inspect_and_numpy(wibeth):
    path = wibeth / "link0.swraw"
    report = inspect(path)
    records = numpy_records(path)
    with swdaq.open(path) as f:
        assert isinstance(f, swdaq.LinkFile) and f.header["frame_format"] == "wibeth"
        assert f.format == report["format"] == "swdaq raw file of link records"
        assert_equals_inspect(f, report)
        assert f.problems == [] and report["flagged"] == [] and len(f) == len(records) == 306
        payload = np.concatenate([frame for _, frame in records])
        expected = read_records.wibeth_adcs(payload)  # [frame, sample, channel]
        firsts = read_records.wibeth_timestamps(payload)
        for frame, (offset, raw), adcs, first in zip(f, records, expected, firsts):
            assert (frame.offset, frame.size, frame.timestamp, frame.fragments) == (offset, raw.size, first, [frame])
            assert frame.ok and frame.problems == [] and frame.seq_id is not None and frame.header_error is False
            np.testing.assert_array_equal(frame.payload(), raw)
            np.testing.assert_array_equal(frame.adcs(), adcs.T)
            np.testing.assert_array_equal(frame.timestamps(), first + 32 * np.arange(64))
        whole = f.adcs()
        assert whole.dtype == np.uint16 and whole.shape == (64, 306 * 64)
        np.testing.assert_array_equal(whole, expected.reshape(-1, 64).T)
        np.testing.assert_array_equal(f.adcs(10, 20), whole[:, 640:1280])
        np.testing.assert_array_equal(f.adcs(-2), whole[:, -128:])
        np.testing.assert_array_equal(f.timestamps(5, 6), firsts[5] + 32 * np.arange(64))
        assert f.adcs(20, 10).shape == (64, 0)


def test_a_link_file_s_adcs_are_the_records_packaged_from_it(wibeth):
    (h5,) = wibeth.glob("*.hdf5")
    with swdaq.open(wibeth / "link0.swraw") as link, swdaq.open(h5) as records:
        starts = {frame.timestamp: frame.index for frame in link}
        assert isinstance(records, swdaq.RecordFile) and len(records) == 2
        for record in records:
            (fragment,) = [x for x in record.fragments if x.fragment_type == "WIBEth"]
            first = starts[fragment.window_begin]
            frames = fragment.adcs().shape[1] // 64
            np.testing.assert_array_equal(link.adcs(first, first + frames), fragment.adcs())
            np.testing.assert_array_equal(link.timestamps(first, first + frames), fragment.timestamps())


def test_a_gap_and_a_cut_record_read_as_far_as_inspect_and_name_the_same_frames(wibeth, tmp_path):
    records = numpy_records(wibeth / "link0.swraw")
    data = (wibeth / "link0.swraw").read_bytes()
    # Frames 100..104 never arrived, and the writer was killed inside the last record.
    damaged = data[: records[100][0]] + data[records[105][0]: len(data) - 100]
    path = tmp_path / "link0.swraw"
    path.write_bytes(damaged)
    report = inspect(path)
    with swdaq.open(path) as f:
        assert_equals_inspect(f, report)
        assert len(f) == 306 - 5 - 1
        after_gap = f[100]
        assert (after_gap.problems, after_gap.missing_before, after_gap.ok) == (["gap_before"], 5, False)
        assert after_gap.timestamp == f[99].timestamp + 6 * 2048
        ((problem),) = f.problems
        assert problem["frame"] == len(f) and problem["offset"] == len(damaged) - (len(data) - 100 - records[-1][0])
        assert "after 300 frames" in problem["reason"]
        views = [f[0].payload(), f[-1].payload()]
    # Views of one mapped file: the same buffer, alive after the file is closed.
    assert views[0].base is views[1].base and isinstance(views[0].base, swdaq.Buffer)
    assert not views[0].flags.writeable and views[1].size == 7200


def test_protowib_frames_are_256_channels_by_one_sample(tmp_path):
    out = gen(tmp_path, "--format", "protowib", "--seconds", "0.0005", "--records", "1")
    path = out / "link0.swraw"
    (h5,) = out.glob("*.hdf5")
    with swdaq.open(path) as f, swdaq.open(h5) as records:
        assert_equals_inspect(f, inspect(path))
        assert f.header["frame_format"] == "protowib" and len(f) == 1000
        assert f[7].adcs().shape == (256, 1) and f[7].timestamps()[0] == f[7].timestamp
        np.testing.assert_array_equal(f.adcs(7, 8), f[7].adcs())
        (fragment,) = [x for x in records[0].fragments if x.fragment_type == "ProtoWIB"]
        first = [x.timestamp for x in f].index(fragment.window_begin)
        np.testing.assert_array_equal(f.adcs(first, first + fragment.adcs().shape[1]), fragment.adcs())


def test_records_other_than_tpc_frames_are_read_not_decoded(tmp_path):
    out = gen(tmp_path, "--format", "fed", "--seconds", "0.001")
    path = out / "fed0.swraw"
    report = inspect(path)
    records = numpy_records(path)
    with swdaq.open(path) as f:
        assert f.header["frame_format"] is None and f.checks is None and report["checks"] is None
        assert len(f) == report["frames"] == len(records) > 0
        for frame, (offset, raw) in zip(f, records):
            assert frame.offset == offset and frame.timestamp is None and frame.ok
            np.testing.assert_array_equal(frame.payload(), raw)
            assert int(frame.payload().view("<u8")[0]) >> 60 == 0x5  # a FED header word
        with pytest.raises(ValueError, match="carries no ADCs"):
            f[0].adcs()
        with pytest.raises(ValueError, match="carries no ADCs"):
            f.adcs()
