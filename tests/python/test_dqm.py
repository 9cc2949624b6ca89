"""`swdaq dqm`'s histogram sets saved as HDF5 read with h5py alone, as its layout documents:
root attributes (version, events), one group per histogram under /histograms with its title,
kind and axis as attributes and its counts (underflow, bins, overflow) as a dataset. From a
short event-builder run; the same set judged against itself is never Bad. The set the run's own
online monitoring saved names its run and software (issue #38) as the run registry records them;
a set `swdaq dqm` saved from files, of no run, names none."""

import json
import subprocess

import h5py
import pytest
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


def test_a_user_s_histograms_bin_as_numpy_does_and_save_as_a_run_s_set(tmp_path):
    """swdaq.dqm (a user's own histograms): values inside the axis land where numpy's histogram
    puts them, the edges and non-numbers as documented; a set saved reads with h5py in the
    layout above and loads back equal; nothing replaces a file; a bad argument or set is a
    ValueError naming it."""
    from swdaq import dqm

    rng = np.random.default_rng(5)
    values = rng.normal(50, 20, 10_000)
    h = dqm.Hist1("x", "a quantity", "x", "mm", 40, 0, 100)
    h.fill(values)
    inside = values[(values >= 0) & (values < 100)]
    expected, _ = np.histogram(inside, bins=40, range=(0, 100))
    assert np.array_equal(h.counts[1:-1], expected)
    assert h.underflow == (values < 0).sum() and h.overflow == (values >= 100).sum()
    edges = dqm.Hist1("e", "edges", "x", "", 4, -2, 2)
    edges.fill([-2, 2, np.nan, -np.inf, np.inf, np.nextafter(2, 0), -2.0000001])
    assert edges.counts.tolist() == [3, 1, 0, 0, 1, 2]
    edges.fill(1.5)
    assert edges.entries == 8

    hists = dqm.HistSet([h, edges], events=10_000)
    saved = tmp_path / "user.h5"
    hists.save(saved)
    with h5py.File(saved, "r") as f:
        assert f.attrs["swdaq_dqm_version"] == 1 and f.attrs["events"] == 10_000
        x = f["histograms"]["x"]
        assert x.attrs["axis_unit"] == "mm" and x.attrs["bins"] == 40 and x.attrs["kind"] == "distribution"
        assert np.array_equal(x["counts"][()], h.counts)
    loaded = dqm.HistSet.load(saved)
    assert loaded.events == 10_000 and np.array_equal(loaded["e"].counts, edges.counts)
    with pytest.raises(ValueError, match="exists"):
        hists.save(saved)

    for bad in [dict(bins=0), dict(bins=5000), dict(lo=1, hi=1), dict(hi=float("nan")), dict(kind="weights")]:
        args = dict(name="b", title="t", label="x", unit="", bins=10, lo=0, hi=1) | bad
        with pytest.raises(ValueError):
            dqm.Hist1(**args)
    broken = hists.to_json()
    broken["histograms"]["x"]["counts"] = [1, 2]
    with pytest.raises(ValueError, match="2 counts for 40 bins"):
        dqm.HistSet.from_json(broken)


def test_an_analyzer_reads_every_item_of_a_run_s_files(tmp_path):
    """An analyzer over a run's files (dqm.files) sees every event once, or every N-th."""
    from swdaq import dqm

    out = tmp_path / "out"
    config = tmp_path / "evb.toml"
    config.write_text(
        f'[run]\nduration_s = 30\nmetrics_addr = ""\noutput_dir = "{out}"\n'
        "[evb]\nbuilder_units = 1\nmax_events = 1000\npaced = false\nmin_free_bytes = 0\nevents_per_file = 100\n"
        "rus = [[{ id = 7, mean_bytes = 1024, spread_bytes = 128 }, { id = 8, mean_bytes = 512, spread_bytes = 0 }]]\n"
    )
    subprocess.run([SWDAQ, "run", "--config", str(config)], check=True, capture_output=True, timeout=60)
    files = sorted((out / "bu0" / "run000001").glob("*.raw"))
    assert len(files) == 10

    class Feds(dqm.Analyzer):
        name = "feds"

        def book(self):
            return [dqm.Hist1("feds", "FEDs per event", "FEDs", "", 10, 0, 10)]

        def analyze(self, item):
            self.hists["feds"].fill(len(item.fragments))

    every = Feds().run(dqm.files(files))
    assert every.events == 1000 and every["feds"].counts[3] == 1000
    tenth = Feds().run(dqm.files(files, every=10))
    assert tenth.events == 100
