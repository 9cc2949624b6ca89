"""The operator's console in a real browser: Debian's headless Chromium (scripts/setup-chromium.sh)
driven through Selenium and Debian's chromedriver, never a browser or driver a tool downloads.

A shifter who never read the README starts, watches and stops a run from the page alone, sees
which link is in trouble (one stopped by `emulator.stop_links`), sees a refused command's reason;
the event builder and the SW ROD are run from the same page, their newest stored event shown
FED by FED and ROB by ROB;
without the token the page shows nothing and does nothing; the page keeps working through a
two-minute run with bounded history and memory, and through a restart of the server.

Each step's screenshot is kept in $SWDAQ_SCREENSHOTS (default target/console-screenshots). The
tests skip, saying why, where Chromium, chromedriver or Selenium are missing."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from swdaq_paths import ROOT, SWDAQ, free_port, free_ports

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = Path(os.environ.get("SWDAQ_SCREENSHOTS", ROOT / "target" / "console-screenshots"))
TOKEN = "console-test-token-0123456789"
# Link 3 goes silent this far into the run: the fault the shifter must spot.
LINK_STOPS_AFTER_S = 6.0

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # pragma: no cover - the skip says so
    webdriver = None

pytestmark = pytest.mark.skipif(
    webdriver is None or not CHROMIUM or not CHROMEDRIVER,
    reason="the browser tests need Debian's chromium and chromium-driver (scripts/setup-chromium.sh) and selenium (requirements-test.txt)",
)

# The run the console steers: 4 emulated links, a periodic trigger; `extra` adds lines to
# [emulator].
CONFIG = """
[run]
duration_s = 0
metrics_addr = ""
output_dir = "{out}"
[readout]
# Room for the trigger's latency on a loaded 2-core machine: records keep their data.
buffer_s = 2.0
[trigger.periodic]
enabled = true
rate_hz = {rate_hz}
[emulator]
links = 4
template_s = 0.05
{extra}
"""


def chromium(profile: str, *extra_flags: str):
    """Debian's headless Chromium through Debian's chromedriver, with a fresh profile and
    every flag that keeps it off the network; Selenium Manager has nothing to fetch."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1600,1000",
        f"--user-data-dir={profile}",
        *extra_flags,
    ):
        options.add_argument(flag)
    os.environ["SE_OFFLINE"] = "true"
    return options


# The event builder in one process: two readout units of four emulated FEDs, paced.
EVB_CONFIG = """
duration_s = 0
metrics_addr = ""
[evb]
output = "{out}"
min_free_bytes = 0
events_per_file = 200
trigger_rate_hz = 2000
build_timeout = 1000
builder_units = 2
rus = [{feds_1}, {feds_2}]
[evb.faults]
stops = [[{stopped_fed}, {stops_at}]]
"""

# The SW ROD: one FELIX card of two ROBs, 16 e-links, L1 accepts at 2 kHz until stopped.
SWROD_CONFIG = """
duration_s = 0
metrics_addr = ""
[swrod]
output_dir = "{out}"
max_file_mb = 1
cards = 1
robs_per_card = 2
l1a_rate_hz = 2000.0
max_l1as = 0
hlt_accept_every = 1
[swrod.felix]
elinks = 16
[swrod.felix.faults]
dead_elinks = [{{ elink = {dead_elink}, after_l1as = {stops_at} }}]
"""
# A FED of the event builder stops, an e-link of the SW ROD goes silent, this far into the
# run (both models take 2000 events a second): the source the shifter must spot.
SOURCE_STOPS_AFTER_S = 6.0


def feds(first: int) -> str:
    return "[" + ", ".join(f"{{ id = {i}, mean_bytes = 512, spread_bytes = 64 }}" for i in range(first, first + 4)) + "]"


def chain_config(out: Path) -> str:
    stop = f"stop_links = [{{ link = 3, after_s = {LINK_STOPS_AFTER_S} }}]"
    return CONFIG.format(out=out, rate_hz=5.0, extra=stop)


@contextmanager
def serve(tmp: Path, port: int, token: str | None = None, config_text: str | None = None):
    """`swdaq serve` on 127.0.0.1:`port` (with a token file if `token`, else with the token it
    makes, kept in tmp/runtime) of `config_text` (the chain with a link that stops by default),
    stopped at the end; its `console_url` is the address it printed."""
    config = tmp / "serve.toml"
    config.write_text(config_text or chain_config(tmp / "data"))
    args = [SWDAQ, "serve", "--config", str(config), "--addr", f"127.0.0.1:{port}"]
    if token:
        (tmp / "token").write_text(token + "\n")
        args += ["--token-file", str(tmp / "token")]
    env = {k: v for k, v in os.environ.items() if k != "SWDAQ_TOKEN"}
    env["XDG_RUNTIME_DIR"] = str(tmp / "runtime")
    with open(tmp / f"serve-{port}-{time.monotonic_ns()}.log", "w") as log:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("swdaq serve: listening on"), line
        line = proc.stdout.readline()
        assert line.startswith("swdaq serve: console http://"), line
        proc.console_url = line.split()[-1]
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def status(port: int, token: str | None = None) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/status")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def browser():
    with tempfile.TemporaryDirectory(prefix="swdaq-chromium-") as profile:
        driver = webdriver.Chrome(options=chromium(profile), service=Service(executable_path=CHROMEDRIVER))
        driver.set_script_timeout(10)
        try:
            yield driver
        finally:
            driver.quit()


def shot(driver, name: str) -> Path:
    """The whole page (beyond the window) as SHOTS/name.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    data = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path = SHOTS / f"{name}.png"
    path.write_bytes(base64.b64decode(data["data"]))
    return path


def wait(driver, what, timeout=20.0, why=""):
    """`what` true within `timeout`; else a failure that says `why` (written when the wait
    began) and what the page shows when it gave up."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: what(d))
    except TimeoutException:
        now = {e: driver.execute_script(f"const x = document.getElementById('{e}'); return x && x.textContent")
               for e in ("state", "answer")}
        raise AssertionError(f"{why} (after {timeout} s the page shows state {now['state']!r}, answer {now['answer']!r})")


def text(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def click(driver, command: str):
    button = driver.find_element(By.CSS_SELECTOR, f'button[data-command="{command}"]')
    wait(driver, lambda d: button.is_enabled(), why=f"{command} stays disabled; state {text(driver, 'state')}")
    button.click()


def answer(driver, timeout=60.0) -> str:
    """The answer the page shows to the command just sent."""
    box = driver.find_element(By.ID, "answer")
    wait(driver, lambda d: "waiting" not in box.get_attribute("class"), timeout, "no answer")
    return box.text


def state_is(driver, state: str, timeout=20.0):
    wait(driver, lambda d: text(d, "state").lower() == state, timeout, f"state {state}, is {text(driver, 'state')}")


def configure_and_start(driver, run: int, timeout=60.0):
    """Configure, then start run `run`, from the console's buttons, each answered."""
    click(driver, "configure")
    assert answer(driver).startswith("✔ configure: configured"), text(driver, "answer")
    click(driver, "start")
    assert answer(driver, timeout).startswith(f"✔ run {run} running"), text(driver, "answer")


# From the moment a source goes bad to its row marked on the page: up to two live intervals
# (a stopped source is silent only in the first whole second without its data; a dead e-link
# counts once the SW ROD's time-out has passed) and one poll of the page. The moment is the
# configured one on the run's data clock (a link's frames, events), which a loaded machine
# runs behind the wall clock, so the figure errs long: room for that too.
MARKED_WITHIN_S = 3.0


def seconds_to_mark(driver, started: float, bad_after_s: float, what: str) -> float:
    """How long after `bad_after_s` into the run (begun at monotonic `started`) the page marks
    a source bad, looked at every 50 ms; kept beside the screenshots."""
    deadline = time.monotonic() + bad_after_s + 10
    marked = "return document.querySelector('#sources tr.bad') !== null"
    while not driver.execute_script(marked):
        assert time.monotonic() < deadline, f"{what}: never marked"
        time.sleep(0.05)
    late = time.monotonic() - started - bad_after_s
    SHOTS.mkdir(parents=True, exist_ok=True)
    with open(SHOTS / "marked-after.txt", "a") as out:
        out.write(f"{what}: marked {late:.2f} s after it went bad\n")
    assert late < MARKED_WITHIN_S, f"{what}: marked {late:.2f} s after it went bad"
    return late


def plot_points(driver, key: str) -> int:
    return int(driver.find_element(By.CSS_SELECTOR, f'[data-plot="{key}"]').get_attribute("data-points") or 0)


def test_a_shifter_starts_watches_and_stops_a_run_and_sees_the_link_in_trouble(browser, tmp_path):
    port = free_port()
    with serve(tmp_path, port) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        enabled = lambda: {b.get_attribute("data-command") for b in d.find_elements(By.CSS_SELECTOR, "button[data-command]") if b.is_enabled()}
        # The server's table, not the page's: only configure now.
        wait(d, lambda _: enabled() == {"configure"}, why="buttons not from /status.commands")
        shot(d, "01-initial")

        click(d, "configure")
        assert answer(d).startswith("✔ configure: configured")
        state_is(d, "configured")
        wait(d, lambda _: enabled() == {"configure", "start", "trigger"})
        shot(d, "02-configured")

        click(d, "start")
        assert answer(d).startswith("✔ run 1 running"), text(d, "answer")
        started = time.monotonic()
        state_is(d, "running")
        assert enabled() == {"pause", "stop", "trigger"}
        # Figures move and the plots fill, one sample a second.
        wait(d, lambda _: plot_points(d, "input_mb_s") >= 4, 15, "the throughput plot does not grow")
        # Read in one script: the page redraws its tiles and rows every second.
        readout = lambda: d.execute_script("return document.querySelector('.tile[data-key=\"frames_per_s\"] .value').textContent")
        first = readout()
        wait(d, lambda _: readout() != first, 5, "the figures do not move")
        assert float(d.find_element(By.CSS_SELECTOR, '[data-plot="input_mb_s"]').get_attribute("data-last")) > 0
        rows = d.find_elements(By.CSS_SELECTOR, "#sources tbody tr")
        assert len(rows) == 4 and not d.find_elements(By.CSS_SELECTOR, "#sources tr.bad")
        shot(d, "03-running")

        # Link 3 stops: it goes to the top of the sources, marked, with why, and an alert names it.
        seconds_to_mark(d, started, LINK_STOPS_AFTER_S, "chain: link 3 stopped")
        source, kind, why = d.execute_script(
            "const r = document.querySelector('#sources tbody tr'); return [r.dataset.source, r.className, r.textContent]"
        )
        assert source == "link 3" and kind == "bad" and "silent" in why, (source, kind, why)
        assert len(d.find_elements(By.CSS_SELECTOR, "#sources tr.bad")) == 1
        wait(d, lambda _: "link 3: silent" in text(d, "alerts"), 5, "no alert for link 3")
        shot(d, "04-link-3-in-trouble")

        click(d, "pause")
        assert answer(d) == "✔ pause: paused"
        state_is(d, "paused")
        assert enabled() == {"resume", "stop", "trigger"}
        shot(d, "05-paused")
        click(d, "resume")
        state_is(d, "running")

        # A prescale of 0 is refused by the server, and the page says why.
        Select(d.find_element(By.ID, "trigger-source")).select_by_value("periodic")
        d.find_element(By.ID, "prescale").send_keys("0")
        click(d, "trigger")
        refused = answer(d)
        assert refused.startswith("✖ trigger refused (400)") and "prescale" in refused, refused
        shot(d, "06-refused-prescale")
        d.find_element(By.ID, "prescale").clear()

        click(d, "stop")
        stopped = answer(d)
        assert stopped.startswith("✔ stopped run 1"), stopped
        state_is(d, "configured")
        wait(d, lambda _: "Interrupted" in text(d, "summary"), 5, "no summary")
        assert "run 1" in text(d, "files") and ".hdf5" in text(d, "files")
        # The newest stored record: its number and file, its fragments' sizes, its drawing.
        wait(d, lambda _: text(d, "stored-caption").startswith("event "), 20, "no stored event")
        assert ".hdf5" in text(d, "stored-caption")
        assert d.find_elements(By.CSS_SELECTOR, "#fragments tbody tr")
        wait(d, lambda _: d.execute_script("const i = document.getElementById('display'); return !i.hidden && i.complete && i.naturalWidth") > 0, 20, "no event display")
        journal = text(d, "journal")
        for said in ("Start: configured -> starting (run 1)", "Pause: running -> paused", "link 3: silent", "Ended: stopping -> configured"):
            assert said in journal, said
        shot(d, "07-stopped-summary-files-display")

        # A logbook entry from the page goes to the last run, in the run registry.
        d.find_element(By.ID, "log-text").send_keys("beam lost at 02:14, HV trip in module 3")
        d.find_element(By.ID, "log-author").send_keys("shifter A")
        d.find_element(By.ID, "log-submit").click()
        wait(d, lambda _: text(d, "answer").startswith("✔ logbook entry"), 10, "no answer to the logbook entry")
        assert text(d, "answer") == "✔ logbook entry added to run 1", text(d, "answer")
        shown = json.loads(subprocess.run([SWDAQ, "runs", "show", "1", "--json", "--config", str(tmp_path / "serve.toml")],
                                          capture_output=True, text=True, check=True).stdout)
        assert [(e["author"], e["text"]) for e in shown["logbook"]] == [("shifter A", "beam lost at 02:14, HV trip in module 3")], shown["logbook"]
        # The runs on record, with the entry under its run.
        row = lambda: d.execute_script("const r = document.querySelector('#runs tbody tr[data-run=\"1\"]'); return r && [r.className, r.textContent]")
        wait(d, lambda _: row() and "shifter A: beam lost" in row()[1], 10, "the runs page does not show the entry")
        assert row()[0] == "" and "interrupted" in row()[1], row()
        shot(d, "08-logbook-entry-and-runs")

        # A run number that does not follow the last run's is refused, with why.
        d.find_element(By.ID, "run-number").send_keys("1")
        click(d, "start")
        refused = answer(d)
        assert refused.startswith("✖ start refused (409)") and "run numbers must increase" in refused, refused
        state_is(d, "configured")
        shot(d, "09-refused-run-number")


@pytest.mark.parametrize("model", ["evb", "swrod"])
def test_the_event_builder_and_the_sw_rod_run_from_the_same_page(browser, tmp_path, model):
    """The same page, no model-specific code beyond what /status says: the event builder
    (no pause, no trigger sources) and the SW ROD (pause, no trigger sources) are started,
    watched and stopped; the newest stored event shows each FED's or ROB's fragment size."""
    port = free_port()
    out = tmp_path / "data"
    stops_at = int(2000 * SOURCE_STOPS_AFTER_S)
    if model == "evb":
        config = EVB_CONFIG.format(out=out, feds_1=feds(100), feds_2=feds(200), stopped_fed=202, stops_at=stops_at)
        # The newest event has FED 202's fragment no more: 7 rows.
        sources, suffix, in_trouble = 7, ".raw", "FED 202"
    else:
        config = SWROD_CONFIG.format(out=out, dead_elink=3, stops_at=stops_at)
        sources, suffix, in_trouble = 2, ".data", "ROB 0x00710000"
    with serve(tmp_path, port, config_text=config) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        enabled = lambda: {b.get_attribute("data-command") for b in d.find_elements(By.CSS_SELECTOR, "button[data-command]") if b.is_enabled()}
        click(d, "configure")
        assert answer(d).startswith("✔ configure: configured"), text(d, "answer")
        wait(d, lambda _: text(d, "model") == "· " + model, 5, f"model {text(d, 'model')!r}")
        # Neither model has trigger sources to change: no trigger controls.
        wait(d, lambda _: enabled() == {"configure", "start"}, why=f"commands {enabled()}")
        assert not d.find_element(By.ID, "trigger-controls").is_displayed()

        click(d, "start")
        assert answer(d).startswith("✔ run 1 running"), text(d, "answer")
        started = time.monotonic()
        state_is(d, "running")
        wait(d, lambda _: d.find_elements(By.CSS_SELECTOR, "#sources tbody tr"), 5, "no sources listed")
        assert not d.find_elements(By.CSS_SELECTOR, "#sources tr.bad")
        wait(d, lambda _: plot_points(d, "event_hz") >= 4, 20, "the event-rate plot does not grow")
        tiles = lambda: d.execute_script("return [...document.querySelectorAll('#figures .tile .value')].map(e => e.textContent).join('|')")
        first = tiles()
        wait(d, lambda _: tiles() != first, 5, "the figures do not move")
        assert float(d.find_element(By.CSS_SELECTOR, '[data-plot="event_hz"]').get_attribute("data-last")) > 0
        shot(d, f"{model}-1-running")
        # The stopped FED or the ROB whose e-link went silent goes to the top, marked, with why.
        seconds_to_mark(d, started, SOURCE_STOPS_AFTER_S, f"{model}: {in_trouble} went bad")
        source, kind, why = d.execute_script(
            "const r = document.querySelector('#sources tbody tr'); return [r.dataset.source, r.className, r.textContent]"
        )
        assert source == in_trouble and kind == "bad", (source, kind, why)
        shot(d, f"{model}-2-source-in-trouble")
        # Both hold their trigger: the SW ROD's cards their L1 accepts, the event builder its
        # trigger clock.
        assert enabled() == {"pause", "stop"}
        click(d, "pause")
        assert answer(d) == "✔ pause: paused"
        state_is(d, "paused")
        shot(d, f"{model}-3-paused")
        click(d, "resume")
        resumed = answer(d)
        assert resumed == "✔ resume: running", resumed
        state_is(d, "running")

        click(d, "stop")
        stopped = answer(d, timeout=90)
        assert stopped.startswith("✔ stopped run 1"), stopped
        state_is(d, "configured")
        wait(d, lambda _: "Interrupted" in text(d, "summary"), 5, "no summary")
        assert "run 1" in text(d, "files") and suffix in text(d, "files")
        # The newest stored event: its number and file, one row per FED or ROB; no drawing.
        wait(d, lambda _: text(d, "stored-caption").startswith("event "), 20, "no stored event")
        assert suffix in text(d, "stored-caption")
        rows = d.find_elements(By.CSS_SELECTOR, "#fragments tbody tr")
        assert len(rows) == sources, [r.text for r in rows]
        if model == "evb":
            assert "FED 202 missing" in text(d, "stored-none"), text(d, "stored-none")
        assert not d.find_element(By.ID, "display").is_displayed()
        shot(d, f"{model}-4-stopped-summary-files-fragments")

        # A run number that does not follow the last run's is refused, with why.
        d.find_element(By.ID, "run-number").send_keys("1")
        click(d, "start")
        refused = answer(d)
        assert refused.startswith("✖ start refused (409)") and "run numbers must increase" in refused, refused


def children(pid: int) -> dict:
    """The command lines of `pid`'s child processes, by pid (from /proc)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


# Each model's applications on loopback, and the one killed: the chain's readout-1 (its link
# 1), the SW ROD's swrod-1 (its card's ROBs).
TOPOLOGIES = {
    "chain": ([("readout-0", "readout", "links = [0]"), ("readout-1", "readout", "links = [1]"),
               ("trigger", "trigger", ""), ("dfo", "dfo", ""), ("builder-0", "builder", "")], "readout-1"),
    "swrod": ([("swrod-0", "swrod", "cards = [0]"), ("swrod-1", "swrod", "cards = [1]"),
               ("hltsv", "hltsv", ""), ("hlt-0", "hlt", "")], "swrod-1"),
}

# The SW ROD as applications: two cards of two ROBs, one per `swrod` application.
SWROD_APPS_CONFIG = """
duration_s = 0
metrics_addr = ""
[swrod]
output_dir = "{out}"
max_file_mb = 1
cards = 2
robs_per_card = 2
l1a_rate_hz = 2000.0
max_l1as = 0
hlt_accept_every = 1
hlt_give_up_ms = 2000
[swrod.felix]
elinks = 16
"""


@pytest.mark.parametrize("model", ["chain", "swrod"])
def test_a_topology_s_applications_are_listed_and_one_gone_is_named(browser, tmp_path, model):
    """A model as applications on loopback: each listed with its host, state and heartbeat
    age; one killed is marked, its sources go silent at the top, and the journal names it."""
    apps, victim_name = TOPOLOGIES[model]
    port, *app_ports = free_ports(1 + len(apps))
    topology = "[topology]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\n" + "".join(
        f'[[topology.apps]]\nname = "{name}"\nkind = "{kind}"\naddress = "tcp://127.0.0.1:{app_port}"\n{extra}\n'
        for (name, kind, extra), app_port in zip(apps, app_ports))
    if model == "chain":
        config = CONFIG.format(out=tmp_path / "data", rate_hz=5.0, extra="").replace("links = 4", "links = 2")
    else:
        config = SWROD_APPS_CONFIG.format(out=tmp_path / "data")
    with serve(tmp_path, port, config_text=config + topology) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        configure_and_start(d, 1, timeout=90)
        rows = lambda: d.execute_script(
            "return [...document.querySelectorAll('#apps tbody tr')].map(r => [r.className, ...[...r.cells].map(c => c.textContent)])")
        wait(d, lambda _: len(rows()) == len(apps), 20, f"applications listed: {rows()}")
        wait(d, lambda _: all(r[4] == "running" for r in rows()), 20, f"not all running: {rows()}")
        # Every application's figures come in five times a second, the chain's dfo's too.
        wait(d, lambda _: all(r[5].endswith(" s") for r in rows()), 20, f"heartbeats: {rows()}")
        for marked, name, _, host, _, age in rows():
            assert marked == "" and host == "this machine" and float(age.split()[0]) < 5, (name, host, age)
        assert sorted(r[1] for r in rows()) == sorted(a[0] for a in apps)
        wait(d, lambda _: d.find_elements(By.CSS_SELECTOR, "#sources tbody tr"), 10, "no sources listed")
        wait(d, lambda _: not d.find_elements(By.CSS_SELECTOR, "#sources tr.bad"), 10, "a source is bad before any fault")
        shot(d, f"topology-{model}-1-running")

        # An application is killed: the page marks it; what it read keeps no stale rate but
        # goes silent, first and marked; the journal names it.
        (victim,) = [pid for pid, cmd in children(server.pid).items() if victim_name in cmd]
        os.kill(victim, 9)
        wait(d, lambda _: any(r[0] == "bad" and r[1] == victim_name for r in rows()), 10, f"{victim_name} not marked: {rows()}")
        top = lambda: d.execute_script(
            "const r = document.querySelector('#sources tbody tr'); return r && [r.dataset.source, r.className, r.textContent]")
        wait(d, lambda _: (top() or [None, ""])[1] == "bad" and "silent" in top()[2], 10, f"its sources are not silent: {top()}")
        # The row names the application that read it.
        assert victim_name in top()[2], top()
        if model == "chain":
            assert top()[0] == "link 1", top()
        shot(d, f"topology-{model}-2-application-gone")
        wait(d, lambda _: victim_name in text(d, "journal"), 20, f"the journal does not name {victim_name}")
        shot(d, f"topology-{model}-3-run-ended")


def test_without_the_token_nothing_loads_and_a_wrong_one_is_refused_and_counted(browser, tmp_path):
    port = free_port()
    with serve(tmp_path, port, token=TOKEN):
        d = browser
        d.get(f"http://127.0.0.1:{port}/")
        wait(d, lambda _: d.find_element(By.ID, "login").is_displayed(), why="no token asked for")
        assert not d.find_element(By.ID, "console").is_displayed()
        # Nothing about the system on the page: no state, no figures, no journal.
        assert text(d, "state").lower() == "token needed" and text(d, "journal") == "" and text(d, "figures") == ""
        shot(d, "09-token-asked")
        refused_before = status(port, TOKEN)["refused_requests"].get("401", 0)
        d.find_element(By.ID, "token").send_keys("not-the-token-but-long-enough")
        d.find_element(By.ID, "login-submit").click()
        wait(d, lambda _: text(d, "login-error") == "The token was refused.", why="wrong token not refused")
        assert not d.find_element(By.ID, "console").is_displayed()
        shot(d, "10-token-refused")
        # Each try is one refusal: the page does not poll with a token it knows is wrong.
        time.sleep(2)
        assert status(port, TOKEN)["refused_requests"]["401"] == refused_before + 1
        d.find_element(By.ID, "token").clear()
        d.find_element(By.ID, "token").send_keys(TOKEN)
        d.find_element(By.ID, "login-submit").click()
        state_is(d, "initial")
        assert d.find_element(By.ID, "console").is_displayed()
        click(d, "configure")
        assert answer(d).startswith("✔ configure")
        shot(d, "11-token-accepted")


def js_heap_after_gc(driver) -> int:
    driver.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    return driver.execute_cdp_cmd("Runtime.getHeapUsage", {})["usedSize"]


def test_the_page_keeps_working_through_a_two_minute_run_and_a_server_restart(browser, tmp_path):
    port = free_port()
    d = browser
    with serve(tmp_path, port) as server:
        d.get(server.console_url)
        # The token is kept by the page and gone from the address bar.
        assert d.current_url == f"http://127.0.0.1:{port}/", d.current_url
        state_is(d, "initial")
        click(d, "configure")
        state_is(d, "configured")
        click(d, "start")
        state_is(d, "running")
        time.sleep(20)
        heap = [js_heap_after_gc(d)]
        nodes = [d.execute_script("return document.getElementsByTagName('*').length")]
        for _ in range(5):
            time.sleep(20)
            heap.append(js_heap_after_gc(d))
            nodes.append(d.execute_script("return document.getElementsByTagName('*').length"))
        points = plot_points(d, "input_mb_s")
        assert 110 <= points <= 130, points
        # No growth but noise: the history is bounded and every table is redrawn in place.
        assert max(heap) - heap[0] < 2_000_000, heap
        assert max(nodes) - min(nodes) < 50, nodes
        print(f"two-minute run: JS heap after GC {heap} bytes, DOM elements {nodes}, {points} plot points")
        shot(d, "12-two-minutes")
        # The server goes away mid-run ...
    wait(d, lambda _: "server unreachable since" in text(d, "connection"), 10, "the loss is not shown")
    state_is(d, "unknown")
    assert not any(b.is_enabled() for b in d.find_elements(By.CSS_SELECTOR, "button[data-command]"))
    shot(d, "13-server-gone")
    # ... and a new one comes up on the same address, with the token kept for the port: the
    # page reconnects and says so.
    with serve(tmp_path, port):
        wait(d, lambda _: "reconnected at" in text(d, "connection"), 10, "no reconnection shown")
        assert "the server restarted" in text(d, "connection")
        state_is(d, "initial")
        # Nothing of the old server's is left on the page.
        assert not d.find_element(By.ID, "display").is_displayed() and plot_points(d, "input_mb_s") == 0
        assert text(d, "stored-caption") == "" and not d.find_element(By.ID, "fragments").is_displayed()
        click(d, "configure")
        state_is(d, "configured")
        shot(d, "14-reconnected")


# The event builder with online data-quality monitoring of every event, judged every second:
# FED 0's fragments of 1024 bytes, FED 1's of `fed1_bytes`.
DQM_EVB_CONFIG = """
[run]
output_dir = "{out}"
metrics_addr = ""
duration_s = {duration_s}
[evb]
builder_units = 1
min_free_bytes = 0
seed = {seed}
{pacing}
rus = [[{{ id = 0, mean_bytes = 1024, spread_bytes = 128 }}, {{ id = 1, mean_bytes = {fed1_bytes}, spread_bytes = 128 }}]]
[dqm]
enabled = true
sample_every = 1
max_core_share = 1.0
queue = 8192
judge_interval_s = 1
{reference}
"""
# From the start of a run whose FED has grown to its histogram shown Bad: a judgement (1 s)
# once the run has the entries to tell, and a fetch of the page (3 s), with room for a loaded
# machine.
DQM_BAD_WITHIN_S = 20


def test_the_data_quality_view_shows_a_grown_fed_bad_among_the_first_with_an_alert(browser, tmp_path):
    """A reference run of the event builder with [dqm] (swdaq run, one process); then, under
    swdaq serve, a run whose FED 1 sends fragments twice as large, judged against it: the
    page's data-quality view draws every histogram with its badge, FED 1's size Bad with its
    reason among the Bad ones that lead the grid (the events' size grew with it), FED 0's
    not Bad, and an alert names it."""
    out = tmp_path / "data"
    reference_config = tmp_path / "reference.toml"
    reference_config.write_text(DQM_EVB_CONFIG.format(
        out=out, duration_s=30, seed=1, pacing="max_events = 5000\npaced = false", fed1_bytes=1024, reference=""))
    done = subprocess.run([SWDAQ, "run", "--json", "--config", str(reference_config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    reference_run = json.loads(done.stdout)["run_number"]
    config = DQM_EVB_CONFIG.format(
        out=out, duration_s=0, seed=2, pacing="trigger_rate_hz = 2000", fed1_bytes=2048, reference=f"reference_run = {reference_run}")
    port = free_port()
    with serve(tmp_path, port, config_text=config) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        wait(d, lambda _: text(d, "dqm-none") == "no run yet", 10, f"before a run: {text(d, 'dqm-none')!r}")
        configure_and_start(d, reference_run + 1)
        boxes = lambda: d.execute_script(
            "return [...document.querySelectorAll('#dqm-grid .dqm-hist')].map(b => [b.dataset.hist,"
            " b.querySelector('.badge').textContent, b.querySelector('.reason').textContent, b.dataset.axis,"
            " b.querySelector('canvas') ? b.querySelector('canvas').width : 0])")

        def grown_fed_bad_and_leading(_):
            shown = boxes()
            names = [b[0] for b in shown]
            return "fed_size_0001" in names and all(b[1] == "Bad" for b in shown[:names.index("fed_size_0001") + 1])

        wait(d, grown_fed_bad_and_leading, DQM_BAD_WITHIN_S, f"FED 1 not Bad among the first: {boxes()}")
        shown = boxes()
        qualities = [b[1] for b in shown]
        order = {"Bad": 0, "Undetermined": 1, "Good": 2}
        assert [order[q] for q in qualities] == sorted(order[q] for q in qualities), f"not worst first: {qualities}"
        by_name = {b[0]: b for b in shown}
        assert {"fed_size_0000", "fed_size_0001", "event_size", "feds_per_event"} <= by_name.keys(), by_name.keys()
        assert by_name["fed_size_0000"][1] != "Bad", by_name["fed_size_0000"]
        _, _, reason, axis, canvas_width = by_name["fed_size_0001"]
        assert reason.startswith("Chi2") and "below" in reason, reason
        assert axis == "fragment size (bytes)", axis
        assert all(b[4] > 0 for b in shown), f"a histogram not drawn: {shown}"
        assert "against run " + str(reference_run) in text(d, "dqm-caption"), text(d, "dqm-caption")
        # Each histogram is drawn over the reference run's, scaled to this run's entries.
        drawn = {b.get_attribute("data-hist"): b.get_attribute("data-reference") for b in d.find_elements(By.CSS_SELECTOR, ".dqm-hist")}
        assert all(drawn[name] == "drawn" for name in ("fed_size_0000", "fed_size_0001", "event_size")), drawn
        assert f"run {reference_run}, scaled" in text(d, "dqm-grid"), text(d, "dqm-grid")
        # The server's alert (as Prometheus's SwdaqDataQualityBad), in the page's alerts.
        wait(d, lambda _: d.find_elements(By.CSS_SELECTOR, '#alerts .alert.error[data-key="SwdaqDataQualityBad:fed_size_0001"]'), 5, f"no alert: {text(d, 'alerts')}")
        assert "data quality: fed_size_0001 is Bad" in text(d, "alerts")
        kept = shot(d, "dqm-1-grown-fed-bad")
        shutil.copy(kept, tmp_path / kept.name)

        click(d, "stop")
        assert answer(d, timeout=90).startswith(f"✔ stopped run {reference_run + 1}"), text(d, "answer")
        # The run's final set stays on the page, said to be the ended run's; the alert goes.
        wait(d, lambda _: "(ended)" in text(d, "dqm-caption") and "(final)" in text(d, "dqm-caption"), 10, text(d, "dqm-caption"))
        assert by_name.keys() <= {b[0] for b in boxes()}
        wait(d, lambda _: not d.find_elements(By.CSS_SELECTOR, '#alerts [data-key^="SwdaqDataQualityBad"]'), 5, "the alert outlives the run")


# The chain with [dqm]: one link, periodic records at 40 Hz (no self-trigger, which a noisy
# channel would make fire), every one sampled; `faults` adds lines to [emulator.sim] (the same
# seed, so the same pedestals, as the reference).
DQM_CHAIN_CONFIG = """
[run]
output_dir = "{out}"
metrics_addr = ""
duration_s = {duration_s}
[emulator]
links = 1
[emulator.sim]
seed = 1
{faults}
[trigger.periodic]
enabled = true
rate_hz = 40.0
[trigger.multiplicity]
enabled = false
[trigger.adc_sum]
enabled = false
[trigger.track]
enabled = false
[dqm]
enabled = true
sample_every = 1
max_core_share = 1.0
min_entries = 10
judge_interval_s = 1
{reference}
"""
# From the start of the chain's run to its dead and noisy channels shown Bad: 10 records (a
# quarter of a second) to judge, a judgement (1 s), a fetch of the page (3 s), room for a
# loaded machine.
DQM_CHANNELS_BAD_WITHIN_S = 10


def test_the_chain_s_data_quality_view_names_a_dead_and_a_noisy_channel_bad(browser, tmp_path):
    """A clean reference run of the chain with [dqm] (swdaq run); then, under swdaq serve, a
    run of the same detector with the link's channel 5 dead and channel 9 noisy (offline 1573
    and 1577), judged against it: within 10 s of the start the page shows the link's dead and
    noisy channel maps Bad, each naming its channel by number."""
    out = tmp_path / "data"
    reference_config = tmp_path / "reference.toml"
    reference_config.write_text(DQM_CHAIN_CONFIG.format(out=out, duration_s=1.5, faults="", reference=""))
    done = subprocess.run([SWDAQ, "run", "--json", "--config", str(reference_config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reference_run = json.loads(done.stdout)["run_number"]
    config = DQM_CHAIN_CONFIG.format(
        out=out, duration_s=0, faults="dead_channels = [1573]\nnoisy_channels = [1577]", reference=f"reference_run = {reference_run}")
    with serve(tmp_path, free_port(), config_text=config) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        configure_and_start(d, reference_run + 1)
        started = time.monotonic()
        boxes = lambda: d.execute_script(
            "return [...document.querySelectorAll('#dqm-grid .dqm-hist')].map(b => [b.dataset.hist,"
            " b.querySelector('.badge').textContent, b.querySelector('.reason').textContent])")
        maps = {"dead_channels_link_0000": 5, "noisy_channels_link_0000": 9}

        def both_bad_by_number(_):
            by_name = {b[0]: b for b in boxes()}
            return all(
                name in by_name and by_name[name][1] == "Bad" and by_name[name][2].startswith(f"channel of the link {channel}:")
                for name, channel in maps.items())

        wait(d, both_bad_by_number, DQM_CHANNELS_BAD_WITHIN_S - (time.monotonic() - started), f"the channels not Bad by number: {boxes()}")
        kept = shot(d, "dqm-2-chain-dead-and-noisy-channels")
        shutil.copy(kept, tmp_path / kept.name)
        click(d, "stop")
        assert answer(d, timeout=60).startswith(f"✔ stopped run {reference_run + 1}"), text(d, "answer")


# The event builder without [dqm] (its built-in monitoring off: a user's analyzer needs none),
# files of 200 events so that a running system closes one every tenth of a second at 2 kHz.
ANALYZER_EVB_CONFIG = DQM_EVB_CONFIG.split("[dqm]")[0]
ANALYZER = ROOT / "examples" / "dqm_analyzer.py"
ANALYZER_AXIS = ["--max-bytes", "16384", "--bins", "128"]
# From the start of the run to the analyzer's histogram shown Bad: its first files closed
# and read (a second), a publication (1 s), a fetch of the page (3 s), room for a loaded
# machine.
ANALYZER_BAD_WITHIN_S = 30


def test_a_user_analyzer_s_histograms_appear_judged_against_its_reference(browser, tmp_path):
    """The example analyzer (examples/dqm_analyzer.py, swdaq.dqm) reads a reference run of the
    event builder offline and saves its set; then, under swdaq serve, it follows a run whose
    FED 1 sends fragments twice as large as the run's files close, publishing to the console:
    its histograms appear in the data-quality view under its name, the event size judged Bad
    against its reference with the reference drawn, and an alert names it."""
    reference_config = tmp_path / "reference.toml"
    reference_config.write_text(ANALYZER_EVB_CONFIG.format(
        out=tmp_path / "reference-data", duration_s=30, seed=1,
        pacing="max_events = 3000\npaced = false\nevents_per_file = 200", fed1_bytes=1024, reference=""))
    done = subprocess.run([SWDAQ, "run", "--json", "--config", str(reference_config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    reference_files = sorted((tmp_path / "reference-data").rglob("*.raw"))
    assert len(reference_files) >= 10, reference_files
    reference_set = tmp_path / "sizes_reference.h5"
    offline = subprocess.run(
        [sys.executable, str(ANALYZER), "--files", *map(str, reference_files), "--save", str(reference_set), *ANALYZER_AXIS],
        capture_output=True, text=True, timeout=120)
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.startswith("3000 events"), offline.stdout

    out = tmp_path / "data"
    config = ANALYZER_EVB_CONFIG.format(
        out=out, duration_s=0, seed=2, pacing="trigger_rate_hz = 2000\nevents_per_file = 200", fed1_bytes=2048, reference="")
    port = free_port()
    with serve(tmp_path, port, config_text=config) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        token = server.console_url.split("#token=")[1]
        run = status(port, token)["last_run_number"] or 0
        configure_and_start(d, run + 1)
        env = dict(os.environ, SWDAQ_TOKEN=token)
        analyzer = subprocess.Popen(
            [sys.executable, str(ANALYZER), "--follow", str(out), "--url", f"http://127.0.0.1:{port}",
             "--reference", str(reference_set), "--publish-every", "1", "--idle-timeout", "20"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            boxes = lambda: d.execute_script(
                "return [...document.querySelectorAll('#dqm-grid .dqm-hist')].map(b => [b.dataset.hist,"
                " b.querySelector('.badge').textContent, b.querySelector('.reason').textContent,"
                " b.querySelector('.source') ? b.querySelector('.source').textContent : '', b.dataset.reference])")

            def event_size_bad(_):
                by_name = {b[0]: b for b in boxes()}
                return by_name.get("sizes.event_size", [None, None])[1] == "Bad"

            wait(d, event_size_bad, ANALYZER_BAD_WITHIN_S, f"the analyzer's event size not Bad: {boxes()}; {text(d, 'dqm-counts')}")
            by_name = {b[0]: b for b in boxes()}
            assert {"sizes.event_size", "sizes.fragment_size"} <= by_name.keys(), by_name.keys()
            _, _, reason, source, reference = by_name["sizes.event_size"]
            assert source == "analyzer sizes" and reference == "drawn", by_name["sizes.event_size"]
            assert reason.startswith("Chi2") and "below" in reason, reason
            assert "analyzer sizes:" in text(d, "dqm-counts"), text(d, "dqm-counts")
            assert "sizes's reference, scaled" in text(d, "dqm-grid"), text(d, "dqm-grid")
            wait(d, lambda _: d.find_elements(By.CSS_SELECTOR, '#alerts .alert.error[data-key="SwdaqDataQualityBad:sizes.event_size"]'),
                 10, f"no alert: {text(d, 'alerts')}")
            kept = shot(d, "dqm-3-user-analyzer-bad")
            shutil.copy(kept, tmp_path / kept.name)
            click(d, "stop")
            assert answer(d, timeout=90).startswith(f"✔ stopped run {run + 1}"), text(d, "answer")
        finally:
            try:
                stdout, stderr = analyzer.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                analyzer.kill()
                stdout, stderr = analyzer.communicate()
        assert analyzer.returncode == 0, stderr
        assert "unreadable" not in stderr, stderr


def test_the_transfer_s_backlog_is_shown_and_drains_to_every_file_verified(browser, tmp_path):
    """With [run.transfer] to a directory (a mounted EOS area's stand-in), the page's transfer
    line names the destination and the backlog from the start of a run; after a short
    event-builder run's stop the agent copies and verifies every data file the run wrote, and
    the line says so: backlog 0, at least as many verified as the run's files, each of which is at
    the destination byte for byte."""
    permanent = tmp_path / "permanent"
    config = ANALYZER_EVB_CONFIG.format(
        out=tmp_path / "data", duration_s=0, seed=3, pacing="trigger_rate_hz = 500\nevents_per_file = 200", fed1_bytes=1024, reference="")
    config += f'[run.transfer]\ndestination = "{permanent}"\npoll_s = 0.2\n'
    line = lambda: text(d, "transfer")
    with serve(tmp_path, free_port(), config_text=config) as server:
        d = browser
        d.get(server.console_url)
        state_is(d, "initial")
        configure_and_start(d, 1)
        wait(d, lambda _: line().startswith(f"transfer to {permanent}: backlog "), 10, "no transfer line")
        time.sleep(3)
        click(d, "stop")
        assert answer(d, timeout=90).startswith("✔ stopped run 1"), text(d, "answer")
        # The FRD files: what the run registry records of an event-builder run (its `.jsn`
        # bookkeeping is not on record, so not transferred).
        written = sorted((tmp_path / "data").rglob("*.raw"))
        assert len(written) >= 4, written

        def drained(_):
            found = re.search(r"backlog (\d+) files, .* · (\d+) verified since the server started", line())
            return found and found[1] == "0" and int(found[2]) >= len(written)

        wait(d, drained, 60, "the backlog did not drain to every file verified")
        kept = shot(d, "transfer-backlog-drained")
        shutil.copy(kept, tmp_path / kept.name)
        copies = {p.name: p for p in permanent.rglob("*") if p.is_file()}
        for original in written:
            assert original.name in copies, f"{original.name} not at the destination: {sorted(copies)}"
            assert copies[original.name].read_bytes() == original.read_bytes(), original.name
