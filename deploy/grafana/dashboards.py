"""Writes swdaq's Grafana dashboards, one per dataflow model, from the panel lists below.

    python3 deploy/grafana/dashboards.py          # rewrite deploy/grafana/dashboards/*.json

Edit the lists here, not the JSON: tests/python/test_prometheus.py checks that the JSON files are
what this script writes, that every query names metrics the matching `swdaq run` serves, and that
every query evaluates in a real Prometheus over such a run."""

import json
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


def quantiles(histogram: str) -> list[tuple[str, str]]:
    """p50 and p99 of a histogram over every series."""
    return [
        (f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{RATE})))", f"p{round(q * 100)}")
        for q in (0.5, 0.99)
    ]


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


DUNE = Dashboard(
    "swdaq.json",
    "swdaq-overview",
    "swdaq",
    "swdaq run: readout, trigger, record building, storage, ROI readout, raw recording, threads",
    [
        Row(
            "Readout",
            [
                Panel("Frames per link", "Frames buffered per second", "fps",
                      [(rate("swdaq_readout_frames_total", "link"), "link {{link}}")]),
                Panel("Bytes per link", "Bytes buffered per second", "Bps",
                      [(rate("swdaq_readout_bytes_total", "link"), "link {{link}}")]),
                Panel("Latency buffer occupancy", "Share of the latency buffer's slots in use", "percentunit",
                      [("max by (link) (swdaq_readout_buffer_filled_ratio)", "link {{link}}")]),
                Panel(
                    "Readout drops and errors",
                    "Per second, per link; all zero in a healthy run",
                    "short",
                    [
                        (rate(f"swdaq_readout_{name}_total", "link"), f"{legend} {{{{link}}}}")
                        for name, legend in [
                            ("dropped_frames", "dropped"),
                            ("missing_frames", "missing"),
                            ("timestamp_jumps", "timestamp jumps"),
                            ("sequence_errors", "sequence errors"),
                            ("header_errors", "header errors"),
                            ("bad_size_frames", "bad size"),
                        ]
                    ],
                ),
                Panel("Trigger primitives per link", "TPs found by hit finding per second", "short",
                      [(rate("swdaq_tpg_trigger_primitives_total", "link"), "link {{link}}")]),
                Panel("Data requests", "Requests answered per second, by status", "reqps",
                      [(rate("swdaq_readout_requests_total", "status"), "{{status}}")]),
            ],
        ),
        Row(
            "Trigger and record building",
            [
                Panel(
                    "Trigger decisions",
                    "Decisions issued and dropped while dataflow was busy, per second",
                    "short",
                    [
                        (rate("swdaq_trigger_decisions_total"), "issued"),
                        (rate("swdaq_trigger_dropped_busy_total"), "dropped (busy)"),
                        (rate("swdaq_trigger_late_tps_total"), "late TPs"),
                    ],
                ),
                Panel("Trigger latency", "Data time to trigger decision", "s",
                      quantiles("swdaq_trigger_latency_seconds")),
                Panel("Records built", "Trigger records built per second, by outcome", "short",
                      [(rate("swdaq_dataflow_records_total", "outcome"), "{{outcome}}")]),
                Panel("Record build latency", "Decision received to record built", "s",
                      quantiles("swdaq_dataflow_build_latency_seconds")),
                Panel("Data request latency", "Request received to answered", "s",
                      quantiles("swdaq_readout_request_latency_seconds")),
                Panel(
                    "Bytes written to storage",
                    "Growth of the HDF5 files on disk (records plus HDF5 metadata) and bytes of the "
                    "records written, per second",
                    "Bps",
                    [
                        (rate("swdaq_store_written_bytes_total"), "files on disk"),
                        (rate("swdaq_store_record_bytes_total"), "records"),
                    ],
                ),
            ],
        ),
        Row(
            "ROI readout and raw recording",
            [
                Panel(
                    "ROI data reduction",
                    "Bytes ROI fragments sent against the bytes of the whole windows asked for, per "
                    "second (readout.roi on)",
                    "Bps",
                    [
                        (rate("swdaq_readout_roi_bytes_total"), "sent (regions)"),
                        (rate("swdaq_readout_roi_full_window_bytes_total"), "whole windows"),
                    ],
                ),
                Panel(
                    "ROI fragments and TPs cut",
                    "ROI fragments per second per link, and requests answered before the link's TPs "
                    "had passed the window (flagged incomplete)",
                    "short",
                    [
                        (rate("swdaq_readout_roi_fragments_total", "link"), "fragments {{link}}"),
                        (rate("swdaq_readout_roi_tps_cut_total", "link"), "TPs cut {{link}}"),
                    ],
                ),
                Panel(
                    "Raw recording",
                    "Burst bytes written and frames the recorder missed, per second ([recording] on)",
                    "short",
                    [
                        (rate("swdaq_recording_bytes_total"), "bytes"),
                        (rate("swdaq_recording_frames_lost_total"), "frames lost"),
                    ],
                ),
                Panel(
                    "Bursts",
                    "Bursts being written, and requests refused while the most allowed were",
                    "short",
                    [
                        ("sum(swdaq_recording_bursts_in_progress)", "in progress"),
                        ("sum(increase(swdaq_recording_refused_total" + RATE + "))", "refused"),
                    ],
                ),
            ],
        ),
        process_row(),
    ],
)

EVENT_BUILDER = Dashboard(
    "swdaq-evb.json",
    "swdaq-evb",
    "swdaq event builder",
    "swdaq run with [evb]: FEDs and their links, readout units, event manager, builder units, files, filter farm",
    [
        Row(
            "FEDs and readout units",
            [
                Panel("FED fragments", "Fragments that passed every check, per second per FED", "short",
                      [(rate("swdaq_evb_fed_fragments_total", "fed"), "FED {{fed}}")]),
                Panel("FED bytes", "Bytes of good fragments per second, per readout unit", "Bps",
                      [(rate("swdaq_evb_fed_bytes_total", "ru"), "RU {{ru}}")]),
                Panel(
                    "FED links",
                    "What each FED's link took into its latency buffer per second, and fragments "
                    "too large for a slot, cut short by a failed read, or dropped by the kernel "
                    "(UDP: the socket's receive buffer was full)",
                    "short",
                    [
                        (rate("swdaq_evb_fed_received_total", "fed"), "received {{fed}}"),
                        (rate("swdaq_evb_fed_oversized_total", "fed"), "oversized {{fed}}"),
                        (rate("swdaq_evb_fed_truncated_total", "fed"), "truncated {{fed}}"),
                        (rate("swdaq_evb_fed_kernel_dropped_total", "fed"), "kernel dropped {{fed}}"),
                    ],
                ),
                Panel(
                    "FED errors",
                    "Fragments per second that failed a check, by check and FED; zero in a healthy run",
                    "short",
                    [
                        (rate(f"swdaq_evb_fed_{check}_total", "fed"), f"{check} {{{{fed}}}}")
                        for check in ["missing", "malformed", "bad_length", "wrong_source_id",
                                      "wrong_l1_id", "bad_crc"]
                    ],
                ),
                Panel("Super-fragments waiting", "Super-fragments a readout unit holds for a request",
                      "short", [("max by (ru) (swdaq_evb_ru_buffered)", "RU {{ru}}")]),
                Panel(
                    "Super-fragments served",
                    "Per second per readout unit: served to builder units, and expired unasked",
                    "short",
                    [
                        (rate("swdaq_evb_ru_served_total", "ru"), "served {{ru}}"),
                        (rate("swdaq_evb_ru_expired_total", "ru"), "expired {{ru}}"),
                    ],
                ),
                Panel(
                    "Event manager",
                    "Events assigned to builder units, and events that waited for a builder unit to "
                    "ask, per second",
                    "short",
                    [
                        (rate("swdaq_evb_events_assigned_total"), "assigned"),
                        (rate("swdaq_evb_events_throttled_total"), "throttled"),
                    ],
                ),
            ],
        ),
        Row(
            "Builder units and files",
            [
                Panel(
                    "Events built",
                    "Per second per builder unit; incomplete, lost and shed ones too",
                    "short",
                    [
                        (rate("swdaq_evb_events_built_total", "bu"), "built {{bu}}"),
                        (rate("swdaq_evb_events_incomplete_total", "bu"), "incomplete {{bu}}"),
                        (rate("swdaq_evb_events_lost_total"), "lost"),
                        (rate("swdaq_evb_shed_events_total", "bu"), "shed {{bu}}"),
                    ],
                ),
                Panel(
                    "Bytes built and written",
                    "Event bytes built and bytes written to files, per second",
                    "Bps",
                    [
                        (rate("swdaq_evb_built_bytes_total"), "built"),
                        (rate("swdaq_evb_written_bytes_total"), "written"),
                    ],
                ),
                Panel(
                    "Builder unit queues",
                    "Events being built and events waiting for the writer, per builder unit",
                    "short",
                    [
                        ("max by (bu) (swdaq_evb_bu_open_events)", "open {{bu}}"),
                        ("max by (bu) (swdaq_evb_bu_writer_queue)", "writer queue {{bu}}"),
                    ],
                ),
                Panel(
                    "Files written",
                    "Files closed per second, and super-fragments that came late or for the wrong event",
                    "short",
                    [
                        (rate("swdaq_evb_written_files_total", "bu"), "files {{bu}}"),
                        (rate("swdaq_evb_late_superfragments_total"), "late super-fragments"),
                        (rate("swdaq_evb_wrong_event_id_total"), "wrong event id"),
                    ],
                ),
                Panel(
                    "Filter farm",
                    "Events the filter-farm stand-in verified per second, bad events and files kept "
                    "as .bad ([evb.farm] on)",
                    "short",
                    [
                        (rate("swdaq_evb_farm_events_verified_total"), "verified"),
                        (rate("swdaq_evb_farm_bad_events_total"), "bad events"),
                        (rate("swdaq_evb_farm_bad_files_total"), "bad files"),
                    ],
                ),
                Panel(
                    "Filter farm backlog",
                    "Closed files waiting for the farm, and bytes it read back per second",
                    "short",
                    [
                        ("sum(swdaq_evb_farm_backlog_files)", "files waiting"),
                        (rate("swdaq_evb_farm_bytes_total"), "bytes read"),
                    ],
                ),
            ],
        ),
        process_row(),
    ],
)

SW_ROD = Dashboard(
    "swdaq-swrod.json",
    "swdaq-swrod",
    "swdaq SW ROD",
    "swdaq run with [swrod]: FELIX cards, ROB fragment aggregation by L1 ID, HLT, storage",
    [
        Row(
            "FELIX input and aggregation",
            [
                Panel("Chunks per ROB", "Whole e-link chunks decoded per second", "short",
                      [(rate("swdaq_swrod_chunks_total", "rob"), "ROB {{rob}}")]),
                Panel("L1 accepts per card", "L1 accepts the emulated FELIX cards sent, per second",
                      "short", [(rate("swdaq_swrod_l1as_total", "card"), "card {{card}}")]),
                Panel(
                    "ROB fragments",
                    "Fragments built per second per ROB; incomplete and timed-out ones too",
                    "short",
                    [
                        (rate("swdaq_swrod_fragments_total", "rob"), "built {{rob}}"),
                        (rate("swdaq_swrod_incomplete_fragments_total", "rob"), "incomplete {{rob}}"),
                        (rate("swdaq_swrod_timed_out_fragments_total", "rob"), "timed out {{rob}}"),
                    ],
                ),
                Panel(
                    "Block and chunk errors",
                    "Per second over all ROBs, by kind; zero in a healthy run",
                    "short",
                    [
                        (rate(f"swdaq_swrod_{name}_total"), name.replace("_", " "))
                        for name in ["corrupt_blocks", "foreign_blocks", "sequence_gaps",
                                     "broken_chunks", "missing_chunks", "late_chunks",
                                     "duplicate_chunks", "out_of_order_chunks", "truncated_chunks",
                                     "crc_error_chunks", "malformed_chunks", "bcid_mismatches"]
                    ],
                ),
                Panel("Errors per e-link", "Chunk errors per second, by ROB and e-link", "short",
                      [(rate("swdaq_swrod_elink_errors_total", "rob, elink"), "{{rob}} e-link {{elink}}")]),
                Panel("Fragments being aggregated", "Open fragments per ROB", "short",
                      [("max by (rob) (swdaq_swrod_open_fragments)", "ROB {{rob}}")]),
            ],
        ),
        Row(
            "Consumers, HLT and storage",
            [
                Panel(
                    "Fragments to consumers",
                    "Delivered per second per consumer, and fragments a full consumer queue cost",
                    "short",
                    [
                        (rate("swdaq_swrod_delivered_fragments_total", "consumer"), "delivered {{consumer}}"),
                        (rate("swdaq_swrod_slow_consumer_drops_total", "consumer"), "dropped {{consumer}}"),
                    ],
                ),
                Panel(
                    "HLT events",
                    "Events built per second, incomplete ones, and the HLT's requests answered "
                    "not yet (asked again) or gone",
                    "short",
                    [
                        (rate("swdaq_swrod_events_total"), "events"),
                        (rate("swdaq_swrod_incomplete_events_total"), "incomplete"),
                        (rate("swdaq_swrod_not_yet_answers_total"), "not yet"),
                        (rate("swdaq_swrod_gone_answers_total"), "gone"),
                    ],
                ),
                Panel(
                    "Storage and sampler",
                    "Bytes of events written per second; fragments the sampler checked and found bad",
                    "short",
                    [
                        (rate("swdaq_swrod_stored_bytes_total"), "bytes stored"),
                        (rate("swdaq_swrod_sampled_fragments_total"), "sampled"),
                        (rate("swdaq_swrod_sample_errors_total"), "sample errors"),
                    ],
                ),
            ],
        ),
        process_row(),
    ],
)

DASHBOARDS = [DUNE, EVENT_BUILDER, SW_ROD]


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
    for d in DASHBOARDS:
        (DIRECTORY / d.file).write_text(render(d))
