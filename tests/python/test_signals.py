"""SIGTERM and SIGHUP stop `swdaq run` exactly as Ctrl-C does: summary, exit status 0, every
file closed, renamed and readable by h5py; a second signal says what the stop waits for."""

import json
import signal
import subprocess
import time

import h5py
from swdaq_paths import BOOKKEEPING, SWDAQ

import read_records  # noqa: E402  (examples/, put on the path by swdaq_paths)


def run_and_signal(tmp_path, signals):
    out = tmp_path / "data"
    proc = subprocess.Popen(
        [SWDAQ, "run", "--duration", "0", "--links", "2", "--out", str(out), "--metrics", "", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4)
        for s in signals:
            proc.send_signal(s)
            # Long enough for the handler to take each signal (two pending SIGTERMs would
            # merge into one), short enough to land while a quick clean stop still runs.
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, stdout, stderr, out


def check_clean_stop(returncode, stdout, stderr, out):
    assert returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["stop_reason"] == "Interrupted"
    decisions = summary["trigger"]["decisions"]
    assert decisions >= 1 and summary["storage"]["records_written"] == decisions
    files = sorted(f for f in out.iterdir() if f.name not in BOOKKEEPING)
    assert files and all(f.suffix == ".hdf5" for f in files), files
    records = 0
    for f in files:
        with h5py.File(f, "r") as h5:
            assert "closing_timestamp" in h5.attrs
        records += sum(1 for _ in read_records.records(str(f)))
    assert records == decisions


def test_sigterm_stops_cleanly(tmp_path):
    check_clean_stop(*run_and_signal(tmp_path, [signal.SIGTERM]))


def test_sighup_stops_cleanly(tmp_path):
    check_clean_stop(*run_and_signal(tmp_path, [signal.SIGHUP]))


def test_a_second_signal_says_what_the_stop_waits_for(tmp_path):
    returncode, stdout, stderr, out = run_and_signal(tmp_path, [signal.SIGTERM, signal.SIGTERM])
    assert "still stopping, waiting for" in stderr, stderr
    check_clean_stop(returncode, stdout, stderr, out)
