"""The event builder's bookkeeping read as a CMS filter unit reads a builder unit's directory,
written from CMS's own description, not from swdaq's code: cms-sw/cmssw
EventFilter/Utilities/interface/FFFNamingSchema.h (names), EventFilter/Utilities/src/EvFDaqDirector.cc
(a lumi section is over once its EoLS exists; a .jsn's values are found through the legend of
the .jsd its `definition` names) and EventFilter/Utilities/plugins/RawEventFileWriterForBU.cc
(the legends: EoLS NEvents, NFiles, TotalEvents, NLostEvents, NBytes; EoR NEvents, NFiles,
NLumis, LastLumi, TotalEvents, NLostEvents). Issue #38: every .jsn also names the run and the
software in a key of its own (`swdaq_provenance`; CMSSW's DataPoint::deserialize reads only
source, definition and data), equal to what the run registry records of the run."""

import json
import os
import subprocess
from pathlib import Path

from swdaq_paths import provenance_on_record

ROOT = Path(__file__).resolve().parents[2]
SWDAQ = os.environ.get("SWDAQ_BIN", str(ROOT / "target" / "release" / "swdaq"))

EVENTS = 400
RUN = 1


def run_evb(tmp_path: Path) -> dict:
    """Two builder units, 1 kHz of evenly spaced triggers and 5 ms lumi sections: 5 events a
    lumi section, while a builder unit asks for 32 at a time, so each has lumi sections in
    which it writes nothing."""
    text = (ROOT / "configs" / "evb.toml").read_text()
    text = text.replace('output_dir = "/dev/shm/swdaq-evb"', f'output_dir = "{tmp_path}"')
    text = text.replace("[evb]\n", f"[evb]\nmax_events = {EVENTS}\n")
    text = text.replace("paced = true", "paced = false").replace("poisson = true", "poisson = false")
    text = text.replace("trigger_rate_hz = 20000", "trigger_rate_hz = 1000")
    text = text.replace("lumi_section = 23310", "lumi_section = 5")
    text = text.replace("min_free_bytes = 268435456", "min_free_bytes = 0")
    text = text.replace('metrics_addr = "127.0.0.1:9464"', 'metrics_addr = ""')
    config = tmp_path / "evb.toml"
    config.write_text(text)
    done = subprocess.run([SWDAQ, "run", "--config", str(config), "--duration", "0", "--json"], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def values(jsn: Path) -> dict:
    """A .jsn's values by name, through the legend of the .jsd it names."""
    doc = json.loads(jsn.read_text())
    definition = Path(doc["definition"])
    if not definition.is_absolute():
        definition = jsn.parent / definition
    legend = [item["name"] for item in json.loads(definition.read_text())["legend"]]
    assert len(legend) == len(doc["data"]), jsn
    assert doc["source"]
    return {name: int(value) for name, value in zip(legend, doc["data"])}


def test_every_builder_unit_ends_every_lumi_section_and_the_run(tmp_path):
    summary = run_evb(tmp_path)
    assert summary["written"] == EVENTS
    run_dirs = sorted(tmp_path.glob(f"bu*/run{RUN:06d}"))
    assert len(run_dirs) == 2
    on_record = {**provenance_on_record(tmp_path / "swdaq-runs.sqlite", RUN), "run_number": RUN}
    for run_dir in run_dirs:
        for name in ("rawData", "EoLS", "EoR"):
            assert (run_dir / "jsd" / f"{name}.jsd").is_file()
        jsns = list(run_dir.glob("*.jsn"))
        names = [j.name for j in jsns]
        for kind in ("_index", "_EoLS.jsn", "_EoR.jsn"):
            assert any(kind in n for n in names), (kind, names)
        for jsn in jsns:
            values(jsn)
            doc = json.loads(jsn.read_text())
            assert set(doc) == {"data", "definition", "source", "swdaq_provenance"}, jsn
            assert doc["swdaq_provenance"] == on_record, jsn
    eors = [values(d / f"run{RUN:06d}_ls0000_EoR.jsn") for d in run_dirs]
    last = eors[0]["LastLumi"]
    assert last >= EVENTS // 5 - 1
    empty = 0
    for lumi in range(1, last + 1):
        eols = [values(d / f"run{RUN:06d}_ls{lumi:04d}_EoLS.jsn") for d in run_dirs]
        events = sum(e["NEvents"] for e in eols)
        assert {e["TotalEvents"] for e in eols} == {events}, (lumi, eols)
        for d, e in zip(run_dirs, eols):
            files = sorted(d.glob(f"run{RUN:06d}_ls{lumi:04d}_index*.raw"))
            assert e["NFiles"] == len(files)
            assert e["NBytes"] == sum(f.stat().st_size for f in files)
            empty += e["NEvents"] == 0
    assert empty > 0, "no builder unit had an empty lumi section"
    for d, eor in zip(run_dirs, eors):
        assert eor["LastLumi"] == last and eor["NLumis"] == last
        assert eor["TotalEvents"] == EVENTS and eor["NLostEvents"] == 0
        assert not (d / f"run{RUN:06d}_ls{last + 1:04d}_EoLS.jsn").exists()
    assert sum(e["NEvents"] for e in eors) == EVENTS
