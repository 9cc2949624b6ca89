"""The Prometheus alerting rules of deploy/prometheus/alerts.yml: promtool accepts them and their
tests (alerts_test.yml: each alert on series like a real run's, firing when it must and silent in
a healthy run), and every metric they read is one swdaq serves — registered by a model's code, or
served by `swdaq serve`'s own /metrics, which promtool also checks. The console shows the same
conditions under the same names (crates/swdaq-app/src/control/alerts.rs checks that side)."""

import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from swdaq_paths import ROOT, SWDAQ, free_port

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
NEEDS_PROMTOOL = "promtool not installed (scripts/setup-prometheus.sh installs Debian's prometheus)"


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=RULES.parent)


@pytest.mark.skipif(not shutil.which("promtool"), reason=NEEDS_PROMTOOL)
def test_promtool_accepts_the_rules_and_their_tests_pass():
    r = promtool("check", "rules", RULES.name)
    assert r.returncode == 0, r.stdout + r.stderr
    r = promtool("test", "rules", "alerts_test.yml")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = promtool("check", "config", "prometheus.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_rules_are_what_their_generator_writes_from_the_models():
    sys.path.insert(0, str(RULES.parent))
    import alerts

    listed = alerts.models(SWDAQ)
    assert RULES.read_text() == alerts.render(alerts.TEMPLATE.read_text(), listed), (
        "alerts.yml differs: run python3 deploy/prometheus/alerts.py"
    )
    # A model's term for a rule that does not exist is refused, not dropped.
    stray = [*listed, {"name": "stray", "alerts": {"drop": ["swdaq_x_total > 0"]}}]
    with pytest.raises(ValueError, match="stray.*drop"):
        alerts.render(alerts.TEMPLATE.read_text(), stray)


def metric_names(expr: str) -> set[str]:
    """swdaq metric names an expression reads, `{__name__=~"a_(b|c)_total"}` expanded."""
    names = set()
    for pattern in re.findall(r'__name__=~"([^"]+)"', expr):
        prefix, alternatives, suffix = re.fullmatch(r"([a-z0-9_]+)\(([a-z0-9_|]+)\)([a-z0-9_]*)", pattern).groups()
        names |= {prefix + a + suffix for a in alternatives.split("|")}
    expr = re.sub(r'\{__name__=~"[^"]+"\}', "", expr)
    return names | set(re.findall(r"\bswdaq_[a-z0-9_]+", expr))


def registered_in_code() -> set[str]:
    """Every metric name a model registers: the string literals of the crates' sources."""
    names = set()
    for source in (ROOT / "crates").glob("*/src/**/*.rs"):
        names |= set(re.findall(r'"(swdaq_[a-z0-9_]+)"', source.read_text()))
    # The event builder names its per-FED families `swdaq_evb_fed_{kind}_total`, by check
    # (check.rs) and by what the link counts (metrics.rs).
    for file in ("check.rs", "metrics.rs"):
        text = (ROOT / "crates" / "swdaq-evb" / "src" / file).read_text()
        names |= {f"swdaq_evb_fed_{kind}_total" for kind in re.findall(r'"([a-z0-9_]+)"', text)}
    return names


@pytest.fixture(scope="module")
def control_metrics(tmp_path_factory):
    """`swdaq serve`'s own /metrics text, configured so the output disk is there."""
    tmp = tmp_path_factory.mktemp("serve")
    config = tmp / "serve.toml"
    config.write_text(f'[run]\noutput_dir = "{tmp / "data"}"\nmetrics_addr = ""\n')
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SWDAQ_TOKEN"}
    env["XDG_RUNTIME_DIR"] = str(tmp / "runtime")
    proc = subprocess.Popen([SWDAQ, "serve", "--config", str(config), "--addr", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout.readline().startswith("swdaq serve: listening")
        # The token the server made, from the console address it prints.
        auth = {"Authorization": "Bearer " + proc.stdout.readline().strip().split("#token=")[1]}
        base = f"http://127.0.0.1:{port}"
        urllib.request.urlopen(urllib.request.Request(base + "/configure", method="POST", headers=auth), timeout=5).read()
        try:
            urllib.request.urlopen(urllib.request.Request(base + "/pause", method="POST", headers=auth), timeout=5)
        except urllib.error.HTTPError as e:
            assert e.code == 409
        with urllib.request.urlopen(urllib.request.Request(base + "/metrics", headers=auth), timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            yield r.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_metric_the_rules_read_is_served(control_metrics):
    served_by_control = set(re.findall(r"^# TYPE (swdaq_[a-z0-9_]+) ", control_metrics, re.M))
    assert 'swdaq_control_state{state="configured"} 1.0' in control_metrics
    assert 'swdaq_control_refused_requests_total{code="409"} 1' in control_metrics
    assert re.search(r"^swdaq_control_output_size_bytes\{directory=\".*data\"\} [1-9]", control_metrics, re.M)
    known = registered_in_code() | served_by_control
    used = metric_names(RULES.read_text())
    assert len(used) > 20, used
    assert used <= known, f"the rules read metrics nothing serves: {sorted(used - known)}"


@pytest.mark.skipif(not shutil.which("promtool"), reason=NEEDS_PROMTOOL)
def test_promtool_accepts_what_swdaq_serve_exposes(control_metrics):
    r = subprocess.run(["promtool", "check", "metrics"], input=control_metrics, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
