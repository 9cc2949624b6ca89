"""Writes swdaq's Grafana dashboards, one per dataflow model that declares one: its panels are
data in the model's folder (`crates/swdaq-app/src/models/<model>/dashboard.json`), which the
binary lists (`swdaq models --json`); the layout and the process row are written here, once.

    python3 deploy/grafana/dashboards.py [SWDAQ]   # rewrite deploy/grafana/dashboards/*.json
                                                   # (SWDAQ: the binary; $SWDAQ_BIN, else
                                                   # target/debug/swdaq)

Edit a model's dashboard.json, not the output: tests/python/test_prometheus.py checks that the
JSON files are what this script writes, that every query names metrics the matching `swdaq run`
serves, and that every query evaluates in a real Prometheus over such a run."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent / "dashboards"
RATE = "[$__rate_interval]"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PANEL_HEIGHT = 8


@dataclass
class Panel:
    title: str
    description: str
    unit: str
    # (PromQL expression, legend)
    targets: list[tuple[str, str]]
    width: int = 8


@dataclass
class Row:
    title: str
    panels: list[Panel] = field(default_factory=list)


@dataclass
class Dashboard:
    file: str
    uid: str
    title: str
    description: str
    rows: list[Row]


def rate(metric: str, by: str | None = None) -> str:
    """Per-second rate of a counter, summed (over `by`'s values when given)."""
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}(rate({metric}{RATE}))"


def process_row() -> Row:
    return Row(
        "Process",
        [
            Panel(
                "CPU per thread",
                "Share of one core used by each thread",
                "percentunit",
                [(rate("swdaq_thread_cpu_seconds_total", "thread"), "{{thread}}")],
                width=12,
            ),
            Panel(
                "Resident memory",
                "Process resident set size",
                "bytes",
                [("swdaq_process_resident_memory_bytes", "{{instance}}")],
                width=12,
            ),
        ],
    )


def of_model(data: dict) -> Dashboard:
    """A model's dashboard from its data (`dashboard.json` in its folder), the process row
    every dashboard ends with added."""
    rows = [
        Row(
            row["title"],
            [
                Panel(p["title"], p["description"], p["unit"],
                      [(t["expr"], t["legend"]) for t in p["targets"]], p.get("width", 8))
                for p in row["panels"]
            ],
        )
        for row in data["rows"]
    ]
    return Dashboard(data["file"], data["uid"], data["title"], data["description"], rows + [process_row()])


def dashboards(swdaq: str) -> list[Dashboard]:
    """The dashboards of the models the `swdaq` binary has (`swdaq models --json`)."""
    listed = subprocess.run([swdaq, "models", "--json"], check=True, capture_output=True, text=True, timeout=60)
    return [of_model(m["dashboard"]) for m in json.loads(listed.stdout) if m["dashboard"]]


def layout(dashboard: Dashboard) -> list[dict]:
    """Grafana panels: each row a full-width header, its panels flowing left to right."""
    panels, y = [], 0
    for row in dashboard.rows:
        panels.append({
            "type": "row",
            "title": row.title,
            "collapsed": False,
            "id": len(panels) + 1,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "panels": [],
        })
        y, x = y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + PANEL_HEIGHT
            panels.append(timeseries(panel, len(panels) + 1, x, y))
            x += panel.width
        y += PANEL_HEIGHT
    return panels


def timeseries(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    return {
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "id": panel_id,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": [
            {"datasource": DATASOURCE, "refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.targets)
        ],
    }


def render(dashboard: Dashboard) -> str:
    return json.dumps(
        {
            "uid": dashboard.uid,
            "title": dashboard.title,
            "description": dashboard.description,
            "tags": ["swdaq", "daq"],
            "timezone": "utc",
            "editable": True,
            "graphTooltip": 1,
            "schemaVersion": 39,
            "version": 1,
            "refresh": "5s",
            "time": {"from": "now-15m", "to": "now"},
            "annotations": {"list": []},
            "links": [],
            "templating": {
                "list": [{
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "includeAll": False,
                    "multi": False,
                    "options": [],
                    "refresh": 1,
                    "regex": "",
                }]
            },
            "panels": layout(dashboard),
        },
        indent=2,
    ) + "\n"


if __name__ == "__main__":
    default = os.environ.get("SWDAQ_BIN", str(DIRECTORY.parents[1] / "target" / "debug" / "swdaq"))
    for d in dashboards(sys.argv[1] if len(sys.argv) > 1 else default):
        (DIRECTORY / d.file).write_text(render(d))
