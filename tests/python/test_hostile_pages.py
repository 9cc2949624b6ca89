"""Web pages the operator happens to have open cannot drive `swdaq serve` (issue 33): in Debian's
headless Chromium, a page of another origin (http://localhost:OTHER, while the server is
http://127.0.0.1:PORT) sends `fetch(no-cors)` commands, auto-submits an `enctype=text/plain`
form, tries to read `/status` and frames the console; a page reached by a host name resolved to
127.0.0.1 (DNS rebinding: `evil.test`, mapped by Chromium's host resolver rules) asks from the
server's own port. With the token the server makes and with one the operator gives, none of
them configures, starts, stops or reads anything; the operator's console and `swdaq ctl` still
do. The hostile page's screenshot is kept in $SWDAQ_SCREENSHOTS (default
target/console-screenshots) as hostile-page-*.png."""

import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swdaq_paths import SWDAQ, free_port
from test_console import CHROMEDRIVER, CONFIG, chromium, serve, shot, text, wait

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:  # pragma: no cover - test_console's skip says so
    webdriver = None

from test_console import pytestmark  # noqa: F401,E402 - the same skip

OPERATOR_TOKEN = "operator-given-token-0123456789"

# What a hostile page does as soon as it loads: every command it can send without asking the
# server first, an attempt to read the status, the console in an invisible frame. Each
# outcome is written into #log for the test (and the screenshot) to read.
HOSTILE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cute cats</title></head>
<body style="font: 16px sans-serif">
<h1>Cute cats (a page that tries to drive swdaq serve at {target})</h1>
<pre id="log"></pre>
<iframe name="sink" id="sink" style="width:400px;height:120px"></iframe>
<iframe id="framed" src="{console}" style="width:400px;height:200px"></iframe>
<form id="form" method="POST" action="{target}/start" enctype="text/plain" target="sink">
  <input type="hidden" name='{{"run_number": 4242, "x": "' value='"}}'>
</form>
<script>
const log = (line) => (document.getElementById("log").textContent += line + "\\n");
async function attack() {{
  for (const path of ["/configure", "/start", "/stop", "/dqm/published"]) {{
    try {{
      await fetch("{target}" + path, {{
        method: "POST", mode: "no-cors",
        headers: {{"Content-Type": "text/plain"}},
        body: '{{"run_number": 4242}}',
      }});
      log("no-cors POST " + path + ": sent (answer opaque)");
    }} catch (e) {{ log("no-cors POST " + path + ": " + e); }}
  }}
  try {{
    const r = await fetch("{target}/status");
    log("read /status: " + r.status + " " + (await r.text()).slice(0, 80));
  }} catch (e) {{ log("read /status: blocked (" + e + ")"); }}
  document.getElementById("form").submit();
  log("text/plain form submitted");
  log("done");
}}
attack();
</script></body></html>
"""


class HostilePage(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


def hostile_site(target: str, console: str):
    """A server of the hostile page on 127.0.0.1 (reached as localhost): (server, port)."""
    handler = type("Page", (HostilePage,), {"page": HOSTILE_PAGE.format(target=target, console=console).encode()})
    site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    return site, site.server_address[1]


def operator(port: int, token: str, method: str = "GET", path: str = "/status") -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def rebinding_browser():
    """Chromium where evil.test resolves to 127.0.0.1, as a rebound name would."""
    with tempfile.TemporaryDirectory(prefix="swdaq-chromium-") as profile:
        options = chromium(profile, "--host-resolver-rules=MAP evil.test 127.0.0.1")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        driver.set_script_timeout(10)
        try:
            yield driver
        finally:
            driver.quit()


def fetch_from_page(d, method: str, path: str) -> str:
    """What a script of the page now open gets from `fetch(path)`: status and body, or the error."""
    return d.execute_async_script(
        """const [method, path, done] = arguments;
        fetch(path, {method, headers: {"Content-Type": "application/json"}, body: method === "POST" ? "{}" : undefined})
          .then(async (r) => done(r.status + " " + (await r.text())), (e) => done("error " + e));""",
        method, path)


@pytest.mark.parametrize("given_token", [False, True], ids=["token-made", "token-given"])
def test_pages_of_other_origins_and_host_names_cannot_drive_or_read_the_server(rebinding_browser, tmp_path, given_token):
    port = free_port()
    d = rebinding_browser
    with serve(tmp_path, port, token=OPERATOR_TOKEN if given_token else None) as server:
        token = OPERATOR_TOKEN if given_token else server.console_url.split("#token=")[1]
        assert operator(port, token, "POST", "/configure")["state"] == "configured"
        target = f"http://127.0.0.1:{port}"
        # The console's address with its token, as if the page had it: framing is refused anyway.
        site, site_port = hostile_site(target, server.console_url)
        try:
            d.get(f"http://localhost:{site_port}/")
            wait(d, lambda _: "done" in text(d, "log"), why="the hostile page did not run")
            time.sleep(2)  # the form's post and the frame load
            log = text(d, "log")
            path = shot(d, f"hostile-page-{'token-given' if given_token else 'token-made'}")
            print(f"hostile page log:\n{log}\nscreenshot: {path}")
            assert "read /status: blocked" in log, log
            # The framed console shows nothing of it: the browser refused to draw it.
            d.switch_to.frame(d.find_element(By.ID, "framed"))
            assert d.find_elements(By.ID, "console") == [] and d.find_elements(By.ID, "state") == []
            d.switch_to.default_content()
        finally:
            site.shutdown()
        # A page reached by a name rebound to 127.0.0.1, on the server's own port: its
        # scripts are same-origin as far as the browser knows.
        d.get(f"http://evil.test:{port}/")
        assert "this server does not answer to" in d.find_element(By.TAG_NAME, "body").text
        for method, path in [("GET", "/status"), ("GET", "/state"), ("POST", "/start"), ("POST", "/configure"),
                             ("GET", "/runs"), ("POST", "/log"), ("POST", "/dqm/published"), ("GET", "/dqm")]:
            answer = fetch_from_page(d, method, path)
            assert answer.startswith("421 "), f"{method} {path}: {answer}"
        shot(d, f"hostile-rebound-{'token-given' if given_token else 'token-made'}")

        status = operator(port, token)
        assert status["state"] == "configured", status["state"]
        assert status["run"] is None and status["last_run_number"] is None, status
        refused = status["refused_requests"]
        assert refused.get("403", 0) >= 5 and refused.get("421", 0) >= 7, refused
        journal = json.dumps(status["journal"])
        assert "4242" not in journal and journal.count("Configure") == 1, journal

        # The operator's own tools still work: swdaq ctl, and the console itself.
        env = {k: v for k, v in os.environ.items() if k != "SWDAQ_TOKEN"}
        env["XDG_RUNTIME_DIR"] = str(tmp_path / "runtime")
        ctl = [SWDAQ, "ctl", "--addr", f"127.0.0.1:{port}"]
        if given_token:
            ctl += ["--token-file", str(tmp_path / "token")]
        out = subprocess.run(ctl + ["state"], capture_output=True, text=True, env=env, timeout=30)
        assert out.returncode == 0 and json.loads(out.stdout)["state"] == "configured", out.stderr
        if not given_token:
            d.get(server.console_url)
            wait(d, lambda _: text(d, "state").lower() == "configured", why="the operator's console does not load")
