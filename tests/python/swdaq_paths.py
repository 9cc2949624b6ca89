"""What every Python test needs to run swdaq: the binary, the examples, a free port, a sample file,
what the run registry holds of a run."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))


# What a run keeps beside its data files in its output directory: the run-number claim and
# the run registry (swdaq-format's LAST_RUN_FILE, swdaq-registry's default file).
BOOKKEEPING = {".swdaq-last-run", "swdaq-runs.sqlite"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list:
    """`count` different free TCP ports on 127.0.0.1: each held until all are chosen (ports
    asked for one after another may repeat once the first is let go)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_udp_ports(count: int) -> int:
    """A base port on 127.0.0.1 with the `count` ports from it free now (a run binds them next)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base >= 60000:
            continue
        held = []
        try:
            for k in range(count):
                held.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                held[-1].bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for h in held:
                h.close()


def udp_port_bound(port: int) -> bool:
    """Whether a socket is bound to 127.0.0.1:port (Linux's /proc/net/udp), without binding it."""
    local = f"0100007F:{port:04X}"
    lines = Path("/proc/net/udp").read_text().splitlines()[1:]
    return any(line.split()[1] == local for line in lines)


def example(name: str) -> str:
    """A Rust example's executable, built in the test profile with the whole workspace's
    features, as `cargo test` builds everything: the same HDF5 build, nothing rebuilt but the
    example (a release build, or the example's package alone, would build HDF5 again)."""
    out = subprocess.run(
        ["cargo", "build", "--profile", "test", "--quiet", "--workspace", "--example", name, "--message-format=json"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("target", {}).get("name") == name and message.get("executable"):
            return message["executable"]
    raise AssertionError(f"cargo did not report the {name} executable")


def write_sample(out: Path, records: int = 3) -> Path:
    """Runs swdaq-store's write_sample example: a file of `records` synthetic records, and the
    ADCs they carry in expected_adcs.npy."""
    subprocess.run([example("write_sample"), str(out), str(records)], check=True, cwd=ROOT)
    (h5,) = out.glob("*.hdf5")
    return h5


def provenance_on_record(registry: Path, run: int) -> dict:
    """What every file of run `run` must name as its run and software: what `swdaq runs show N
    --json` records of it (its software and run type) and where that registry is."""
    shown = subprocess.run([SWDAQ, "runs", "--registry", str(registry), "show", str(run), "--json"],
                           check=True, capture_output=True, text=True)
    record = json.loads(shown.stdout)
    software = record["software"]
    assert software["version"] and software["commit"], software
    return {
        "version": software["version"], "git_commit": software["commit"],
        "build_profile": software["profile"], "build_flags": software["flags"],
        "run_registry": str(registry), "run_type": record["run_type"],
    }
