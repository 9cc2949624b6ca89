"""A writer killed with SIGKILL at 20 random points leaves a `.writing` file that h5py opens as it
lies: every record flushed before the kill reads back whole (record header and fragments with
the right trigger number and size), and `swdaq inspect` lists them and says the file was not
closed. The writer is swdaq-store's crash_writer example (flushes every 4 records)."""

import random
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np

from swdaq_paths import SWDAQ, example
import read_records

FLUSH_EVERY_RECORDS = 4
KILLS = 20


def write_and_kill(writer: str, out: Path, records: int, extra_s: float) -> int:
    """Kills the writer `extra_s` after it reported record `records`; returns the last record it
    reported written."""
    child = subprocess.Popen([writer, str(out), str(FLUSH_EVERY_RECORDS)], stdout=subprocess.PIPE, text=True)
    last = 0
    while last < records:
        last = int(child.stdout.readline())
    time.sleep(extra_s)
    child.send_signal(signal.SIGKILL)
    child.wait()
    for line in child.stdout:  # reported before the kill, still in the pipe
        last = int(line)
    return last


def check_with_h5py(path: Path, flushed: int) -> None:
    with h5py.File(path, "r") as f:
        assert f.attrs["record_type"] == "TriggerRecord" and "closing_timestamp" not in f.attrs
        names = sorted(k for k in f.keys() if k.startswith("TriggerRecord"))
        assert len(names) >= flushed, (path, names)
        for trigger, name in enumerate(names[:flushed], start=1):
            assert name == f"TriggerRecord{trigger:05d}.0000"
            raw = f[name]["RawData"]
            (header_name,) = [d for d in raw if d.endswith(read_records.RECORD_HEADER_SUFFIX)]
            header = read_records.as_bytes(raw[header_name])
            assert header[8:16].view("<u8")[0] == trigger
            fragments = [d for d in raw if d != header_name]
            assert fragments
            for dataset in fragments:
                data = read_records.as_bytes(raw[dataset])
                fragment = read_records.fragment_header(data)
                assert fragment["trigger_number"] == trigger and fragment["size"] == data.size
                if fragment["fragment_type"] == read_records.WIBETH_TYPE:
                    stamps = read_records.wibeth_timestamps(data[read_records.FRAGMENT_HEADER.itemsize :])
                    assert stamps[0] == fragment["window_begin"] and np.all(np.diff(stamps) == 2048)


def test_every_flushed_record_survives_sigkill(tmp_path):
    writer = example("crash_writer")
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    for kill in range(KILLS):
        out = tmp_path / str(kill)
        printed = write_and_kill(writer, out, rng.randint(1, 40), rng.uniform(0, 0.003))
        flushed = printed // FLUSH_EVERY_RECORDS * FLUSH_EVERY_RECORDS
        (path,) = out.glob("*.hdf5.writing")
        context = f"seed {seed} kill {kill} after record {printed}"
        try:
            check_with_h5py(path, flushed)
        except Exception as e:
            raise AssertionError(context) from e
        shown = subprocess.run([SWDAQ, "inspect", str(path)], capture_output=True, text=True)
        assert shown.returncode == 0, (context, shown.stderr)
        kind, first = shown.stdout.splitlines()[:2]
        assert kind == f"{path}: HDF5 trigger-record file, left open by its writer (.writing: killed or still writing; its end may be missing or cut)", kind
        assert first.startswith("not closed (writer stopped or killed), ") and first.endswith(" records readable"), first
        readable = int(first.split(", ")[1].split()[0])
        assert readable >= flushed, (context, first)
        for trigger in range(1, flushed + 1):
            assert f"TriggerRecord{trigger:05d}.0000" in shown.stdout, context
        path.unlink()
