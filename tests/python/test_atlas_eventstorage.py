"""The SW ROD run's files read as ATLAS's software reads them, written from ATLAS's code, not
from swdaq's layout modules:

- EventStorage (file format version 6): tdaq-common EventStorage/EventStorageRecords.h (record
  markers and structs; public copy: Ish-D/AtlEventProcess include/EventStorage/, 5a5a72d), the
  writer's record order, space padding and counters from athena's
  Event/ByteStreamCnvSvcLegacy/src/offline_EventStorage/v5_DataWriter.cxx (data block number =
  events in the sequence + 1, data in MB rounded, status 1 on a sequence's last file, metadata
  GUID=, Stream=, Project=, LumiBlock=), file names from daq::RawFileName (RawFileName.h: run 8
  digits, luminosity block 4, file number 4, .writing/.data). After ATLAS's metadata strings,
  swdaq's provenance (issue #38), each string `KEY=value` with one `=` as athena's MetaReader.py
  splits it (`k, v = md.split('=')`; `%` and `=` in a value as %25 and %3D), equal to what the
  run registry records of the run.
- eformat v5: eformat/write/FullEventFragment.h (the specific header words m_node[2].base[0..13]
  and the four counted lists), eformat/write/ROBFragment.h (7-word ROB header, 9-word ROD
  header, 3-word ROD trailer), eformat/Version.h (0x05000000, ROD 0x03010000), eformat/Status.h
  (DUMMY_FRAGMENT), eformat/StreamTag.h (null-terminated, null-padded strings).

No ATLAS reader is on PyPI (no eformat or EventStorage package in its index: uproot reads ROOT,
not bytestream), so this reader is the independent one. It walks every file of short
`swdaq run --config configs/swrod.toml` runs, clean and with faults, and checks every field,
size, version, count and cross-reference; and it writes files in ATLAS's form (as the writers
above write them) for `swdaq inspect` to read."""

import json
import os
import re
import struct
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from swdaq_paths import provenance_on_record

ROOT = Path(__file__).resolve().parents[2]
SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))

# EventStorageRecords.h
FILE_START_MARKER = 0x1234AAAA
RUN_PARAMETERS_MARKER = 0x1234BBBB
EVENT_RECORD_MARKER = 0x1234CCCC
STRING_SECTION_MARKER = 0x1234AABB
FREE_STRINGS_MARKER = 0x1234AABC
FILE_END_MARKER = 0x1234DDDD
FILE_END_MARKER_LAST = 0x1234EEEE
FILE_FORMAT_VERSION = 6
# eformat
FULL_EVENT, ROB, ROD = 0xAA1234AA, 0xDD1234DD, 0xEE1234EE
DEFAULT_VERSION, DEFAULT_ROD_VERSION = 0x05000000, 0x03010000
DUMMY_FRAGMENT = 0x20
NAME = re.compile(r"^(?P<project>[^.]+)\.(?P<run>\d{8})\.(?P<stype>[^._]+)_(?P<sname>[^.]+)\.daq\.RAW\._lb(?P<lb>\d{4})\._(?P<app>[^.]+)\._(?P<seq>\d{4})\.(?P<ext>data|writing)$")

PROVENANCE = ("version", "git_commit", "build_profile", "build_flags", "run_registry", "run_type")
L1AS = 6000
ACCEPT_EVERY = 3
LB_L1AS = 1000
FIRST_ROB = 0x710000
ROBS = 4


def words(b: bytes) -> np.ndarray:
    assert len(b) % 4 == 0, len(b)
    return np.frombuffer(b, dtype="<u4")


class Reader:
    """A cursor over a file's bytes, reading little-endian words and padded strings."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.data, self.at)
        self.at += 4
        return v

    def string(self) -> str:
        n = self.u32()
        s = self.data[self.at : self.at + n].decode()
        self.at += (n + 3) // 4 * 4
        return s


def read_eventstorage(path: Path) -> dict:
    """Head, events (block number, bytes) and end record of an EventStorage file."""
    data = path.read_bytes()
    r = Reader(data)
    start = [r.u32() for _ in range(8)]
    assert start[:3] == [FILE_START_MARKER, 8, FILE_FORMAT_VERSION], start
    assert r.u32() == STRING_SECTION_MARKER
    app, core = r.string(), r.string()
    metadata = []
    if struct.unpack_from("<I", data, r.at)[0] == FREE_STRINGS_MARKER:
        r.u32()
        metadata = [r.string() for _ in range(r.u32())]
    run = [r.u32() for _ in range(12)]
    assert run[:2] == [RUN_PARAMETERS_MARKER, 12], run
    events, end = [], None
    while r.at < len(data):
        marker = r.u32()
        if marker == EVENT_RECORD_MARKER:
            assert end is None, "an event after the end record"
            size, number, block = r.u32(), r.u32(), r.u32()
            assert size == 4
            events.append((number, data[r.at : r.at + block]))
            r.at += block
        else:
            assert marker == FILE_END_MARKER, hex(marker)
            rest = [r.u32() for _ in range(9)]
            assert rest[0] == 10 and rest[8] == FILE_END_MARKER_LAST, rest
            end = dict(zip(["date", "time", "events_in_file", "data_in_file", "events_in_run", "data_in_run", "status"], rest[1:8]))
    assert r.at == len(data) and end is not None
    return {
        "file_number": start[3], "date": start[4], "time": start[5], "size_limit_mb": start[7],
        "app": app, "core": core,
        "metadata": dict(m.split("=", 1) for m in metadata), "metadata_order": [m.split("=", 1)[0] for m in metadata],
        "metadata_strings": metadata,
        "run_number": run[2], "rec_enable": run[4], "detector_mask": run[6:10],
        "events": events, "end": end,
    }


def unescape(value: str) -> str:
    """A provenance value as written: %25 and %3D stand for % and =."""
    return re.sub("%(25|3D)", lambda m: {"25": "%", "3D": "="}[m[1]], value)


def stream_tags(b: bytes) -> list:
    """StreamTag.h: null-terminated strings, null padding to whole words; a tag is its name,
    type and obeys-lumiblock flag."""
    fields = b.rstrip(b"\0").split(b"\0") if b.strip(b"\0") else []
    assert len(fields) % 3 == 0, fields
    return [(fields[i].decode(), fields[i + 1].decode(), fields[i + 2] == b"1") for i in range(0, len(fields), 3)]


def parse_event(b: bytes) -> dict:
    """A full event, every ROB and ROD checked as eformat's check_tree would: markers, sizes,
    one version throughout."""
    w = words(b)
    assert w[0] == FULL_EVENT and w[1] == len(w), (hex(w[0]), w[1], len(w))
    header_size, version, nstatus = int(w[2]), int(w[3]), int(w[5])
    assert version == DEFAULT_VERSION, hex(version)
    s = 6 + nstatus
    spec = w[s : s + 14]
    assert spec[0] == 0 and spec[11] == 0, "no checksum, uncompressed"
    at = s + 13
    lists = []
    for _ in range(4):
        n = int(w[at])
        lists.append(w[at + 1 : at + 1 + n])
        at += 1 + n
    assert at == header_size, (at, header_size)
    payload = w[header_size:]
    assert spec[12] in (0, len(payload)), "uncompressed payload size"
    robs, i = [], 0
    while i < len(payload):
        rob = payload[i : i + int(payload[i + 1])]
        assert rob[0] == ROB and len(rob) == payload[i + 1]
        n = int(rob[5])
        assert rob[2] == 7 + n and rob[3] == DEFAULT_VERSION and rob[6 + n] == 0, "ROB header"
        rod = rob[7 + n :]
        assert rod[0] == ROD and rod[1] == 9 and rod[2] >> 16 == DEFAULT_ROD_VERSION >> 16, "ROD header"
        rod_nstatus, rod_ndata, position = (int(x) for x in rod[-3:])
        assert rod_nstatus + rod_ndata + 12 == len(rod) and position in (0, 1), "ROD trailer"
        # ROD status words before the data (position 0) or after it (1).
        first_data = 9 + (rod_nstatus if position == 0 else 0)
        robs.append({
            "source": int(rob[4]), "status": [int(x) for x in rob[6 : 6 + n]],
            "rod_source": int(rod[3]), "run": int(rod[4]), "l1_id": int(rod[5]), "bc_id": int(rod[6]),
            "trigger_type": int(rod[7]), "ndata": rod_ndata,
            "data": rod[first_data : first_data + rod_ndata].tobytes(),
        })
        i += len(rob)
    assert i == len(payload)
    return {
        "status": [int(x) for x in w[6:s]],
        "global_id": int(spec[3]) | int(spec[4]) << 32, "run_type": int(spec[5]), "run": int(spec[6]),
        "lumi_block": int(spec[7]), "l1_id": int(spec[8]), "bc_id": int(spec[9]), "trigger_type": int(spec[10]),
        "time": (int(spec[1]), int(spec[2])),
        "l1_info": lists[0], "l2_info": lists[1], "hlt_info": lists[2],
        "stream_tags": stream_tags(lists[3].tobytes()), "robs": robs,
    }


def megabytes(n: int) -> int:
    """v5_DataWriter.cxx: static_cast<unsigned int>(MB + 0.5)."""
    return int(n / (1024 * 1024) + 0.5)


def run_swrod(tmp: Path, extra: dict, faults: str = "") -> dict:
    """A short `swdaq run --config configs/swrod.toml`, unpaced, its keys replaced."""
    text = (ROOT / "configs" / "swrod.toml").read_text()
    keys = {
        "duration_s": "0.0", "metrics_addr": '""', "output_dir": f'"{tmp / "out"}"',
        "l1a_rate_hz": "0.0", "max_l1as": str(L1AS), "hlt_accept_every": str(ACCEPT_EVERY),
        "lumi_block_l1as": str(LB_L1AS), "max_file_mb": "1", **extra,
    }
    for key, value in keys.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n == 1, key
    if faults:
        text = text.replace("[swrod.felix.faults]\n", "[swrod.felix.faults]\n" + faults, 1)
        for key in ("missing_chunk", "truncated_chunk", "sequence_gap", "l1id_out_of_order", "dead_elinks"):
            text = re.sub(rf"(?m)^{key} = (0\.0|\[\])$", "", text)
    config = tmp / "swrod.toml"
    config.write_text(text)
    done = subprocess.run([SWDAQ, "run", "--config", str(config), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_run(out: Path, summary: dict) -> dict:
    """Every file and event of a run; returns what the reader found."""
    files = sorted(out.glob("*.data"))
    assert not list(out.glob("*.writing"))
    assert {str(f) for f in files} == {f["path"] for f in summary["files"]}
    sequences = defaultdict(list)
    found = {"events": 0, "incomplete": 0, "missing_robs": 0, "global_ids": [], "lumi_blocks": set()}
    for path in files:
        m = NAME.match(path.name)
        assert m, path.name
        f = read_eventstorage(path)
        assert f["core"] == path.name.rsplit("._", 1)[0]
        assert f["app"] == m["app"] == "SFO-1"
        assert int(m["run"]) == f["run_number"] and f["rec_enable"] == 1
        assert int(m["seq"]) == f["file_number"]
        lb = int(m["lb"])
        md = f["metadata"]
        assert f["metadata_order"] == ["GUID", "Stream", "Project", "LumiBlock"] + [f"swdaq_{p}" for p in PROVENANCE]
        assert all(m.count("=") == 1 for m in f["metadata_strings"]), f["metadata_strings"]
        on_record = provenance_on_record(out / "swdaq-runs.sqlite", f["run_number"])
        assert {p: unescape(md[f"swdaq_{p}"]) for p in PROVENANCE} == on_record
        assert re.fullmatch(r"[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}", md["GUID"])
        assert md["Stream"] == f"{m['stype']}_{m['sname']}" == "physics_Main"
        assert md["Project"] == m["project"] == "data_test"
        assert int(md["LumiBlock"]) == lb
        assert f["size_limit_mb"] == 1 and path.stat().st_size <= 1 << 20
        data = 0
        for number, block in f["events"]:
            e = parse_event(block)
            data += len(block)
            assert e["run"] == f["run_number"] and e["run_type"] == 0
            assert e["lumi_block"] == lb == 1 + (e["global_id"] - 1) // LB_L1AS
            assert e["stream_tags"] == [("Main", "physics", True)]
            assert len(e["hlt_info"]) > 0 and e["hlt_info"][0] & 1
            assert len(e["l2_info"]) == 0
            tbp, tap, tav = np.split(e["l1_info"], 3)
            assert tav.any() and (tbp == tap).all() and (tap == tav).all(), "TBP, TAP, TAV"
            assert e["time"][0] > 1_600_000_000
            sources = [r["source"] for r in e["robs"]]
            assert sources == [FIRST_ROB + i for i in range(ROBS)], [hex(s) for s in sources]
            incomplete = False
            for r in e["robs"]:
                assert r["rod_source"] == r["source"] and r["run"] == e["run"]
                assert r["l1_id"] == e["l1_id"] and r["trigger_type"] == e["trigger_type"]
                first = r["status"][0] if r["status"] else 0
                if first & DUMMY_FRAGMENT:
                    assert r["ndata"] == 0, "a stand-in ROB has no data"
                    found["missing_robs"] += 1
                    incomplete = True
                else:
                    assert r["bc_id"] == e["bc_id"]
                    # SW ROD specific status bit 16: e-links missing, named in the words after.
                    if first & 1 << 16:
                        assert any(r["status"][1:]), r["status"]
                        incomplete = True
            found["incomplete"] += incomplete
            found["global_ids"].append(e["global_id"])
            sequences[lb].append((f["file_number"], number, f["end"]))
        end = f["end"]
        assert end["events_in_file"] == len(f["events"])
        assert end["data_in_file"] == megabytes(data)
        found["events"] += len(f["events"])
        found["lumi_blocks"].add(lb)
        sequences[lb].append((f["file_number"], None, end))
    # Each luminosity block's files: numbered from 1, block numbers from 1 without a gap over
    # the sequence, each end record's sequence count up to that file, the last one says so.
    for lb, items in sequences.items():
        numbers = [n for _, n, _ in sorted(items, key=lambda x: (x[0], x[1] is None, x[1] or 0)) if n is not None]
        assert numbers == list(range(1, len(numbers) + 1)), lb
        ends = {fn: end for fn, n, end in items if n is None}
        assert sorted(ends) == list(range(1, len(ends) + 1))
        counted = 0
        for fn in sorted(ends):
            counted += ends[fn]["events_in_file"]
            assert ends[fn]["events_in_run"] == counted
            assert ends[fn]["status"] == (fn == len(ends))
    assert len(set(found["global_ids"])) == len(found["global_ids"])
    return found


def test_a_clean_run_is_what_atlas_reads(tmp_path):
    summary = run_swrod(tmp_path, {})
    found = check_run(tmp_path / "out", summary)
    stored = -(-L1AS // ACCEPT_EVERY)
    assert found["events"] == summary["stored_events"] == stored
    assert sorted(found["global_ids"]) == list(range(1, L1AS + 1, ACCEPT_EVERY))
    assert found["lumi_blocks"] == set(range(1, L1AS // LB_L1AS + 1))
    assert found["incomplete"] == summary["stored_incomplete_events"] == 0
    assert summary["hlt"]["complete_events"] == L1AS


def test_faults_and_missing_robs_are_where_the_summary_says(tmp_path):
    faults = "missing_chunk = 0.002\ntruncated_chunk = 0.002\nsequence_gap = 0.002\nl1id_out_of_order = 0.002\ndead_elinks = [{ elink = 3, after_l1as = 4000 }]\n"
    # A request store of 64 fragments: the unpaced cards run ahead of the HLT, whose late
    # requests are answered gone and stored as stand-in ROBs.
    summary = run_swrod(tmp_path, {"request_store_fragments": "64"}, faults)
    found = check_run(tmp_path / "out", summary)
    assert found["events"] == summary["stored_events"]
    assert found["incomplete"] == summary["stored_incomplete_events"] > 0
    assert found["missing_robs"] > 0, "no ROB went missing: the stand-ins were not exercised"
    assert summary["hlt"]["incomplete_events"] > 0


# --- The reading direction: files in ATLAS's form, written as its writers write them. ---


def pad(b: bytes) -> bytes:
    """v5_DataWriter.cxx file_record(): strings padded with spaces to whole words."""
    return b + b" " * (-len(b) % 4)


def string_record(s: str) -> bytes:
    return struct.pack("<I", len(s)) + pad(s.encode())


def eformat_rob(source: int, status: list, run: int, l1_id: int, bc_id: int, data: list) -> bytes:
    """ROBFragment.h: ROB header (marker, size, header size 7 + n, version, source, n, status,
    checksum type), ROD header (9 words), data, ROD trailer (0 status words, n data, status
    after the data)."""
    rod = [ROD, 9, DEFAULT_ROD_VERSION, source, run & 0x7FFFFFFF, l1_id, bc_id, 0x81, 0] + data + [0, len(data), 1]
    header = [ROB, 0, 7 + len(status), DEFAULT_VERSION, source, len(status), *status, 0]
    header[1] = len(header) + len(rod)
    return np.array(header + rod, dtype="<u4").tobytes()


def eformat_event(gid: int, run: int, lb: int, l1_id: int, robs: list, tags: bytes) -> bytes:
    """write/FullEventFragment.h: generic header, one status word, m_node[2] (checksum type,
    BC time, global id low/high, run type, run, lumi block, L1 ID, BCID, L1 type, compression,
    uncompressed payload size, L1 info count), L1 info, L2 count, HLT count + info, stream
    tag count + words."""
    payload = b"".join(robs)
    tag_words = list(np.frombuffer(tags + b"\0" * (-len(tags) % 4), dtype="<u4"))
    spec = [0, 1_700_000_000, 5, gid & 0xFFFFFFFF, gid >> 32, 0, run, lb, l1_id, 17, 0x81, 0, len(payload) // 4, 3, 1, 1, 1, 0, 1, 1, len(tag_words), *tag_words]
    header = [FULL_EVENT, 0, 0, DEFAULT_VERSION, 0, 1, 0, *spec]
    header[2] = len(header)
    header[1] = len(header) + len(payload) // 4
    return np.array(header, dtype="<u4").tobytes() + payload


def atlas_file(path: Path, run: int, lb: int, events: list) -> None:
    """v5_DataWriter.cxx openNextFile(), putData(), closeFile(), with version 6's run
    parameters record (EventStorageRecords.h: detector mask in two 64-bit halves)."""
    core = path.name.rsplit("._", 1)[0]
    out = struct.pack("<8I", FILE_START_MARKER, 8, FILE_FORMAT_VERSION, 1, 1012025, 120000, 0, 1000)
    out += struct.pack("<I", STRING_SECTION_MARKER) + string_record("SFO-2") + string_record(core)
    metadata = ["GUID=1B2C3D4E-5F60-4718-8A9B-0C1D2E3F4A5B", "Stream=physics_Main", "Project=data25_13p6TeV", f"LumiBlock={lb}"]
    out += struct.pack("<II", FREE_STRINGS_MARKER, len(metadata)) + b"".join(string_record(m) for m in metadata)
    out += struct.pack("<12I", RUN_PARAMETERS_MARKER, 12, run, 0, 1, 0, 0xFFFFFFFF, 0x7, 0, 0, 1, 6800)
    data = 0
    for number, event in enumerate(events, 1):
        out += struct.pack("<4I", EVENT_RECORD_MARKER, 4, number, len(event)) + event
        data += len(event)
    out += struct.pack("<10I", FILE_END_MARKER, 10, 1012025, 120500, len(events), megabytes(data), len(events), megabytes(data), 1, FILE_END_MARKER_LAST)
    path.write_bytes(out)


def test_swdaq_inspect_reads_a_file_in_atlas_form(tmp_path):
    run, lb = 512_345, 42
    tags = b"Main\0physics\x001\0"
    events = []
    for i in range(5):
        l1_id = 0x0300_0000 + i
        robs = [eformat_rob(0x420010 + k, [0], run, l1_id, 17, [0xCAFE0000 + k] * (3 + k)) for k in range(3)]
        if i == 2:
            # The event builder could not collect ROB 0x420012: a stand-in that says so.
            robs[2] = eformat_rob(0x420012, [DUMMY_FRAGMENT | 0x2 << 16], run, l1_id, 17, [])
        events.append(eformat_event(9_000_000_000 + i, run, lb, l1_id, robs, tags))
    name = f"data25_13p6TeV.{run:08d}.physics_Main.daq.RAW._lb{lb:04d}._SFO-2._0001.data"
    path = tmp_path / name
    atlas_file(path, run, lb, events)
    # The reader of this file agrees with the writer above.
    f = read_eventstorage(path)
    assert [parse_event(b)["global_id"] for _, b in f["events"]] == [9_000_000_000 + i for i in range(5)]

    done = subprocess.run([SWDAQ, "inspect", "--json", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["format"].startswith("ATLAS EventStorage")
    assert report["problems"] == []
    assert report["head"]["run_number"] == run and report["head"]["lumi_block"] == lb
    assert report["head"]["app_name"] == "SFO-2"
    got = report["events"]
    assert [e["global_id"] for e in got] == [9_000_000_000 + i for i in range(5)]
    assert all(e["lumi_block"] == lb and e["robs"] == 3 and e["streams"] == ["physics_Main"] for e in got)
    assert [e["missing_robs"] for e in got] == [[], [], [0x420012], [], []]
    assert report["end"]["events_in_file"] == 5 and report["end"]["last_in_sequence"]

    # Damaged: the fourth event's ROB marker; named, the others listed, the exit non-zero.
    bad = bytearray(path.read_bytes())
    fourth = bytes(bad).index(events[3])
    rob_at = fourth + (len(events[3]) - sum(len(eformat_rob(0x420010 + k, [0], run, 0, 17, [0] * (3 + k))) for k in range(3)))
    bad[rob_at] ^= 0xFF
    damaged = tmp_path / "damaged" / name
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(bad))
    done = subprocess.run([SWDAQ, "inspect", "--json", str(damaged)], capture_output=True, text=True)
    assert done.returncode != 0
    report = json.loads(done.stdout)
    assert len(report["events"]) == 4
    assert [p["block"] for p in report["problems"]] == [4], report["problems"]
    assert "ROB 0" in report["problems"][0]["reason"]


def test_a_foreign_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "events.root"
    path.write_bytes(b"root\x00\x00\xf4\x3c" + bytes(200))
    done = subprocess.run([SWDAQ, "inspect", str(path)], capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "no known data format" in done.stderr, done.stderr
