"""The event builder's FRD files read with the `swdaq` package, from one short run of the
shipped configuration with faults: what it reads matches the emulator's truth (every event
once, every FED except those the readout units rejected, a stopped FED absent from its stop
on), equals `swdaq inspect --json` item by item and an independent numpy reader field by
field and byte by byte; damaged copies read as far as inspect reads them, with the same
problems; payloads are views of the mapped file that outlive it."""

import gc
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import swdaq
from swdaq_paths import ROOT, SWDAQ

EVENTS = 1500
STOPPED_FED, STOPPED_FROM = 202, 1000
ALL_FEDS = [100, 101, 102, 103, 200, 201, 202, 203]

# The CMS layout, read with numpy alone (no swdaq code), as CMSSW's FRDEventMessage.h
# (version 6), FRDFileHeader.h (RAW_0002) and FEDHeader/FEDTrailer describe it.
FILE_HEADER = np.dtype([("id", "S4"), ("version", "S4"), ("header_size", "<u2"), ("data_type", "<u2"),
                        ("event_count", "<u4"), ("run", "<u4"), ("lumi", "<u4"), ("file_size", "<u8")])
EVENT_HEADER = np.dtype([("version", "<u2"), ("flags", "<u2"), ("run", "<u4"), ("lumi", "<u4"),
                         ("event", "<u4"), ("event_size", "<u4"), ("crc32c", "<u4")])


def numpy_feds(payload: np.ndarray, offset: int):
    """(FED id, level-1 id, bunch crossing, file offset, payload bytes) of each FED fragment,
    found backwards from the last trailer as CMS reads them; returned in file order."""
    words = payload.view("<u8")
    end, feds = len(words), []
    while end > 0:
        trailer = int(words[end - 1])
        assert trailer >> 60 == 0xA, "not a FED trailer"
        length = (trailer >> 32) & 0xFFFFFF
        assert 2 <= length <= end, "bad FED length"
        header = int(words[end - length])
        assert header >> 60 == 0x5, "not a FED header"
        start = end - length
        feds.append(((header >> 8) & 0xFFF, (header >> 32) & 0xFFFFFF, (header >> 20) & 0xFFF,
                     offset + 8 * start, payload[8 * start + 8: 8 * end - 8]))
        end = start
    return feds[::-1]


def numpy_events(path: Path):
    """The file header, then (offset, event header, FEDs) of each event of a good file."""
    data = np.fromfile(path, dtype=np.uint8)
    header = data[: FILE_HEADER.itemsize].view(FILE_HEADER)[0]
    assert (header["id"], header["version"], int(header["file_size"])) == (b"RAW_", b"0002", len(data))
    at, events = int(header["header_size"]), []
    for _ in range(int(header["event_count"])):
        event = data[at: at + EVENT_HEADER.itemsize].view(EVENT_HEADER)[0]
        assert event["version"] == 6
        start = at + EVENT_HEADER.itemsize
        events.append((at, event, numpy_feds(data[start: start + int(event["event_size"])], start)))
        at = start + int(event["event_size"])
    assert at == len(data), "bytes after the last event"
    return header, events


def inspect(path: Path, event=None) -> dict:
    """`swdaq inspect --json` (its exit status is 1 for a file with problems)."""
    args = [SWDAQ, "inspect", "--json", str(path)] + (["--record", str(event)] if event is not None else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True).stdout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The shipped example configuration, not paced, for EVENTS events with faults."""
    out = tmp_path_factory.mktemp("evb")
    text = (ROOT / "configs" / "evb.toml").read_text()
    changes = {
        'output_dir = "/dev/shm/swdaq-evb"': f'output_dir = "{out}"',
        "[evb]\n": f"[evb]\nmax_events = {EVENTS}\n",
        "paced = true": "paced = false",
        'metrics_addr = "127.0.0.1:9464"': 'metrics_addr = ""',
        "missing = 0.0": "missing = 0.01",
        "bad_crc = 0.0": "bad_crc = 0.01",
        "stops = []": f"stops = [[{STOPPED_FED}, {STOPPED_FROM}]]",
    }
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    config = out / "evb.toml"
    config.write_text(text)
    done = subprocess.run([SWDAQ, "run", "--config", str(config), "--duration", "0", "--json"],
                          check=True, capture_output=True, text=True)
    files = sorted(out.glob("bu*/run*/*.raw"))
    assert len(files) >= EVENTS // 100  # 100 events a file, each builder unit its own
    return json.loads(done.stdout), files


def test_files_match_the_emulator_truth(run):
    summary, files = run
    assert summary["built"] == EVENTS and summary["lost"] == 0
    seen = {}
    for raw in files:
        with swdaq.open(raw) as f:
            assert isinstance(f, swdaq.FrdFile) and f.header["run"] == 1 and f.problems == []
            for event in f:
                assert event.ok and event.number not in seen, f"event {event.number} written twice"
                assert all(fed.l1_id == event.number and fed.crc_ok for fed in event.fragments)
                seen[event.number] = sorted(fed.source_id for fed in event.fragments)
                # An event lacking a FED says so in its own header.
                assert event.incomplete == (len(event.fragments) < len(ALL_FEDS)), event.number
    assert sorted(seen) == list(range(1, EVENTS + 1))
    lacking = sum(len(feds) < len(ALL_FEDS) for feds in seen.values())
    assert lacking > 0 and summary["incomplete"] == lacking
    left_out = sum(len(ALL_FEDS) - len(feds) for feds in seen.values())
    assert left_out == sum(summary["fed_failures"].values())
    assert summary["fed_failures"]["missing"] >= EVENTS - STOPPED_FROM + 1
    assert summary["fed_failures"]["bad_crc"] > 0
    assert all(STOPPED_FED not in seen[n] for n in range(STOPPED_FROM, EVENTS + 1))


def assert_equals_inspect(f, report: dict):
    """The file, every event and every FED fragment as `swdaq inspect --json` lists them."""
    assert (f.format, f.left_open, f.header, f.problems) == (
        report["format"], report["left_open"], report["header"], report["problems"])
    assert len(f) == len(report["events"])
    for event, expected in zip(f, report["events"]):
        feds = event.fragments
        assert {
            "offset": event.offset, "event": event.number, "lumi": event.lumi, "incomplete": event.incomplete,
            "bytes": event.size, "crc_ok": event.crc_ok, "fed_count": len(feds),
            "bad_feds": sum(not fed.ok for fed in feds),
            "feds_with_other_l1_id": sum(fed.l1_id != event.number & 0xFFFFFF for fed in feds),
            "fed_error": event.fed_error, "feds": [],
        } == expected
        reasons = [p["reason"] for p in report["problems"] if p["offset"] == event.offset]
        assert event.problems == reasons and event.ok == (not reasons and not event.fed_error and not expected["bad_feds"])


def assert_feds_equal_inspect(path: Path, event):
    (expected,) = [e for e in inspect(path, event.number)["events"] if e["offset"] == event.offset]
    assert [{"source_id": x.source_id, "l1_id": x.l1_id, "bx_id": x.bx_id, "bytes": x.size, "crc_ok": x.crc_ok,
             "detector": detector(x), "detector_error": None}
            for x in event.fragments] == expected["feds"]


def detector(fed):
    """A detector payload's words as inspect lists them; None for an emulated FED's payload."""
    payload = fed.detector_payload()
    if payload is None:
        return None
    return {"payload_bytes": len(payload), "timestamp": fed.detector_timestamp, "flags": fed.detector_flags}


def test_every_event_and_fed_equals_swdaq_inspect(run):
    _, files = run
    for raw in files:
        with swdaq.open(raw) as f:
            assert_equals_inspect(f, inspect(raw))
    with swdaq.open(files[0]) as f:
        for event in (f[0], f[len(f) // 2], f[-1]):
            assert_feds_equal_inspect(files[0], event)
        assert f.event(f[-1].number).offset == f[-1].offset
        with pytest.raises(IndexError):
            f.event(10**9)


def test_every_field_and_byte_equals_an_independent_numpy_reader(run):
    _, files = run
    for raw in files:
        header, events = numpy_events(raw)
        with swdaq.open(raw) as f:
            assert f.header == {k: int(header[k]) for k in ("run", "lumi", "event_count", "file_size")}
            assert len(f) == len(events)
            for event, (offset, h, feds) in zip(f, events):
                assert (event.offset, event.number, event.run, event.lumi, event.flags, event.size, event.crc32c) == (
                    offset, h["event"], h["run"], h["lumi"], h["flags"], h["event_size"], h["crc32c"])
                assert [(x.source_id, x.l1_id, x.bx_id, x.offset) for x in event.fragments] == [fed[:4] for fed in feds]
                for fragment, fed in zip(event.fragments, feds):
                    np.testing.assert_array_equal(fragment.payload(), fed[4])


def damaged_copies(raw: Path, tmp_path: Path):
    """The file with a byte of its 40th event's header flipped, cut inside its last event,
    and with its header zeroed as a killed writer leaves it (named .tmp)."""
    data = bytearray(raw.read_bytes())
    _, events = numpy_events(raw)
    flipped = bytearray(data)
    flipped[events[40][0] + 17] ^= 0x40  # the event size's second byte
    yield tmp_path / "flipped.raw", flipped, 1
    yield tmp_path / "cut.raw", data[: events[-1][0] + 100], 1
    zeroed = bytearray(data)
    zeroed[:32] = bytes(32)
    yield tmp_path / "run000001_ls0001_index000000.raw.tmp", zeroed, 0


def test_a_damaged_file_reads_as_far_as_inspect_with_the_same_problems(run, tmp_path):
    _, files = run
    good = [(e.offset, e.number) for e in swdaq.open(files[0])]
    for path, data, lost in damaged_copies(files[0], tmp_path):
        path.write_bytes(bytes(data))
        report = inspect(path)
        with swdaq.open(path) as f:
            assert_equals_inspect(f, report)
            assert f.problems, path.name
            intact = [(e.offset, e.number) for e in f if e.crc_ok]
            # Every event but the damaged one is read, and its FEDs with it.
            assert len(set(intact) & set(good)) == len(good) - lost, path.name
            assert all(x.crc_ok for e in f if e.crc_ok for x in e.fragments)
            if path.suffix == ".tmp":
                assert f.header is None and f.left_open == ".tmp"
                assert f.format == "CMS FRD file with a damaged or unwritten RAW_0002 header"


def test_payloads_are_read_only_views_of_the_mapped_file_that_outlive_it(run, tmp_path):
    _, files = run
    copy = tmp_path / "copy.raw"
    shutil.copy(files[0], copy)
    f = swdaq.open(copy)
    event = f[3]
    whole = event.payload()
    feds = [x.payload() for x in event.fragments]
    expected = [bytes(x) for x in feds]
    assert all(np.shares_memory(whole, x) for x in feds) and isinstance(whole.base, swdaq.Buffer)
    with pytest.raises(ValueError, match="read-only"):
        whole[0] = 1
    with pytest.raises(ValueError):
        whole.setflags(write=True)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        len(f)
    del f, event
    gc.collect()
    assert [bytes(x) for x in feds] == expected and whole.sum() > 0
