"""What every Python test needs to run swdaq: the binary, the examples, a free port, a sample file."""

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_sample(out: Path, records: int = 3) -> Path:
    """Runs swdaq-store's write_sample example: a file of `records` synthetic records, and the
    ADCs they carry in expected_adcs.npy."""
    subprocess.run(
        ["cargo", "run", "--release", "--quiet", "-p", "swdaq-store", "--example", "write_sample", "--", str(out), str(records)],
        check=True,
        cwd=ROOT,
    )
    (h5,) = out.glob("*.hdf5")
    return h5
