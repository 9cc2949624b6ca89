"""Decoding a swdaq file's WIBEth ADCs into numpy: the `swdaq` package against the pure-numpy
decoder of examples/read_records.py, in the same run, on the same file.

Usage: python examples/bench_python_decode.py FILE.hdf5 [REPEATS]

Each side reads every record and turns every WIBEth fragment into a uint16 channels x samples
array (numpy's is a transposed view of its [sample, channel] result: no copy is charged to
it). The outputs are checked equal first. Prints JSON: CPU and wall seconds (best of
REPEATS, the two decoders alternating), MB of fragment payload per CPU second, and the
speed-ups.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import swdaq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import read_records  # noqa: E402


def with_package(path):
    out = []
    for record in swdaq.open(path):
        out.extend(x.adcs() for x in record.fragments if x.fragment_type == "WIBEth")
    return out


def with_numpy(path):
    out = []
    for _, fragments in read_records.records(path):
        for header, payload in fragments.values():
            if header["fragment_type"] == read_records.WIBETH_TYPE:
                out.append(read_records.wibeth_adcs(payload).reshape(-1, 64).T)
    return out


def best_times(repeats, path):
    """Best CPU and wall seconds of each decoder over `repeats` rounds. The two alternate
    within each round so that both see the same machine load; CPU time (this process) is
    the per-core figure, wall time is shown beside it."""
    best = {name: {"cpu": float("inf"), "wall": float("inf")} for name in DECODERS}
    for _ in range(repeats):
        for name, decode in DECODERS.items():
            cpu, wall = time.process_time(), time.perf_counter()
            decode(path)
            best[name]["cpu"] = min(best[name]["cpu"], time.process_time() - cpu)
            best[name]["wall"] = min(best[name]["wall"], time.perf_counter() - wall)
    return best


DECODERS = {"swdaq": with_package, "numpy": with_numpy}


def main(path, repeats):
    package, numpy_ = with_package(path), with_numpy(path)
    # Fragment order differs (the package sorts by source): compare as sets of arrays.
    assert sorted(a.tobytes() for a in package) == sorted(a.tobytes() for a in numpy_), "decoders disagree"
    payload_mb = sum(a.size for a in package) / 4096 * 7200 / 1e6  # 4096 ADCs per 7200-byte frame
    best = best_times(repeats, path)
    print(json.dumps({
        "file": str(path),
        "fragments": len(package),
        "samples_x_channels": int(sum(a.size for a in package)),
        "payload_mb": round(payload_mb, 2),
        "cpu_seconds": {k: round(v["cpu"], 4) for k, v in best.items()},
        "wall_seconds": {k: round(v["wall"], 4) for k, v in best.items()},
        "mb_per_cpu_s": {k: round(payload_mb / v["cpu"], 1) for k, v in best.items()},
        "speedup_cpu": round(best["numpy"]["cpu"] / best["swdaq"]["cpu"], 1),
        "speedup_wall": round(best["numpy"]["wall"] / best["swdaq"]["wall"], 1),
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
