"""What every Python test needs to run swdaq: the binary, the examples, a free port."""

import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
