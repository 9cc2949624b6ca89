"""`swdaq run` as a user runs it: /metrics is served while it runs (and parses as Prometheus
text), Ctrl-C ends it cleanly, and h5py opens the records it wrote."""

import json
import signal
import socket
import subprocess
import time
import urllib.request

import h5py
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from swdaq_paths import BOOKKEEPING, SWDAQ, free_port

import read_records  # noqa: E402  (examples/, put on the path by swdaq_paths)


CHAIN_METRICS = ("swdaq_readout_frames_total", "swdaq_trigger_decisions_total")


def scrape(url: str, deadline: float, needs: tuple[str, ...] = CHAIN_METRICS) -> str:
    """The first /metrics text that has every metric of `needs`."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
            if all(name in text for name in needs):
                return text
        except OSError:
            pass
        assert time.monotonic() < deadline, f"no /metrics with {needs} in time"
        time.sleep(0.2)


def test_run_serves_metrics_stops_on_ctrl_c_and_writes_files_h5py_reads(tmp_path):
    port = free_port()
    out = tmp_path / "data"
    proc = subprocess.Popen(
        [SWDAQ, "run", "--duration", "0", "--links", "2", "--out", str(out), "--metrics", f"127.0.0.1:{port}", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 60)
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"swdaq_readout_frames", "swdaq_trigger_decisions", "swdaq_dataflow_records"} <= names
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["stop_reason"] == "Interrupted"
    assert all(link["dropped"] == 0 for link in summary["links"])
    decisions = summary["trigger"]["decisions"]
    assert decisions >= 1 and summary["storage"]["records_written"] == decisions

    # Beside the files, only the run-number claim (.swdaq-last-run) and the run registry:
    # nothing left half-written.
    files = sorted(f for f in out.iterdir() if f.name not in BOOKKEEPING)
    assert files and all(f.suffix == ".hdf5" for f in files), files
    seen = 0
    for f in files:
        with h5py.File(f, "r") as h5:
            assert h5.attrs["run_number"] == 1 and "closing_timestamp" in h5.attrs
        for _, fragments in read_records.records(str(f)):
            seen += 1
            raw = {name: f for name, f in fragments.items() if name.endswith("_WIBEth")}
            assert len(raw) == 2 and len(fragments) == 4  # raw data and TPs of both links
            for header, payload in raw.values():
                adcs = read_records.wibeth_adcs(payload)
                stamps = read_records.wibeth_timestamps(payload)
                assert adcs.shape[1:] == (64, 64) and np.all(np.diff(stamps) == 2048)
                assert stamps[0] <= header["window_begin"] < stamps[0] + 2048
    assert seen == decisions
    # Output cut short by the reader ends the command quietly, never with a panic.
    cut = subprocess.run(f"{SWDAQ} inspect {files[0]} | head -2", shell=True, capture_output=True, text=True)
    kind, first = cut.stdout.splitlines()
    assert kind == f"{files[0]}: HDF5 trigger-record file" and first.startswith("run 1 file 0"), cut.stdout
    assert "panicked" not in cut.stderr, cut.stderr


def test_a_bad_configuration_or_a_busy_port_stops_the_start_with_one_clear_message(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[readout]\nlinks_per_thred = 2\n")
    r = subprocess.run([SWDAQ, "run", "--config", str(bad), "--out", str(tmp_path / "d")], capture_output=True, text=True)
    assert r.returncode != 0 and "links_per_thred" in r.stderr and "panicked" not in r.stderr
    r = subprocess.run([SWDAQ, "run", "--config", str(tmp_path / "missing.toml")], capture_output=True, text=True)
    assert r.returncode != 0 and "missing.toml" in r.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [SWDAQ, "run", "--duration", "1", "--out", str(tmp_path / "d"), "--metrics", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
        )
    assert r.returncode != 0 and "run.metrics_addr" in r.stderr and "panicked" not in r.stderr
    assert "in use" in r.stderr, r.stderr  # the OS reason
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(set(lines)) and "Caused by" not in r.stderr, r.stderr
    # The refused start is on record in the registry; no data file is begun.
    left = [f.name for f in (tmp_path / "d").iterdir()] if (tmp_path / "d").exists() else []
    assert set(left) <= BOOKKEEPING, f"nothing half-started: {left}"

