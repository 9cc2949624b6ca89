"""Watch the records a swdaq builder publishes for online monitoring (pyzmq + numpy).

Usage: python examples/record_stream.py tcp://HOST:PORT [N]

A builder with ``record_stream = "tcp://..."`` in its ``[[topology.apps]]`` entry publishes
every ``record_stream_every``-th record it builds on a ZeroMQ PUB socket, one multipart
message per record: frame 0 is the DUNE trigger-record header (v4: 64 bytes, then 32 bytes per
requested component), each further frame one fragment exactly as stored (72-byte DUNE
FragmentHeader v5, then the payload). A subscriber that falls behind loses records; the
builder never waits for it.
"""

import sys

import numpy as np
import zmq

from read_records import FRAGMENT_HEADER, fragment_header

# DUNE TriggerRecordHeaderData v4: 64 bytes, little-endian.
RECORD_HEADER = np.dtype(
    [
        ("marker", "<u4"),
        ("version", "<u4"),
        ("trigger_number", "<u8"),
        ("trigger_timestamp", "<u8"),
        ("num_requested_components", "<u8"),
        ("run_number", "<u4"),
        ("status_bits", "<u4"),
        ("trigger_type", "<u8"),
        ("sequence_number", "<u2"),
        ("max_sequence_number", "<u2"),
        ("unused", "<u4"),
        ("element_version", "<u2"),
        ("element_subsystem", "<u2"),
        ("element_id", "<u4"),
    ]
)
RECORD_MARKER = 0x33334444
RECORD_VERSION = 4
COMPONENT_REQUEST_BYTES = 32
INCOMPLETE = 1


def record_header(frame: bytes) -> np.void:
    """The record header at the start of frame 0; checks marker, version and length."""
    raw = np.frombuffer(frame, dtype=np.uint8)
    if raw.size < RECORD_HEADER.itemsize:
        raise ValueError(f"{raw.size} bytes: too short for a record header")
    header = raw[: RECORD_HEADER.itemsize].view(RECORD_HEADER)[0]
    if header["marker"] != RECORD_MARKER or header["version"] != RECORD_VERSION:
        raise ValueError("not a DUNE v4 trigger-record header")
    expected = RECORD_HEADER.itemsize + COMPONENT_REQUEST_BYTES * int(header["num_requested_components"])
    if raw.size != expected:
        raise ValueError(f"record header of {raw.size} bytes, expected {expected}")
    return header


def decode(frames: list) -> tuple:
    """(record header, [fragment headers]) of one published record."""
    header = record_header(frames[0])
    fragments = [fragment_header(np.frombuffer(f, dtype=np.uint8)) for f in frames[1:]]
    return header, fragments


def subscribe(address: str, context: zmq.Context | None = None) -> zmq.Socket:
    socket = (context or zmq.Context.instance()).socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(address)
    return socket


def main(address: str, count: int) -> None:
    socket = subscribe(address)
    for _ in range(count):
        header, fragments = decode(socket.recv_multipart())
        state = "incomplete" if header["status_bits"] & INCOMPLETE else "complete"
        print(
            f"record {header['trigger_number']} (run {header['run_number']}, {state}): "
            + ", ".join(f"0x{f['source_id']:08x}/{f['size'] - FRAGMENT_HEADER.itemsize} B" for f in fragments)
        )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
