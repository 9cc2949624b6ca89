"""Damaged copies of every format `swdaq.open` reads (issue #33), made from files `swdaq run`
and `swdaq gen` wrote: cut inside an item, a zero tail, garbage in the middle, a zeroed file
header. The package never crashes on them: a file `swdaq inspect` reads is read as inspect
reads it — the same good items, every one of them readable down to its payloads, and the
same problems, with their offsets — and a file it cannot read at all raises `ValueError` or
`OSError` naming the file."""

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import swdaq
from swdaq_paths import ROOT, SWDAQ
from test_atlas_eventstorage import run_swrod

# What `swdaq inspect --json` lists the good items of each format under (a link file's
# report counts its frames instead).
ITEMS = {".hdf5": "records", ".raw": "events", ".data": "events"}
# Bytes of each format's file header: HDF5's superblock, RAW_0002, the EventStorage head's
# file start record, the swdaq raw header.
HEADER = {".hdf5": 96, ".raw": 32, ".data": 32, ".swraw": 64}
# What neither inspect nor the package can read: HDF5 refuses a file shorter than its
# superblock says, and a zeroed signature leaves no format to tell (an FRD file alone is
# still told by its first event).
UNREADABLE = {(".hdf5", "cut"), (".hdf5", "zeroed header"), (".data", "zeroed header"), (".swraw", "zeroed header")}


def inspect(path: Path):
    """`swdaq inspect --json`'s report and exit status, or None for a file it refuses."""
    done = subprocess.run([SWDAQ, "inspect", "--json", str(path)], capture_output=True, text=True)
    return (json.loads(done.stdout), done.returncode) if done.stdout.strip() else (None, done.returncode)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """A small good file of each format, by suffix."""
    tmp = tmp_path_factory.mktemp("good")
    links = tmp / "links"
    subprocess.run([SWDAQ, "gen", "--seconds", "0.2", "--links", "1", "--seed", "3", "--out", str(links)],
                   check=True, capture_output=True)
    chain = tmp / "chain.toml"
    chain.write_text(f'[run]\nduration_s = 0.0\nmetrics_addr = ""\noutput_dir = "{tmp / "records"}"\n'
                     f'[source]\nkind = "file"\ndirectory = "{links}"\nreal_time = false\nloop = false\n'
                     '[emulator]\nlinks = 1\n[trigger.periodic]\nrate_hz = 50.0\n')
    subprocess.run([SWDAQ, "run", "--config", str(chain)], check=True, capture_output=True)
    evb = (ROOT / "configs" / "evb.toml").read_text()
    for old, new in {'output_dir = "/dev/shm/swdaq-evb"': f'output_dir = "{tmp / "evb"}"', "[evb]\n": "[evb]\nmax_events = 200\n",
                     "paced = true": "paced = false", 'metrics_addr = "127.0.0.1:9464"': 'metrics_addr = ""'}.items():
        assert old in evb, old
        evb = evb.replace(old, new)
    (tmp / "evb.toml").write_text(evb)
    subprocess.run([SWDAQ, "run", "--config", str(tmp / "evb.toml"), "--duration", "0"], check=True, capture_output=True)
    (tmp / "swrod").mkdir()
    run_swrod(tmp / "swrod", {"max_l1as": "300"})
    return {
        ".swraw": links / "link0.swraw",
        ".hdf5": sorted((tmp / "records").rglob("*.hdf5"))[0],
        ".raw": sorted((tmp / "evb").rglob("*.raw"))[0],
        ".data": sorted((tmp / "swrod" / "out").glob("*.data"))[0],
    }


def damaged(data: bytes, how: str, header: int) -> bytes:
    """`data` damaged `how`; `header` is how many bytes the format's file header takes."""
    middle = len(data) // 2
    if how == "cut":
        return data[: middle + 7]
    if how == "zero tail":
        return data + bytes(1 << 20)
    if how == "garbage":
        noise = random.Random(33).randbytes(4096)
        return data[:middle] + noise + data[middle + len(noise):]
    assert how == "zeroed header"
    return bytes(header) + data[header:]


@pytest.mark.parametrize("how", ["cut", "zero tail", "garbage", "zeroed header"])
@pytest.mark.parametrize("suffix", list(HEADER))
def test_a_damaged_file_reads_as_inspect_reads_it_or_raises_naming_it(files, tmp_path, suffix, how):
    good = files[suffix]
    path = tmp_path / good.name
    path.write_bytes(damaged(good.read_bytes(), how, HEADER[suffix]))
    report, status = inspect(path)
    assert (report is None) == ((suffix, how) in UNREADABLE)
    if report is None:
        assert status != 0
        with pytest.raises((OSError, ValueError), match=re.escape(path.name)):
            swdaq.open(path)
        return
    with swdaq.open(path) as f:
        assert f.format == report["format"]
        items = list(f)
        for item in items:
            for fragment in item.fragments:
                assert fragment.payload().nbytes <= fragment.size
        if suffix == ".swraw":
            # Frames the continuity checks flag name their findings; a record that does not
            # read ends the walk, named in the file's problems.
            assert len(items) == report["frames"]
            assert sum(bool(frame.problems) for frame in items) == report["flagged_frames"]
            assert [p["reason"] for p in f.problems] == [report["error"]] * bool(report["error"])
        else:
            assert len(items) == len(report[ITEMS[suffix]])
            assert f.problems == report["problems"]
        named = bool(f.problems) or any(item.problems for item in items)
    assert named == (status != 0), how


def test_a_2_gb_zero_tail_costs_memory_by_the_events_not_the_file(files, tmp_path):
    """Opening walks a file once and hands back the pages behind it (sparse tail: no disk);
    the payloads read afterwards map their pages again, with the file's bytes."""
    tail = 2 << 30
    for suffix in (".raw", ".data"):
        path = tmp_path / files[suffix].name
        good = files[suffix].read_bytes()
        path.write_bytes(good)
        os.truncate(path, len(good) + tail)
        # VmHWM, not ru_maxrss: the latter keeps the forking pytest's peak across exec.
        probe = ("import re, swdaq, sys\n"
                 "f = swdaq.open(sys.argv[1])\n"
                 "last = f[-1].fragments[-1]\n"
                 "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1]\n"
                 "print(len(f), f.problems[-1]['offset'], f.problems[-1]['bytes'], last.payload().tobytes().hex(), peak)")
        out = subprocess.run([sys.executable, "-c", probe, str(path)], check=True, capture_output=True, text=True, timeout=60)
        events, offset, span, payload, peak_kb = out.stdout.split()
        assert (int(events), int(offset), int(span)) == (len(inspect(files[suffix])[0]["events"]), len(good), tail)
        assert bytes.fromhex(payload) in good
        assert int(peak_kb) < 200_000, f"{suffix}: peak RSS {peak_kb} kB"
