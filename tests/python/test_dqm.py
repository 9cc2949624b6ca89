"""`swdaq dqm`'s histogram sets saved as HDF5 read with h5py alone, as its layout documents:
root attributes (version, events), one group per histogram under /histograms with its title,
kind and axis as attributes and its counts (underflow, bins, overflow) as a dataset. From a
short event-builder run; the same set judged against itself is never Bad. The set the run's own
online monitoring saved names its run and software (issue #38) as the run registry records them;
a set `swdaq dqm` saved from files, of no run, names none."""

import json
import subprocess

import h5py
import numpy as np
from swdaq_paths import SWDAQ, provenance_on_record

PROVENANCE = ("version", "git_commit", "build_profile", "build_flags", "run_registry", "run_type")


def test_a_saved_set_reads_with_h5py_as_documented(tmp_path):
    out = tmp_path / "out"
    config = tmp_path / "evb.toml"
    config.write_text(
        f'[run]\nduration_s = 30\nmetrics_addr = ""\noutput_dir = "{out}"\n'
        "[evb]\nbuilder_units = 1\nmax_events = 3000\npaced = false\nmin_free_bytes = 0\n"
        "rus = [[{ id = 7, mean_bytes = 1024, spread_bytes = 128 }]]\n"
        "[dqm]\nenabled = true\n"
    )
    subprocess.run([SWDAQ, "run", "--config", str(config)], check=True, capture_output=True, timeout=60)
    files = sorted(str(p) for p in (out / "bu0" / "run000001").glob("*.raw"))
    saved = tmp_path / "dqm.h5"
    report = json.loads(subprocess.run([SWDAQ, "dqm", "--json", "--save", str(saved), *files],
                                       check=True, capture_output=True, timeout=60).stdout)
    with h5py.File(out / "dqm_run000001.h5", "r") as f:
        assert f.attrs["swdaq_run_number"] == 1 and f.attrs["events"] > 0
        on_record = provenance_on_record(out / "swdaq-runs.sqlite", 1)
        assert {p: f.attrs[f"swdaq_{p}"] for p in PROVENANCE} == on_record
    with h5py.File(saved, "r") as f:
        assert not [a for a in f.attrs if a.removeprefix("swdaq_") in (*PROVENANCE, "run_number")]
        assert f.attrs["swdaq_dqm_version"] == 1 and f.attrs["events"] == 3000
        names = sorted(f["histograms"])
        assert names == sorted(h["name"] for h in report["histograms"])
        size = f["histograms"]["fed_size_0007"]
        assert size.attrs["kind"] == "distribution" and size.attrs["axis_unit"] == "bytes"
        bins, lo, hi = int(size.attrs["bins"]), float(size.attrs["lo"]), float(size.attrs["hi"])
        counts = size["counts"][()]
        assert counts.dtype == np.uint64 and len(counts) == bins + 2 and counts.sum() == 3000
        # The mean from the counts alone, as a physicist would compute it.
        centres = lo + (np.arange(bins) + 0.5) * (hi - lo) / bins
        mean = (centres * counts[1:-1]).sum() / counts[1:-1].sum()
        (expected,) = [h["mean"] for h in report["histograms"] if h["name"] == "fed_size_0007"]
        assert abs(mean - expected) < 1e-6 and 900 < mean < 1200
    judged = json.loads(subprocess.run([SWDAQ, "dqm", "--json", "--reference", str(saved), *files],
                                       check=True, capture_output=True, timeout=60).stdout)
    assert all(v["verdict"]["quality"] != "Bad" for v in judged["verdicts"])
