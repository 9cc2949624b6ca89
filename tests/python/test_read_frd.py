"""numpy reads the event builder's FRD files (examples/read_frd.py), and what it finds matches
the emulator's truth: every event once, every FED in it except those whose fragment the
readout units rejected (counted per kind in the run summary), and a FED that stopped absent
from its stop on."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import read_frd  # noqa: E402

SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))

EVENTS = 1500
STOPPED_FED, STOPPED_FROM = 202, 1000
ALL_FEDS = [100, 101, 102, 103, 200, 201, 202, 203]


def run_evb(tmp_path: Path) -> dict:
    """Runs the shipped example configuration, not paced, for EVENTS events with faults."""
    text = (ROOT / "configs" / "evb.toml").read_text()
    text = text.replace('output = "/dev/shm/swdaq-evb"', f'output = "{tmp_path}"\nmax_events = {EVENTS}')
    text = text.replace("paced = true", "paced = false")
    text = text.replace('metrics_addr = "127.0.0.1:9464"', 'metrics_addr = ""')
    text = text.replace("missing = 0.0", "missing = 0.01").replace("bad_crc = 0.0", "bad_crc = 0.01")
    text = text.replace("stops = []", f"stops = [[{STOPPED_FED}, {STOPPED_FROM}]]")
    config = tmp_path / "evb.toml"
    config.write_text(text)
    done = subprocess.run([SWDAQ, "run", "--config", str(config), "--duration", "0", "--json"], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def test_files_match_the_emulator_truth(tmp_path):
    summary = run_evb(tmp_path)
    assert summary["built"] == EVENTS and summary["lost"] == 0 and summary["incomplete"] == 0
    seen = {}
    for raw in sorted(tmp_path.glob("bu*/run*/*.raw")):
        it = read_frd.events(str(raw))
        header = next(it)
        assert header["run"] == 1
        for event, feds in it:
            number = int(event["event"])
            assert number not in seen, f"event {number} written twice"
            assert all(l1 == number for _, l1, _, _ in feds)
            seen[number] = sorted(f[0] for f in feds)
    assert sorted(seen) == list(range(1, EVENTS + 1))
    left_out = sum(len(ALL_FEDS) - len(feds) for feds in seen.values())
    assert left_out == sum(summary["fed_failures"].values())
    assert summary["fed_failures"]["missing"] >= EVENTS - STOPPED_FROM + 1
    assert summary["fed_failures"]["bad_crc"] > 0
    assert all(STOPPED_FED not in seen[n] for n in range(STOPPED_FROM, EVENTS + 1))
