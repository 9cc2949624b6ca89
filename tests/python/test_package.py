"""The `swdaq` Python package (crates/swdaq-py, built into .venv by scripts/test.sh) on HDF5
trigger-record files, and what `swdaq.open` does with any file: records, fragment headers and
trigger primitives equal what the Rust reader (`swdaq inspect --json`) reports, ADCs equal the
ADCs written, and `find_hits` runs swdaq's hit finding on numpy arrays. FRD and link files:
test_read_frd.py, test_read_link.py."""

import json
import struct
import subprocess
import sys

import h5py
import numpy as np
import pytest
import swdaq
from swdaq_paths import SWDAQ, ROOT, write_sample

COLLECTION_LINKS = (2, 3)  # sample records: channels 128.. are collection channels


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    return write_sample(out), np.load(out / "expected_adcs.npy")  # [record, link, frame, sample, channel]


def inspect(path, record=None):
    """`swdaq inspect --json` (its exit status is 1 for a file with problems)."""
    args = [SWDAQ, "inspect", "--json", str(path)] + (["--record", str(record)] if record else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True).stdout)


def test_records_and_fragment_headers_equal_the_rust_readers(sample):
    h5, _ = sample
    report = inspect(h5)
    with swdaq.open(h5) as f:
        assert isinstance(f, swdaq.RecordFile) and isinstance(f, swdaq.File)
        assert (f.format, f.left_open, f.header, f.problems) == (
            report["format"], report["left_open"], report["attributes"], report["problems"])
        assert len(f) == len(report["records"]) == 3
        for record, expected in zip(f, report["records"]):
            assert f"TriggerRecord{record.trigger_number:05d}.{record.sequence_number:04d}" == expected["name"]
            assert (record.trigger_timestamp, record.trigger_type, record.status_bits) == (
                expected["trigger_timestamp"], expected["trigger_type"], expected["status_bits"])
            assert record.complete and record.ok and record.problems == []
            assert [(x.source, x.fragment_type, x.window_begin, x.window_end, x.size, x.problems) for x in record.fragments] == [
                (e["source"], e["fragment_type"], e["window_begin"], e["window_end"], e["bytes"], e["errors"])
                for e in expected["fragments"]]
    with pytest.raises(ValueError, match="closed"):
        f.record_ids() and f[0]


def test_adcs_are_channels_by_samples_and_equal_what_was_written(sample):
    h5, expected = sample
    f = swdaq.open(h5)
    for r, record in enumerate(f):
        frames = inspect(h5, record.trigger_number)["records"][0]["fragments"]
        for link, fragment in enumerate(record.fragments[:4]):
            adcs = fragment.adcs()
            assert adcs.dtype == np.uint16 and adcs.shape == (64, expected.shape[2] * 64)
            np.testing.assert_array_equal(adcs, expected[r, link].reshape(-1, 64).T)
            stamps = fragment.timestamps()
            content = frames[link]["content"]["wib_eth_frames"]
            assert stamps[0] == content["first_timestamp"] == fragment.window_begin
            assert stamps[-64] == content["last_timestamp"] and np.all(np.diff(stamps) == 32)
    assert f[-1].trigger_number == 3 and f.record(2).trigger_number == 2
    with pytest.raises(IndexError):
        f.record(99)
    with pytest.raises(ValueError, match="no ADCs"):
        f[0].fragments[4].adcs()


def test_trigger_primitives_equal_the_rust_decoders(sample):
    h5, _ = sample
    record = swdaq.open(h5).record(1)
    tps = record.fragments[4].tps()
    assert tps.dtype == swdaq.TP_DTYPE and tps.dtype.itemsize == 24
    (expected,) = [x for x in inspect(h5, 1)["records"][0]["fragments"] if x["fragment_type"] == "Trigger_Primitive"]
    decoded = expected["content"]["trigger_primitives"]
    assert len(tps) == len(decoded) > 0
    for name in swdaq.TP_DTYPE.names:
        np.testing.assert_array_equal(tps[name], [tp[name] for tp in decoded], err_msg=name)
    with pytest.raises(ValueError, match="no trigger primitives"):
        record.fragments[0].tps()


def test_a_bad_fragment_is_listed_and_the_rest_is_read(sample, tmp_path):
    h5, expected = sample
    broken = tmp_path / "broken.hdf5"
    broken.write_bytes(h5.read_bytes())
    name = "TriggerRecord00002.0000/RawData/Detector_Readout_0x00000001_WIBEth"
    with h5py.File(broken, "r+") as f:
        data = f[name][()]
        del f[name]
        f[name] = np.full_like(data, 0x55)
    f = swdaq.open(broken)
    record = f.record(2)
    (problem,) = record.problems
    assert problem.startswith("fragment Detector_Readout_0x00000001_WIBEth: ") and "magic" in problem and not record.ok
    assert f.problems == inspect(broken)["problems"] and f.problems[0]["reason"] in problem
    assert [x.source_id for x in record.fragments if x.fragment_type == "WIBEth"] == [0, 2, 3]
    np.testing.assert_array_equal(record.fragments[1].adcs(), expected[1, 2].reshape(-1, 64).T)


def test_payloads_are_read_only_views_that_outlive_their_fragment(sample):
    h5, _ = sample
    with swdaq.open(h5) as f:
        fragment = f[0].fragments[0]
    payload = fragment.payload()
    assert payload.dtype == np.uint8 and payload.size == fragment.size - 72 and not payload.flags.writeable
    assert np.shares_memory(payload, fragment.payload()) and isinstance(payload.base, swdaq.Buffer)
    with pytest.raises(ValueError):
        payload[0] = 1
    first = bytes(payload[:16])
    del fragment
    assert bytes(payload[:16]) == first


def test_a_missing_or_foreign_file_is_an_error_not_a_crash(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.hdf5"):
        swdaq.open(tmp_path / "nothing.hdf5")
    junk = tmp_path / "junk.hdf5"
    junk.write_bytes(b"not hdf5" * 100)
    with pytest.raises(ValueError, match="junk.hdf5: no known data format"):
        swdaq.open(junk)
    with pytest.raises(ValueError, match="a directory"):
        swdaq.open(tmp_path)
    empty = tmp_path / "empty.raw"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="an empty file"):
        swdaq.open(empty)
    # The container SW ROD runs wrote before EventStorage (frame type "EVT"): refused in
    # swdaq inspect's words.
    swrod = tmp_path / "swrod_run000001_0000.raw"
    swrod.write_bytes(b"SWDAQRAW" + struct.pack("<IIII", 1, 64, 0x00455654, 4096) + bytes(40))
    with pytest.raises(ValueError, match="before they wrote ATLAS EventStorage"):
        swdaq.open(swrod)
    # HDF5's signature on garbage: taken for HDF5, refused by the HDF5 library.
    fake = tmp_path / "fake.hdf5"
    fake.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(600))
    with pytest.raises(OSError):
        swdaq.open(fake)


def pulses(channels=64, samples=2000, seed=1):
    """Pedestal 900 with Gaussian noise (sigma 3) and a 6-sample pulse every 200 samples on
    every channel, staggered by channel."""
    rng = np.random.default_rng(seed)
    adcs = rng.normal(900, 3, size=(channels, samples))
    shape = np.array([60, 120, 200, 150, 90, 10])
    for c in range(channels):
        for start in range(50 + c, samples - 10, 200):
            adcs[c, start : start + shape.size] += shape
    return np.clip(np.rint(adcs), 0, 16383).astype(np.uint16)


@pytest.mark.parametrize("algorithm", ["threshold", "protodune", "abs-running-sum"])
def test_find_hits_scalar_and_avx2_agree_bit_for_bit(algorithm):
    adcs = pulses()
    scalar = swdaq.find_hits(adcs, algorithm, implementation="scalar")
    try:
        avx2 = swdaq.find_hits(adcs, algorithm, implementation="avx2")
    except RuntimeError as e:
        pytest.skip(str(e))
    assert len(scalar) > 0
    np.testing.assert_array_equal(scalar, avx2)


def test_find_hits_finds_each_pulse_where_it_is():
    adcs = pulses()
    tps = swdaq.find_hits(adcs, settings={"threshold": 30}, first_timestamp=1000, channel_ids=list(range(100, 164)))
    expected = sorted((1000 + 32 * start, 100 + c) for c in range(64) for start in range(50 + c, 1990, 200))
    assert [(int(t), int(c)) for t, c in zip(tps["time_start"], tps["channel"])] == expected
    assert np.all(tps["samples_over_threshold"] == 5) and np.all(tps["samples_to_peak"] == 2)
    assert np.all(np.abs(tps["adc_peak"].astype(int) - 200) <= 12)
    # The integral is of pedestal-subtracted ADCs over threshold: 60 + 120 + 200 + 150 + 90.
    assert np.all(np.abs(tps["adc_integral"].astype(int) - 620) <= 30)


def test_find_hits_on_the_files_adcs_finds_the_recorded_track(sample):
    h5, _ = sample
    record = swdaq.open(h5).record(1)
    truth = record.fragments[4].tps()
    for link in COLLECTION_LINKS:
        fragment = record.fragments[link]
        found = swdaq.find_hits(fragment.adcs(), channel_ids=list(range(64 * link, 64 * link + 64)),
                                first_timestamp=int(fragment.timestamps()[0]))
        for tp in truth[truth["channel"] // 64 == link]:
            on_channel = found[found["channel"] == tp["channel"]]
            assert np.any(np.abs(on_channel["time_start"].astype(np.int64) - int(tp["time_start"])) <= 4 * 32), tp


def test_find_hits_refuses_bad_arguments_with_the_reason():
    adcs = pulses(channels=16, samples=100)
    with pytest.raises(ValueError, match="multiple of 16"):
        swdaq.find_hits(adcs[:10])
    with pytest.raises(ValueError, match="unknown field `thresh`"):
        swdaq.find_hits(adcs, settings={"thresh": 3})
    with pytest.raises(ValueError, match="unknown variant"):
        swdaq.find_hits(adcs, "magic")
    with pytest.raises(ValueError, match="threshold_sigmas"):
        swdaq.find_hits(adcs, {"algorithm": "protodune", "threshold_sigmas": -1.0})
    with pytest.raises(ValueError, match="channel ids"):
        swdaq.find_hits(adcs, channel_ids=[1, 2])
    with pytest.raises(TypeError):
        swdaq.find_hits(adcs.astype(np.float32))


def test_the_decode_benchmark_checks_both_decoders_agree(sample):
    h5, _ = sample
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "bench_python_decode.py"), str(h5), "1"],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    assert result["fragments"] == 12 and result["payload_mb"] == round(12 * 20 * 7200 / 1e6, 2)
    assert set(result["cpu_seconds"]) == set(result["wall_seconds"]) == {"swdaq", "numpy"}
