"""A builder's record stream, watched with pyzmq as an online monitor would: `swdaq run` on a
loopback topology, a subscriber decoding every published record's header and fragment headers
(examples/record_stream.py), checked against the run's own summary."""

import json
import subprocess
import time
from pathlib import Path

import zmq
from swdaq_paths import SWDAQ, free_port, free_ports

import record_stream  # noqa: E402  (examples/, put on the path by swdaq_paths)


def topology(tmp_path: Path, stream: str) -> Path:
    apps = [
        ("readout-0", "readout", "links = [0, 1]"),
        ("trigger", "trigger", ""),
        ("dfo", "dfo", ""),
        ("builder-0", "builder", f'record_stream = "{stream}"\nrecord_stream_every = 1'),
    ]
    text = (
        f'[run]\nduration_s = 5.0\nmetrics_addr = ""\noutput_dir = "{tmp_path / "data"}"\n'
        "[emulator]\nlinks = 2\n[trigger.periodic]\nrate_hz = 20.0\n"
    )
    for (name, kind, extra), port in zip(apps, free_ports(len(apps))):
        text += f'[[topology.apps]]\nname = "{name}"\nkind = "{kind}"\naddress = "tcp://127.0.0.1:{port}"\n{extra}\n'
    path = tmp_path / "topology.toml"
    path.write_text(text)
    return path


def test_a_subscriber_decodes_every_published_record_as_the_builder_built_it(tmp_path):
    stream = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [SWDAQ, "run", "--json", "--config", str(topology(tmp_path, stream))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    context = zmq.Context()
    sub = record_stream.subscribe(stream, context)
    seen = {}
    try:
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if poller.poll(200):
                header, fragments = record_stream.decode(sub.recv_multipart())
                seen[int(header["trigger_number"])] = (header, fragments)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        sub.close(linger=0)
        context.term()
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    decisions = summary["trigger"]["decisions"]
    # The subscriber joins a moment after the builder binds: early records may be missed (PUB
    # semantics), never later ones.
    assert len(seen) >= decisions - 10 and max(seen) == decisions, (len(seen), decisions)
    for number, (header, fragments) in seen.items():
        assert header["run_number"] == 1 and header["status_bits"] == 0
        assert header["num_requested_components"] == len(fragments) == 4  # raw + TPs, 2 links
        assert {int(f["trigger_number"]) for f in fragments} == {number}
        assert sorted((int(f["source_subsystem"]), int(f["source_id"])) for f in fragments) == [
            (1, 0), (1, 1), (3, 0), (3, 1)
        ]


def test_garbage_on_a_stream_frame_is_refused_clearly():
    try:
        record_stream.decode([b"\x00" * 10])
    except ValueError as e:
        assert "too short" in str(e)
    else:
        raise AssertionError("a 10-byte header was accepted")
