"""docs/src/plugins.md's walkthrough, run as a new user would run it: the shell block after
its `walkthrough` marker, in an empty directory, with `swdaq` on the PATH and the board
ports moved to free ones. The run must build every trigger, count the one a board skipped
incomplete, and leave files the `swdaq` package reads event for event."""

import os
import re
import subprocess
from pathlib import Path

import swdaq
from swdaq_paths import ROOT, SWDAQ, free_udp_ports

DOC = ROOT / "docs" / "src" / "plugins.md"


def walkthrough() -> str:
    after = DOC.read_text().split("<!-- walkthrough:", 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def test_the_plugin_walkthrough_runs_from_an_empty_directory(tmp_path):
    port = free_udp_ports(2)
    script = walkthrough().replace("40000", str(port)).replace("40001", str(port + 1))
    env = dict(os.environ, SWDAQ_SRC=str(ROOT),
               PATH=f"{Path(SWDAQ).resolve().parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FRD file:" in done.stdout, done.stdout
    summary = (tmp_path / "my-detector" / "summary.txt").read_text()
    assert re.search(r"1 incomplete", summary), summary
    numbers, incomplete = set(), []
    for raw in sorted((tmp_path / "my-detector" / "out" / "bu0" / "run000001").glob("*.raw")):
        with swdaq.open(raw) as f:
            for event in f:
                numbers.add(event.number)
                if event.incomplete:
                    incomplete.append(event.number)
    assert numbers == set(range(1, 1001))
    assert incomplete == [500]
