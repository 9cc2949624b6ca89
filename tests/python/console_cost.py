"""What ten open consoles cost a running chain: alternating runs of `swdaq serve` with no page
open and with ten (real pages in one headless Chromium, each polling /status five times a second
and /history every second, and fetching /display.png every 10 s), compared on what the run feels: frames dropped,
decisions dropped busy, trigger and build latency, and CPU per thread (the run's summary reads
/proc for every thread of the process, the console's HTTP threads among them).

The browser runs at nice 19 (`--idle-browser`: in the SCHED_IDLE class, which the kernel runs
only when no other thread wants the core, with its profile and disk cache in /dev/shm), so it takes as little as it can of the CPU the run
wants: on a real system it runs on the operator's machine, not the DAQ host; what is measured is
the server's side.

  SWDAQ_BIN=target/release/swdaq .venv/bin/python tests/python/console_cost.py [--seconds 30] [--rounds 2] [--no-display] [--replay]

Prints one line per run and the per-condition means (recorded in BENCHMARKS.md)."""

import argparse
import json
import threading
import os
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from swdaq_paths import SWDAQ, free_port
from test_console import CHROMEDRIVER, CONFIG, chromium



def authorized(url: str, method: str = "GET") -> urllib.request.Request:
    """A request showing the token the server made (`TOKEN`)."""
    return urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {TOKEN}"})


def post(base: str, path: str) -> dict:
    with urllib.request.urlopen(authorized(base + path, "POST"), timeout=120) as r:
        return json.loads(r.read())


def open_pages(base: str, pages: int, profile: str, display: bool):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Every tab polls as a tab in front does.
    options = chromium(profile, "--disable-background-timer-throttling", "--disable-renderer-backgrounding")
    # nice 19 (or SCHED_IDLE) for the driver and, inherited, the browser it starts.
    def lower_priority():
        os.nice(19)
        if IDLE_BROWSER:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    service = Service(executable_path=CHROMEDRIVER, popen_kw={"preexec_fn": lower_priority})
    driver = webdriver.Chrome(options=options, service=service)
    for page in range(pages):
        if page:
            driver.switch_to.new_window("tab")
        if not display:
            # This tab never asks for the event display (drawing it reads HDF5 in the run's
            # process): separates its cost from the polling's.
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*display.png*"]})
        driver.get(f"{base}/#token={TOKEN}")
    return driver


# Set from --idle-browser.
IDLE_BROWSER = False
# The token the server made, from the console address it printed.
TOKEN = ""

# As console.js asks: /status every POLL_S, /history every HISTORY_EVERY polls, the display
# every DISPLAY_EVERY polls.
POLL_S = 0.2
HISTORY_EVERY = 5
DISPLAY_EVERY = 50


class Replay:
    """The requests of `pages` consoles without a browser: /status five times a second,
    /history?since each second, every 10 s /display.png (unless not `display`), as console.js
    sends them."""

    def __init__(self, base: str, pages: int, display: bool):
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.page, args=(base, display), daemon=True) for _ in range(pages)]
        for t in self.threads:
            t.start()

    def page(self, base: str, display: bool):
        since, tick = None, 0
        while not self.stop.wait(POLL_S):
            try:
                urllib.request.urlopen(authorized(base + "/status"), timeout=10).read()
                if tick % HISTORY_EVERY == 0:
                    history = json.loads(urllib.request.urlopen(authorized(base + "/history" + (f"?since={since}" if since else "")), timeout=10).read())
                    since = history["t"][-1] if history["t"] else since
                if display and tick % DISPLAY_EVERY == 0:
                    try:
                        urllib.request.urlopen(authorized(base + "/display.png"), timeout=30).read()
                    except urllib.error.HTTPError:
                        pass
                tick += 1
            except OSError:
                pass

    def quit(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def one_run(base: str, seconds: float, pages: int, profile: str, display: bool, replay: bool) -> dict:
    if not pages:
        clients = None
    elif replay:
        clients = Replay(base, pages, display)
    else:
        clients = open_pages(base, pages, profile, display)
    try:
        post(base, "/configure")
        post(base, "/start")
        time.sleep(seconds)
        summary = post(base, "/stop")
    finally:
        if clients:
            clients.quit()
    cpu = dict(summary["thread_cpu_share"])
    return {
        "pages": pages,
        "frames_dropped": sum(link["dropped"] for link in summary["links"]),
        "dropped_busy": summary["trigger"]["dropped_busy"],
        "trigger_p50_ms": summary["trigger"]["latency_p50_ms"],
        "trigger_p99_ms": summary["trigger"]["latency_p99_ms"],
        "build_p99_ms": summary["records"]["build_latency_p99_ms"],
        "readout_cpu": sum(v for k, v in cpu.items() if k.startswith("readout")),
        "trigger_cpu": cpu.get("trigger", 0.0),
        "builder_cpu": cpu.get("record-builder", 0.0),
        "store_cpu": cpu.get("store-writer", 0.0),
        "control_http_cpu": sum(v for k, v in cpu.items() if k.startswith("control-http")),
        "process_cpu": sum(cpu.values()),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pages", type=int, default=10)
    p.add_argument("--no-display", action="store_true", help="the pages do not fetch /display.png")
    p.add_argument("--replay", action="store_true", help="no browser: the pages' requests, sent from Python")
    p.add_argument("--idle-browser", action="store_true", help="the browser in the SCHED_IDLE class, not only at nice 19")
    args = p.parse_args()
    global IDLE_BROWSER, TOKEN
    IDLE_BROWSER = args.idle_browser
    with tempfile.TemporaryDirectory(prefix="swdaq-console-cost-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "serve.toml").write_text(CONFIG.format(out=tmp / "data", rate_hz=10.0, extra=""))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k != "SWDAQ_TOKEN"}
        env["XDG_RUNTIME_DIR"] = str(tmp / "runtime")
        serve = subprocess.Popen([SWDAQ, "serve", "--config", str(tmp / "serve.toml"), "--addr", f"127.0.0.1:{port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            assert serve.stdout.readline().startswith("swdaq serve: listening")
            TOKEN = serve.stdout.readline().strip().split("#token=")[1]
            runs = []
            for _ in range(args.rounds):
                for pages in (0, args.pages):
                    # With --idle-browser the profile (and the browser's disk cache in it) is in
                    # memory too: SCHED_IDLE yields the CPU, not the disk the run writes to.
                    shm = "/dev/shm" if args.idle_browser and os.path.isdir("/dev/shm") else None
                    with tempfile.TemporaryDirectory(prefix="swdaq-chromium-", dir=shm) as profile:
                        r = one_run(base, args.seconds, pages, profile, not args.no_display, args.replay)
                    print(json.dumps(r), flush=True)
                    runs.append(r)
        finally:
            serve.terminate()
            serve.wait(timeout=60)
    for pages in (0, args.pages):
        mine = [r for r in runs if r["pages"] == pages]
        means = {k: round(statistics.mean(r[k] for r in mine), 4) for k in mine[0] if k != "pages"}
        spread = {k: round(max(r[k] for r in mine) - min(r[k] for r in mine), 4) for k in mine[0] if k != "pages"}
        print(f"{pages} pages, mean of {len(mine)}: {json.dumps(means)}")
        print(f"{pages} pages, spread (max - min): {json.dumps(spread)}")


if __name__ == "__main__":
    main()
