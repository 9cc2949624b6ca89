"""swdaq under a real Prometheus: a Prometheus server (Debian's package, installed by
scripts/setup-prometheus.sh) scrapes a running `swdaq run`; its series must agree with the run's
closing summary, `promtool check metrics` must accept the scrape, and every query of each shipped
Grafana dashboard (one per dataflow model: the chain, the event builder, the SW ROD; written by
deploy/grafana/dashboards.py) must name metrics a run of that model serves and evaluate in
Prometheus over it.

The tests that need the prometheus/promtool binaries skip, saying so, where they are missing."""

import json
import sys
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swdaq_paths import ROOT, SWDAQ, free_port
from test_run import CHAIN_METRICS, scrape

DASHBOARDS = ROOT / "deploy" / "grafana"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# swdaq refreshes its snapshot every SNAPSHOT_S (run.status_interval_s); Prometheus scrapes every
# SCRAPE_S. The run serves /metrics until its threads have stopped, but the last scrape may come
# before the final snapshot, so Prometheus' last values are lower bounds of the summary's.
SNAPSHOT_S = 0.1
SCRAPE_S = 0.2
RUN_S = 3
NEEDS_PROMETHEUS = "prometheus not installed (scripts/setup-prometheus.sh installs Debian's package)"


@dataclass
class ScrapedRun:
    summary: dict
    metrics_text: str  # the test's own scrape while the run was taking data
    scraped_by: float  # unix time that scrape had been answered by
    exited_at: float  # unix time, the clock Prometheus stamps samples with
    prometheus: str | None  # base URL, None without the prometheus binary


def http_json(url: str) -> dict:
    """The API's JSON reply, also on an HTTP error (a bad query), where it says what is wrong."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def prometheus_query(base: str, query: str, **params) -> dict:
    args = urllib.parse.urlencode({"query": query, **params})
    path = "query_range" if "step" in params else "query"
    reply = http_json(f"{base}/api/v1/{path}?{args}")
    assert reply["status"] == "success", (query, reply)
    return reply["data"]


def start_prometheus(tmp: Path, target_port: int):
    """A Prometheus on a free port with its own config and storage, scraping `target_port`."""
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {int(SCRAPE_S * 1000)}ms\n"
        f"  scrape_timeout: {int(SCRAPE_S * 1000)}ms\n"
        "scrape_configs:\n"
        "  - job_name: swdaq\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    with open(tmp / "prometheus.log", "w") as log:
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("prometheus did not become ready: " + (tmp / "prometheus.log").read_text()[-2000:])
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def scraped(config_text: str, args: list[str], needs: tuple[str, ...] = CHAIN_METRICS):
    """One `swdaq run` of RUN_S seconds (its configuration `config_text`, where {tmp} and {port}
    are the temporary directory and the metrics port), scraped by Prometheus (when installed) and
    once by the test itself; Prometheus stays up (with the samples) until the caller is done."""
    with tempfile.TemporaryDirectory(prefix="swdaq-prom-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        prometheus, base = (None, None)
        if shutil.which("prometheus"):
            prometheus, base = start_prometheus(tmp, port)
            wait_until_scraping(base, time.monotonic() + 30)
        config = tmp / "run.toml"
        config.write_text(config_text.format(tmp=tmp, port=port))
        run = subprocess.Popen(
            [SWDAQ, "run", "--config", str(config), "--duration", str(RUN_S), "--json"] + [a.format(tmp=tmp, port=port) for a in args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            try:
                text = scrape(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 30, needs)
            except AssertionError:
                if run.poll() is not None:
                    pytest.fail(f"swdaq run ended before it served /metrics: {run.stderr.read()}")
                raise
            scraped_by = time.time()
            stdout, stderr = run.communicate(timeout=60)
            exited_at = time.time()
            assert run.returncode == 0, stderr
            yield ScrapedRun(json.loads(stdout), text, scraped_by, exited_at, base)
        finally:
            run.kill()
            run.wait(timeout=10)
            if prometheus:
                stop(prometheus)


@pytest.fixture(scope="module")
def scraped_run():
    """The DUNE-style chain, with ROI readout and raw bursts on the periodic trigger on, so the
    dashboard's panels of those have series."""
    config = (
        f"[run]\nstatus_interval_s = {SNAPSHOT_S}\n"
        "[readout]\nbuffer_s = 0.25\n"
        "[readout.roi]\nenabled = true\n"
        "[recording]\nenabled = true\ndirectory = '{tmp}/bursts'\nseconds_after = 0.25\non_trigger_types = ['periodic']\n"
    )
    args = ["--links", "2", "--out", "{tmp}/out", "--metrics", "127.0.0.1:{port}"]
    # A link's recording series appear with its first burst.
    with scraped(config, args, CHAIN_METRICS + ("swdaq_recording_bytes_total",)) as run:
        yield run


def example_config(name: str, changes: dict[str, str]) -> str:
    """A shipped example configuration with some lines replaced (each must be found)."""
    text = (ROOT / "configs" / name).read_text().replace("{", "{{").replace("}", "}}")
    for old, new in changes.items():
        assert old in text, (name, old)
        text = text.replace(old, new)
    return text


# Each model's dashboard: the shipped example configuration its run starts from, the lines
# changed in it, and the metrics that say the run is taking data.
MODEL_RUNS = {
    "swdaq-evb.json": (
        "evb.toml",
        {
            'metrics_addr = "127.0.0.1:9464"': 'metrics_addr = "127.0.0.1:{port}"',
            'output_dir = "/dev/shm/swdaq-evb"': 'output_dir = "{tmp}/evb"',
            "trigger_rate_hz = 20000": "trigger_rate_hz = 2000",
            "consumers = 0": "consumers = 1",
        },
        ("swdaq_evb_events_built_total",),
    ),
    "swdaq-swrod.json": (
        "swrod.toml",
        {
            'metrics_addr = "127.0.0.1:9464"': 'metrics_addr = "127.0.0.1:{port}"',
            'output_dir = "swrod-data"': 'output_dir = "{tmp}/swrod"',
            # An e-link's error series appears with its first error.
            "missing_chunk = 0.0": "missing_chunk = 0.001",
        },
        ("swdaq_swrod_chunks_total", "swdaq_swrod_events_total", "swdaq_swrod_elink_errors_total"),
    ),
}


@pytest.fixture(scope="module", params=["swdaq.json", *MODEL_RUNS])
def dashboard_run(request, scraped_run):
    """Each shipped dashboard with a run of its dataflow model."""
    if request.param == "swdaq.json":
        yield request.param, scraped_run
    else:
        example, changes, needs = MODEL_RUNS[request.param]
        with scraped(example_config(example, changes), [], needs) as run:
            yield request.param, run


def wait_until_scraping(base: str, deadline: float) -> None:
    """Prometheus applies its targets a few seconds after it is ready; until then nothing is
    scraped. A scrape of the not yet started run gives `up` = 0, which is enough."""
    while not prometheus_query(base, 'up{job="swdaq"}')["result"]:
        assert time.monotonic() < deadline, "prometheus never scraped its target"
        time.sleep(0.2)


def last_samples(base: str, metric: str) -> dict:
    """Every series of `metric` in Prometheus: {labels: (unix time, value) of its last sample}.
    A range selector keeps the samples before the staleness marker the end of the run left."""
    data = prometheus_query(base, f"{metric}[10m]")
    out = {}
    for series in data["result"]:
        labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
        t, v = series["values"][-1]
        out[labels] = (float(t), float(v))
    return out


def by_source(samples: dict) -> dict:
    return {dict(labels)["source_id"]: tv for labels, tv in samples.items()}


def served_metrics(text: str) -> list[tuple[str, str]]:
    """(metric name, type) of every family in a /metrics text; prometheus_client's parser
    drops a counter's `_total` from the family name, this puts it back."""
    return [
        (f.name + "_total" if f.type == "counter" else f.name, f.type) for f in text_string_to_metric_families(text)
    ]


def own_samples(text: str) -> dict:
    """{(sample name, the one identifying label or None): value} of a /metrics text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = next(((k, v) for k, v in sample.labels.items() if k in ("source_id", "outcome")), None)
            out[sample.name, key] = out.get((sample.name, key), 0) + sample.value
    return out


def test_prometheus_series_agree_with_the_run_summary(scraped_run):
    if not scraped_run.prometheus:
        pytest.skip(NEEDS_PROMETHEUS)
    base, summary = scraped_run.prometheus, scraped_run.summary
    own = own_samples(scraped_run.metrics_text)
    links = summary["links"]
    last = {}
    for metric in ("swdaq_readout_frames_total", "swdaq_readout_bytes_total", "swdaq_tpg_trigger_primitives_total"):
        last[metric] = by_source(last_samples(base, metric))
        assert set(last[metric]) == {f"0x{link['source_id']:08x}" for link in links}, metric
    # swdaq serves snapshots taken in time order, so a scrape started after another was answered
    # sees counts at least as large; the summary holds the counts after every thread stopped.
    # Hence: the test's own scrape <= Prometheus' last sample <= the summary, for every counter.
    for link in links:
        source = f"0x{link['source_id']:08x}"
        for metric, final in (
            ("swdaq_readout_frames_total", link["frames"]),
            ("swdaq_readout_bytes_total", link["bytes"]),
            ("swdaq_tpg_trigger_primitives_total", link["trigger_primitives"]),
        ):
            t_seen, seen = last[metric][source]
            assert t_seen > scraped_run.scraped_by, "Prometheus did not scrape after the test did"
            assert own[metric, ("source_id", source)] <= seen <= final, (metric, source)
        # Frames all have one size and bytes are published with frames: exact at every sample.
        (_, frames), (_, bytes_) = last["swdaq_readout_frames_total"][source], last["swdaq_readout_bytes_total"][source]
        assert bytes_ * link["frames"] == link["bytes"] * frames
    (_, decisions), = last_samples(base, "swdaq_trigger_decisions_total").values()
    assert own["swdaq_trigger_decisions_total", None] <= decisions <= summary["trigger"]["decisions"]
    records = {dict(k)["outcome"]: v for k, (_, v) in last_samples(base, "swdaq_dataflow_records_total").items()}
    complete = own["swdaq_dataflow_records_total", ("outcome", "complete")]
    assert complete <= records["complete"] <= summary["records"]["complete"]
    # Bytes written to storage: what the files grew by on disk, HDF5's metadata included. The
    # summary's count is taken after every file closed: exactly the sizes of the files left.
    storage = summary["storage"]
    on_disk = sum(Path(f).stat().st_size for f in storage["files"])
    assert storage["files"] and storage["file_bytes"] == on_disk
    assert 0 < storage["bytes_written"] < on_disk
    (t_seen, written), = last_samples(base, "swdaq_store_written_bytes_total").values()
    assert t_seen > scraped_run.scraped_by, "Prometheus did not scrape after the test did"
    assert 0 < own["swdaq_store_written_bytes_total", None] <= written <= on_disk
    # Records reach the file as they are written, so it never holds less than them.
    (_, record_bytes), = last_samples(base, "swdaq_store_record_bytes_total").values()
    assert record_bytes <= written
    (_, stored), = last_samples(base, "swdaq_store_records_total").values()
    assert stored <= storage["records_written"]
    # No counter Prometheus saw ever went back (each series is one run's monotonic count).
    counters = [name for name, kind in served_metrics(scraped_run.metrics_text) if kind == "counter"]
    assert "swdaq_readout_frames_total" in counters
    for counter in counters:
        resets = prometheus_query(base, f"resets({counter}[10m])")["result"]
        assert resets and all(float(r["value"][1]) == 0 for r in resets), counter


def test_promtool_accepts_the_scrape_and_the_shipped_config(dashboard_run):
    if not shutil.which("promtool"):
        pytest.skip(NEEDS_PROMETHEUS)
    r = subprocess.run(["promtool", "check", "metrics"], input=dashboard_run[1].metrics_text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
    r = subprocess.run(["promtool", "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def dashboard_queries(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """swdaq metric families an expression reads (histogram sample suffixes stripped)."""
    names = set(re.findall(r"\bswdaq_[a-z0-9_]+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_the_dashboards_are_what_their_generator_writes():
    sys.path.insert(0, str(DASHBOARDS))
    import dashboards

    declared = dashboards.dashboards(SWDAQ)
    files = {d.file for d in declared}
    assert files == {p.name for p in (DASHBOARDS / "dashboards").glob("*.json")}
    for d in declared:
        written = (DASHBOARDS / "dashboards" / d.file).read_text()
        assert written == dashboards.render(d), f"{d.file} differs: run python3 deploy/grafana/dashboards.py"


def test_the_dashboard_is_provisionable_and_queries_only_metrics_swdaq_serves(dashboard_run):
    name, run = dashboard_run
    dashboard = json.loads((DASHBOARDS / "dashboards" / name).read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    assert "id" not in dashboard or dashboard["id"] is None  # provisioning assigns ids
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys() and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert len(ref_ids) == len(set(ref_ids)), panel["title"]
    served = {name for name, _ in served_metrics(run.metrics_text)}
    used = set().union(*map(metric_names, dashboard_queries(dashboard)))
    assert used and used <= served, f"{name} queries metrics /metrics lacks: {used - served}"


def test_every_dashboard_query_evaluates_over_the_run_in_prometheus(dashboard_run):
    name, run = dashboard_run
    if not run.prometheus:
        pytest.skip(NEEDS_PROMETHEUS)
    end = run.exited_at
    dashboard = json.loads((DASHBOARDS / "dashboards" / name).read_text())
    for expr in dashboard_queries(dashboard):
        # Grafana's $__rate_interval is at least four scrape intervals.
        query = expr.replace("$__rate_interval", f"{int(4 * SCRAPE_S * 1000)}ms")
        data = prometheus_query(run.prometheus, query, start=end - RUN_S, end=end, step="0.5")
        assert data["resultType"] == "matrix" and data["result"], f"{name}: no data for {query}"
