// swdaq console: polls run control's /status five times a second (a source that goes bad
// shows within a second), draws what it holds in the one
// `Live` schema every model reports, plots /history with uPlot and sends the commands the
// server says are allowed now. It keeps no copy of the transition table and no state of
// its own beyond ten minutes of history (bounded) and the token (this tab only).
//
// The token is sent as `Authorization: Bearer`, never as a cookie: a browser attaches a
// cookie to any page's request to this host (other ports included), a header only to this
// page's own. It comes once in the address `swdaq serve` prints (`#token=...`: a fragment
// never reaches a server or a Referer), is kept in this tab's sessionStorage (only pages of
// this origin can read it) and dropped from the address bar at once.
"use strict";

const POLL_MS = 200;
// The history holds a sample a second at most: asked for no more often.
const HISTORY_EVERY_MS = 1000;
const SPAN_S = 600;
// Points kept per series: ten minutes at one a second, and room for gaps.
const MAX_POINTS = 720;
// A gap longer than this between samples (a run ended, the server restarted) is not joined.
const GAP_S = 5;
// The newest stored event is fetched this often while a run stores data; after the run,
// once more when the server reads anew (it keeps a reading 5 s), for the run's last event.
const STORED_EVERY_MS = 10000;
const STORED_FINAL_AFTER_MS = 6000;
// Fragments listed of the newest stored event (the rest counted).
const MAX_FRAGMENT_ROWS = 64;
// The data-quality histograms are fetched this often (the server judges them every
// dqm.judge_interval_s, 5 s by default; a Bad one is among the server's alerts).
const DQM_EVERY_MS = 3000;
const SERIES = [
  { key: "input_mb_s", title: "Input throughput", unit: "MB/s", scale: 1, color: "#1f5fbf" },
  { key: "event_hz", title: "Trigger / event rate", unit: "Hz", scale: 1, color: "#1f8a4c" },
  { key: "backlog", title: "Backlog (fullest queue)", unit: "%", scale: 100, color: "#7b3fb8" },
  { key: "throttled", title: "Throttled", unit: "% of time", scale: 100, color: "#b86e00" },
  { key: "drops_per_s", title: "Drops", unit: "/s", scale: 1, color: "#c62828" },
  { key: "errors_per_s", title: "Errors", unit: "/s", scale: 1, color: "#8a1c1c" },
];

const $ = (id) => document.getElementById(id);
const givenToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (givenToken) {
  sessionStorage.setItem("swdaq-token", givenToken);
  // `history` below is the plots'; the browser's is window.history.
  window.history.replaceState(null, "", location.pathname + location.search);
}
let token = sessionStorage.getItem("swdaq-token");
let lastStatus = null;
let serverStarted = null;
let lostSince = null;
let backAt = null;
let busy = null; // the command waiting for its answer
// Set while the page waits for the operator's token: no request is sent meanwhile.
let waitingForToken = false;
const history = { t: [] };
SERIES.forEach((s) => (history[s.key] = []));
const plots = {};
let historyPulledAt = 0;
let storedFetchedAt = 0;
let storedRun = null;
let storedFinal = false;
let displayUrl = null;
let dqmFetchedAt = 0;
let lastDqm = null;
// Each drawn histogram by name: its box, its uPlot and the binning it was made for.
const dqmPlots = new Map();

// ---------- helpers ----------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "title") e.title = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ""));
  return e;
}
function fmt(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + " k";
  const d = digits ?? (a >= 100 || Number.isInteger(v) ? 0 : a >= 10 ? 1 : 2);
  return v.toFixed(d);
}
function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour12: false });
}
function duration(s) {
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(sec).padStart(2, "0");
}
function bytes(n) {
  if (n === null || n === undefined) return "";
  return n >= 1e9 ? (n / 1e9).toFixed(2) + " GB" : n >= 1e6 ? (n / 1e6).toFixed(1) + " MB" : (n / 1e3).toFixed(1) + " kB";
}
function basename(p) {
  return String(p).split("/").pop();
}

// ---------- the server ----------
async function api(method, path, body) {
  const headers = {};
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(path, {
    method,
    headers,
    cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function poll() {
  try {
    const r = await api("GET", "/status");
    if (r.status === 401) {
      askForToken(token ? "The token was refused." : "");
      waitingForToken = true;
      return;
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    const status = await r.json();
    $("login").hidden = true;
    $("console").hidden = false;
    connected(status);
    render(status);
    if (Date.now() - historyPulledAt >= HISTORY_EVERY_MS) {
      historyPulledAt = Date.now();
      await pullHistory();
    }
    await maybeFetchStored(status);
    await maybeFetchDqm(status);
    await maybeFetchRuns(status);
  } catch (e) {
    disconnected(e);
  } finally {
    if (!waitingForToken) setTimeout(poll, POLL_MS);
  }
}

function askForToken(why) {
  $("console").hidden = true;
  $("login").hidden = false;
  $("state").textContent = "token needed";
  $("state").className = "state";
  $("login-error").textContent = why;
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("swdaq-token", token);
  $("login-error").textContent = "checking…";
  if (waitingForToken) {
    waitingForToken = false;
    poll();
  }
});

function connected(status) {
  const started = status.server && status.server.started_at;
  const now = Date.now() / 1000;
  if (lostSince !== null) {
    backAt = { at: now, after: now - lostSince, restarted: serverStarted !== null && started !== serverStarted };
    lostSince = null;
  }
  if (serverStarted !== null && started !== serverStarted) {
    // A new server: its history and its data are its own, and the old ones are off the
    // page at once, not when its history first arrives.
    history.t = [];
    SERIES.forEach((s) => (history[s.key] = []));
    drawPlots();
    forgetStored();
    forgetDqm();
    if (!backAt) backAt = { at: now, after: 0, restarted: true };
  }
  serverStarted = started;
  const c = $("connection");
  if (backAt && now - backAt.at < 30) {
    c.className = "connection back";
    c.textContent =
      "reconnected at " + clock(backAt.at) + " after " + duration(backAt.after) +
      (backAt.restarted ? " — the server restarted (since " + started + ")" : "");
  } else {
    c.className = "connection";
    c.textContent = "connected · updated " + clock(now);
  }
}

function disconnected(e) {
  const now = Date.now() / 1000;
  if (lostSince === null) lostSince = now;
  const c = $("connection");
  c.className = "connection lost";
  c.textContent = "server unreachable since " + clock(lostSince) + " (" + (e && e.message ? e.message : e) + ") — retrying";
  $("state").className = "state";
  $("state").textContent = "unknown";
  document.querySelectorAll("button[data-command]").forEach((b) => (b.disabled = true));
}

// ---------- rendering /status ----------
function render(s) {
  lastStatus = s;
  $("model").textContent = s.model ? "· " + s.model : "";
  const st = $("state");
  st.textContent = s.state;
  st.className = "state " + s.state;
  const run = s.run;
  $("run-info").textContent = run
    ? "run " + run.run_number + " · " + duration(run.elapsed_s) + " · started " + clock(Date.parse(run.started_at) / 1000)
    : s.last_run_number !== null && s.last_run_number !== undefined
      ? "no run · last run " + s.last_run_number
      : "no run yet";
  renderCommands(s);
  renderAlerts(s);
  renderFigures(run && run.live);
  renderSources(run && run.live);
  renderApps(run && run.live);
  renderJournal(s.journal || []);
  renderSummary(s.last_summary, s.last_summary_text);
  renderFiles(s.files || [], s.disks || []);
  renderTransfer(s.transfer);
}

// The transfer to permanent storage: its backlog, as /status has it (none: no [run.transfer]).
function renderTransfer(t) {
  if (!t) {
    $("transfer").textContent = "";
    return;
  }
  const b = t.backlog || {};
  let text = "transfer to " + t.destination + ": backlog " + (b.files || 0) + " files, " + bytes(b.bytes || 0);
  if (b.failed) text += ", " + b.failed + " failing";
  text += " · " + t.verified + " verified since the server started";
  if (b.failed && t.last_error) text += " · last error: " + t.last_error;
  $("transfer").textContent = text;
}

function renderCommands(s) {
  const allowed = new Set(s.commands || []);
  document.querySelectorAll("button[data-command]").forEach((b) => {
    b.disabled = busy !== null || !allowed.has(b.dataset.command);
  });
  // A model with no trigger sources to change has no trigger controls.
  $("trigger-controls").hidden = !s.trigger_sources;
  const sources = (s.trigger_sources || []).filter((t) => t.enabled);
  const select = $("trigger-source");
  const names = sources.map((t) => t.name).join(",");
  if (select.dataset.names !== names) {
    select.dataset.names = names;
    select.replaceChildren(...sources.map((t) => el("option", { value: t.name }, t.name)));
  }
  const chosen = sources.find((t) => t.name === select.value);
  select.title = chosen ? "now: prescale " + chosen.prescale + (chosen.rate_hz !== null ? ", " + chosen.rate_hz + " Hz" : "") : "";
  $("rate").disabled = !(chosen && chosen.rate_hz !== null);
  $("record-controls").hidden = !allowed.has("record");
}

function renderAlerts(s) {
  const list = (s.alerts || []).map((a) =>
    el("div", { class: "alert " + a.severity, "data-key": a.key }, (a.severity === "error" ? "✖ " : "⚠ ") + a.text, el("span", { class: "since" }, "since " + clock(a.since)))
  );
  if (s.state === "error" && s.error && !list.length) list.push(el("div", { class: "alert error" }, "✖ " + s.error));
  if (!list.length) list.push(el("div", { class: "alert none" }, "No alerts."));
  $("alerts").replaceChildren(...list);
}

function renderFigures(live) {
  if (!live) {
    $("figures").replaceChildren(el("p", { class: "muted" }, "No run going on."));
    $("figures-age").textContent = "";
    return;
  }
  $("figures-age").textContent = "at " + fmt(live.elapsed_s, 1) + " s of the run";
  $("figures").replaceChildren(
    ...live.figures.map((f) =>
      el("div", { class: "tile", "data-key": f.key }, el("div", { class: "value" }, fmt(f.value), el("span", { class: "muted" }, " " + (f.unit || ""))), el("div", { class: "label" }, f.label))
    )
  );
}

const MAX_SOURCE_ROWS = 300;
function renderSources(live) {
  const rows = live ? live.sources : [];
  const bad = rows.filter((r) => r.bad).length;
  $("sources-note").textContent = live ? rows.length + " sources, " + bad + " in trouble" : "";
  $("sources").tBodies[0].replaceChildren(
    ...rows.slice(0, MAX_SOURCE_ROWS).map((r) =>
      el("tr", { class: r.bad ? "bad" : "", "data-source": r.name },
        el("td", {}, el("span", { class: "mark", title: r.bad ? "in trouble" : "ok" })),
        el("td", {}, r.name), el("td", {}, r.app || "–"),
        el("td", { class: "num" }, fmt(r.rate_hz)), el("td", { class: "num" }, fmt(r.mb_s)),
        el("td", { class: "num" }, fmt(r.errors)), el("td", { class: "num" }, fmt(r.drops)),
        el("td", {}, r.why || ""))
    )
  );
}

function renderApps(live) {
  const apps = live ? live.apps : [];
  $("apps").hidden = !apps.length;
  $("apps-none").hidden = !!apps.length;
  $("apps").tBodies[0].replaceChildren(
    ...apps.map((a) =>
      el("tr", { class: a.state !== "running" || a.heartbeat_age_s > 5 ? "bad" : "" },
        el("td", {}, a.name), el("td", {}, a.kind), el("td", {}, a.host || "this machine"), el("td", {}, a.state),
        el("td", { class: "num" }, a.heartbeat_age_s === null ? "–" : fmt(a.heartbeat_age_s, 1) + " s"))
    )
  );
}

function renderJournal(entries) {
  $("journal").replaceChildren(
    ...entries.slice().reverse().map((e) => el("li", { class: e.level, title: e.time }, el("span", { class: "time" }, clock(e.unix)), e.text))
  );
}

// The summary as `swdaq run` prints it, whatever the model, and the whole JSON beside it.
function renderSummary(sum, text) {
  if (!sum) return;
  const rows = [
    ["run", sum.run_number],
    ["ended", reason(sum.stop_reason)],
  ];
  if (typeof sum.seconds === "number") rows.push(["lasted", fmt(sum.seconds, 1) + " s"]);
  $("summary").replaceChildren(
    el("table", { class: "summary" }, ...rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v)))),
    el("pre", { class: "summary-text" }, text || ""),
    el("details", {}, el("summary", {}, "the whole summary (JSON)"), el("pre", {}, JSON.stringify(sum, null, 1)))
  );
}

function renderFiles(files, disks) {
  const current = lastStatus && lastStatus.run ? lastStatus.run.run_number : null;
  $("files").replaceChildren(
    ...files.flatMap((f) => [
      el("div", {}, "run " + f.run_number + (f.run_number === current ? " (going on)" : " (previous)") + ": " + f.count + " files, " + bytes(f.bytes) + (f.count > f.files.length ? " (the last " + f.files.length + " listed)" : "")),
      el("ul", { class: "files" }, ...f.files.map((x) => el("li", { title: x.path }, basename(x.path) + " · " + bytes(x.bytes) + (/\.(writing|tmp)$/.test(String(x.path)) ? " · open" : "")))),
    ])
  );
  $("disks").textContent = disks.map((d) => d.path + ": " + bytes(d.available_bytes) + " free of " + bytes(d.total_bytes)).join(" · ");
}

// ---------- the run registry ----------
// Read again when a run begins or ends, on a new configuration, after a logbook entry, and
// at most every RUNS_EVERY_MS otherwise (entries from `swdaq ctl log` or another console).
const RUNS_EVERY_MS = 30000;
let runsKey = null;
let runsPulledAt = 0;

async function maybeFetchRuns(s, force) {
  const key = [s.state, s.last_run_number, s.model].join("|");
  if (!force && key === runsKey && Date.now() - runsPulledAt < RUNS_EVERY_MS) return;
  runsKey = key;
  runsPulledAt = Date.now();
  const r = await api("GET", "/runs");
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    $("runs").querySelector("tbody").replaceChildren();
    $("runs-caption").textContent = "";
    $("runs-none").textContent = answer.error || "the run registry did not answer (HTTP " + r.status + ")";
    return;
  }
  renderRuns(answer);
}

function renderRuns(answer) {
  // A run not ended is marked unless it is the one going on (killed, or its server gone).
  const current = lastStatus && lastStatus.run ? lastStatus.run.run_number : null;
  const open = (run) => (run.number === current ? "going on" : "not ended");
  $("runs-caption").textContent = "· " + answer.registry;
  $("runs-none").textContent = answer.runs.length ? "" : "No run on record yet.";
  $("runs").querySelector("tbody").replaceChildren(
    ...answer.runs.map((run) =>
      el(
        "tr",
        { "data-run": run.number, class: run.stopped_at || run.number === current ? "" : "bad" },
        el("td", { class: "num" }, String(run.number)),
        el("td", {}, run.run_type),
        el("td", {}, run.model),
        el("td", {}, run.operator),
        el("td", {}, run.started_at),
        el("td", {}, run.stopped_at || open(run)),
        el("td", {}, run.stop_reason || ""),
        el("td", { class: "num", title: bytes(run.bytes) }, String(run.files)),
        el("td", { class: "logbook" }, ...run.logbook.map((e) => el("div", { title: e.written_at }, e.author + ": " + e.text)))
      )
    )
  );
}

// ---------- history and plots ----------
async function pullHistory() {
  const since = history.t.length ? history.t[history.t.length - 1] : null;
  const r = await api("GET", since === null ? "/history" : "/history?since=" + since);
  if (!r.ok) return;
  const h = await r.json();
  for (let i = 0; i < h.t.length; i++) {
    history.t.push(h.t[i]);
    SERIES.forEach((s) => history[s.key].push(h[s.key][i]));
  }
  const newest = history.t.length ? history.t[history.t.length - 1] : 0;
  let drop = 0;
  while (drop < history.t.length && (history.t[drop] < newest - SPAN_S || history.t.length - drop > MAX_POINTS)) drop++;
  if (drop) {
    history.t.splice(0, drop);
    SERIES.forEach((s) => history[s.key].splice(0, drop));
  }
  drawPlots();
}

// Columns for uPlot, with a null point wherever samples are further apart than GAP_S.
function plotData(key, scale) {
  const xs = [], ys = [];
  for (let i = 0; i < history.t.length; i++) {
    if (i && history.t[i] - history.t[i - 1] > GAP_S) {
      xs.push(history.t[i - 1] + 1);
      ys.push(null);
    }
    xs.push(history.t[i]);
    const v = history[key][i];
    ys.push(v === null || v === undefined ? null : v * scale);
  }
  return [xs, ys];
}

function drawPlots() {
  const box = $("plots");
  const width = Math.max(220, Math.floor(box.clientWidth / 2) - 6);
  for (const s of SERIES) {
    const data = plotData(s.key, s.scale);
    if (!plots[s.key]) {
      const holder = el("div", { "data-plot": s.key });
      box.append(holder);
      plots[s.key] = new uPlot(
        {
          title: s.title + " (" + s.unit + ")",
          width,
          height: 150,
          scales: {
            x: { time: true, range: () => { const now = Date.now() / 1000; return [now - SPAN_S, now]; } },
            y: { range: (u, min, max) => [0, Math.max(max || 0, s.unit.startsWith("%") ? 1 : 1e-9) * 1.1] },
          },
          series: [{}, { label: s.title, stroke: s.color, fill: s.color + "22", width: 1.5, spanGaps: false, value: (u, v) => fmt(v) }],
          axes: [{}, { size: 55, values: (u, vals) => vals.map((v) => fmt(v)) }],
          legend: { show: false },
        },
        data,
        holder
      );
    } else {
      if (plots[s.key].width !== width) plots[s.key].setSize({ width, height: 150 });
      plots[s.key].setData(data);
    }
    const holder = box.querySelector('[data-plot="' + s.key + '"]');
    holder.dataset.points = data[0].length;
    holder.dataset.last = data[1].length ? data[1][data[1].length - 1] : "";
  }
}
window.addEventListener("resize", drawPlots);

// ---------- the newest stored event ----------
function forgetStored() {
  if (displayUrl) URL.revokeObjectURL(displayUrl);
  displayUrl = null;
  storedFetchedAt = 0;
  storedRun = null;
  storedFinal = false;
  $("display").hidden = true;
  $("display").removeAttribute("src");
  $("fragments").hidden = true;
  $("stored-caption").textContent = "";
  $("stored-none").textContent = "";
}

async function maybeFetchStored(s) {
  // Until the run has stopped, its files may still grow: no reading of it is its last.
  const taking = ["starting", "running", "paused", "stopping"].includes(s.state);
  const run = s.run ? s.run.run_number : s.last_run_number;
  const final = !taking && run === storedRun && storedFinal;
  const since = Date.now() - storedFetchedAt;
  if (run === null || run === undefined || final || since < (taking ? STORED_EVERY_MS : STORED_FINAL_AFTER_MS)) return;
  const r = await api("GET", "/latest-event");
  // Counted from the answer: the server reads anew only some seconds after its last reading.
  storedFetchedAt = Date.now();
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    $("stored-none").textContent = answer.error || "HTTP " + r.status;
    return;
  }
  storedRun = run;
  storedFinal = !taking;
  renderStored(answer);
  if (answer.drawn) await fetchDisplay();
  else $("display").hidden = true;
}

function renderStored(ev) {
  const open = /\.(writing|tmp)$/.test(ev.file);
  $("stored-caption").textContent =
    "event " + ev.event + " · " + bytes(ev.bytes) + " · " + basename(ev.file) + (open ? " (being written)" : "");
  const frags = ev.fragments || [];
  const largest = Math.max(1, ...frags.map((f) => f.bytes));
  $("fragments").hidden = !frags.length;
  $("fragments").tBodies[0].replaceChildren(
    ...frags.slice(0, MAX_FRAGMENT_ROWS).map((f) =>
      el("tr", { "data-source": f.source },
        el("td", {}, f.source), el("td", { class: "num" }, fmt(f.bytes)),
        el("td", {}, el("div", { class: "bar", style: "width:" + (100 * f.bytes / largest).toFixed(1) + "%" })))
    )
  );
  const more = frags.length > MAX_FRAGMENT_ROWS ? [frags.length - MAX_FRAGMENT_ROWS + " more fragments not listed"] : [];
  const notes = more.concat(ev.left_out && ev.left_out.length ? ["passed over or left out: " + ev.left_out.join("; ")] : []);
  $("stored-none").textContent = notes.join(" · ");
}

async function fetchDisplay() {
  const r = await api("GET", "/display.png");
  if (!r.ok) return;
  const blob = await r.blob();
  if (displayUrl) URL.revokeObjectURL(displayUrl);
  displayUrl = URL.createObjectURL(blob);
  $("display").src = displayUrl;
  $("display").hidden = false;
}

// ---------- data quality ----------
function forgetDqm() {
  dqmFetchedAt = 0;
  lastDqm = null;
  dqmPlots.forEach((p) => p.plot.destroy());
  dqmPlots.clear();
  $("dqm-grid").replaceChildren();
  $("dqm-caption").textContent = "";
  $("dqm-counts").textContent = "";
  $("dqm-none").textContent = "";
}

async function maybeFetchDqm(s) {
  // Asked again at once when a run begins or ends: the caption says whether it is going on.
  const outdated = lastDqm && lastDqm.running !== Boolean(s.run);
  if (!outdated && Date.now() - dqmFetchedAt < DQM_EVERY_MS) return;
  dqmFetchedAt = Date.now();
  const r = await api("GET", "/dqm");
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    $("dqm-none").textContent = answer.error || "HTTP " + r.status;
    return;
  }
  lastDqm = answer;
  renderDqm(answer);
}

function axisTitle(axis) {
  return axis.label + (axis.unit ? " (" + axis.unit + ")" : "");
}

// uPlot's columns: each bin's centre and count.
// Each bin's centre and count, and the reference run's counts scaled to this run's (by
// entries in range for a distribution, by events for counts of rare occurrences), if any.
function histData(h, events) {
  const width = (h.axis.hi - h.axis.lo) / h.axis.bins;
  const data = [h.counts.map((_, i) => h.axis.lo + (i + 0.5) * width), h.counts.slice()];
  const ref = h.reference;
  if (ref) {
    const sum = (a) => a.reduce((x, y) => x + y, 0);
    const scale = h.kind === "counts" ? (ref.events ? events / ref.events : 0) : sum(ref.counts) ? sum(h.counts) / sum(ref.counts) : 0;
    data.push(ref.counts.map((c) => c * scale));
  }
  return data;
}

// The x range drawn: the bins holding entries with two empty ones each side (ten bins at
// least): a histogram's fixed range is wide (a FED's sizes to 16 KiB) and its entries would
// otherwise be a sliver. Under- and overflow are given beneath the plot.
function filledRange(series, axis) {
  const counts = series[0].map((_, i) => series.reduce((sum, s) => sum + (s[i] || 0), 0));
  const width = (axis.hi - axis.lo) / axis.bins;
  const first = counts.findIndex((c) => c > 0);
  if (first < 0) return [axis.lo, axis.hi];
  let last = counts.length - 1;
  while (counts[last] === 0) last--;
  let from = Math.max(0, first - 2);
  let to = Math.min(axis.bins, last + 3);
  const least = Math.min(axis.bins, 10);
  if (to - from < least) {
    to = Math.min(axis.bins, from + least);
    from = Math.max(0, to - least);
  }
  return [axis.lo + from * width, axis.lo + to * width];
}

function histPlot(h, events, box) {
  return new uPlot(
    {
      width: Math.max(200, box.clientWidth),
      height: 140,
      scales: {
        x: { time: false, range: (u) => filledRange(u.data.slice(1), h.axis) },
        y: { range: (u, min, max) => [0, Math.max(1, max || 0) * 1.1] },
      },
      series: [
        {},
        { label: "entries", stroke: "#1f5fbf", fill: "#1f5fbf66", width: 1, paths: uPlot.paths.bars({ size: [1, Infinity], align: 0 }), points: { show: false } },
        ...(h.reference ? [{ label: "reference", stroke: "#d9480f", width: 1.5, points: { show: true, size: 3, fill: "#d9480f" } }] : []),
      ],
      axes: [
        { label: axisTitle(h.axis), labelSize: 14, size: 30, values: (u, vals) => vals.map((v) => fmt(v)) },
        // Wide enough for "20.00 M" (a chain run fills tens of millions of ADCs).
        { size: 58, values: (u, vals) => vals.map((v) => fmt(v)) },
      ],
      legend: { show: false },
    },
    histData(h, events),
    box
  );
}

function renderDqm(d) {
  const hists = d.histograms || [];
  const run = d.run_number === null || d.run_number === undefined ? "" : "run " + d.run_number + (d.running ? " (going on)" : " (ended)");
  const against = !d.enabled ? "" : d.reference_run ? " · against run " + d.reference_run + " (" + d.check.test + ", Bad below probability " + d.check.min_probability + ")" : " · no reference run: not judged";
  const judged = d.judged_at_unix ? " · judged " + clock(d.judged_at_unix) + (d.last ? " (final)" : "") : "";
  $("dqm-caption").textContent = run + against + judged;
  $("dqm-none").textContent = hists.length ? "" : d.why || "no histograms yet";
  const shown = d.histograms_total > hists.length ? " · the worst " + hists.length + " of " + d.histograms_total + " shown" : "";
  // Users' analyzers (swdaq.dqm): each with its events and how long ago it published.
  const analyzers = (d.analyzers || []).map((a) => "analyzer " + a.name + ": " + fmt(a.events) + " events, published " + clock(a.published_at_unix));
  const parts = [];
  if (d.enabled && d.samples) {
    const q = d.qualities;
    parts.push(
      ...(d.reference_run ? [el("span", { class: "badge bad" }, q.bad + " Bad"), " ", el("span", { class: "badge undetermined" }, q.undetermined + " Undetermined"), " ", el("span", { class: "badge good" }, q.good + " Good"), " · "] : []),
      fmt(d.events) + " events sampled, " + fmt(d.samples.dropped) + " dropped (queue full), " + fmt(d.unreadable) + " unreadable"
    );
  }
  if (analyzers.length) parts.push((parts.length ? " · " : "") + analyzers.join(" · "));
  if (parts.length) parts.push(shown);
  $("dqm-counts").replaceChildren(...parts);
  const grid = $("dqm-grid");
  const names = new Set(hists.map((h) => h.name));
  for (const [name, p] of dqmPlots) {
    if (!names.has(name)) {
      p.plot.destroy();
      p.box.remove();
      dqmPlots.delete(name);
    }
  }
  for (const h of hists) {
    // A plot is made for one binning, with or without its reference.
    const binning = [h.axis.bins, h.axis.lo, h.axis.hi, Boolean(h.reference)].join(",");
    let p = dqmPlots.get(h.name);
    if (p && p.binning !== binning) {
      p.plot.destroy();
      p.box.remove();
      p = undefined;
    }
    if (!p) {
      const box = el("div", { class: "dqm-hist", "data-hist": h.name, "data-axis": axisTitle(h.axis) },
        el("div", { class: "head" }, el("span", { class: "badge" }), el("span", { class: "name", title: h.name }, h.name), el("span", { class: "title" }, h.title),
          ...(h.source ? [el("span", { class: "source" }, h.source)] : [])),
        el("div", { class: "plot" }),
        el("div", { class: "note" }),
        el("div", { class: "reason" }));
      grid.append(box);
      p = { box, binning, plot: histPlot(h, h.events ?? d.events, box.querySelector(".plot")) };
      dqmPlots.set(h.name, p);
    } else {
      p.plot.setData(histData(h, h.events ?? d.events));
    }
    const v = h.verdict;
    const quality = v ? v.quality : "not judged";
    p.box.dataset.quality = quality;
    p.box.dataset.reference = h.reference ? "drawn" : "none";
    p.box.className = "dqm-hist " + (v ? v.quality.toLowerCase() : "");
    const badge = p.box.querySelector(".badge");
    badge.textContent = quality;
    badge.className = "badge " + (v ? v.quality.toLowerCase() : "");
    badge.title = v ? v.test + (v.probability !== null ? ", probability " + v.probability.toExponential(2) : "") : h.source ? "no reference sent by the analyzer" : "no reference run";
    p.box.querySelector(".note").replaceChildren(
      fmt(h.entries) + " entries · underflow " + fmt(h.underflow) + " · overflow " + fmt(h.overflow),
      ...(h.reference ? [" · ", el("span", { class: "reference-key" }, "●"), " " + (h.reference.label || "run " + d.reference_run) + ", scaled"] : []),
      v && v.quality === "Good" && v.probability !== null ? " · probability " + v.probability.toFixed(3) : ""
    );
    p.box.querySelector(".reason").textContent = v && v.quality !== "Good" ? v.reason : "";
    // In the server's order, worst first: moving a box keeps its plot.
    grid.append(p.box);
  }
}

// ---------- commands ----------
function commandBody(command) {
  const number = (id) => ($(id).value === "" ? undefined : Number($(id).value));
  switch (command) {
    case "start":
      return number("run-number") === undefined ? {} : { run_number: number("run-number") };
    case "trigger":
      return { trigger: $("trigger-source").value, prescale: number("prescale"), rate_hz: $("rate").disabled ? undefined : number("rate") };
    case "record":
      return number("record-seconds") === undefined ? {} : { seconds: number("record-seconds") };
    default:
      return undefined;
  }
}

// A stop reason: a name ("Interrupted") or a name with why ({"StorageFailed": "..."}).
function reason(r) {
  return typeof r === "string" ? r : Object.entries(r || {}).map(([k, v]) => k + ": " + v).join("; ");
}

function describe(command, code, answer) {
  if (command === "stop" && answer.run_number !== undefined) return "stopped run " + answer.run_number + " (" + reason(answer.stop_reason) + "): summary below";
  if (command === "start") return "run " + answer.run_number + " " + answer.state;
  if (command === "record" && answer.recording) return "raw burst started: " + JSON.stringify(answer.recording);
  return command + ": " + (answer.state || "done");
}

// POSTs `body` to `path` and says under the buttons how it went: `said(answer, code)` for an
// accepted request, the server's reason for a refused one. Whether it was accepted.
async function post(what, path, body, said) {
  const answerBox = $("answer");
  try {
    const r = await api("POST", path, body);
    const answer = await r.json().catch(() => ({}));
    answerBox.className = r.ok ? "answer ok" : "answer refused";
    answerBox.textContent = r.ok
      ? "✔ " + said(answer, r.status)
      : "✖ " + what + " refused (" + r.status + "): " + (answer.error || r.statusText);
    return r.ok;
  } catch (e) {
    answerBox.className = "answer refused";
    answerBox.textContent = "✖ " + what + ": no answer from the server (" + e.message + ")";
    return false;
  }
}

async function send(command) {
  const answerBox = $("answer");
  busy = command;
  document.querySelectorAll("button[data-command]").forEach((b) => (b.disabled = true));
  answerBox.className = "answer waiting";
  answerBox.textContent = command + ": waiting for the answer" + (command === "stop" ? " (the run's summary comes once it has stopped)…" : "…");
  try {
    await post(command, "/" + command, commandBody(command), (answer, code) => describe(command, code, answer));
  } finally {
    busy = null;
    if (lastStatus) renderCommands(lastStatus);
  }
}

// A logbook entry is no state change: its form works in every state with a configuration
// (the registry is the configuration's), and the server says when it cannot be taken.
async function addLogEntry(ev) {
  ev.preventDefault();
  const body = { text: $("log-text").value };
  const author = $("log-author").value.trim();
  if (author) body.author = author;
  const added = await post("logbook entry", "/log", body, (answer) => "logbook entry added to run " + answer.run_number);
  if (added) {
    $("log-text").value = "";
    if (lastStatus) await maybeFetchRuns(lastStatus, true);
  }
}

document.querySelectorAll("button[data-command]").forEach((b) => b.addEventListener("click", () => send(b.dataset.command)));
$("logbook").addEventListener("submit", addLogEntry);
poll();
