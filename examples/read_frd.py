"""Read the event builder's FRD files with numpy (no swdaq code needed).

Usage: python examples/read_frd.py FILE.raw

Layout (CMS FRD, little-endian): a 32-byte ``RAW_0002`` file header, then events, each a
24-byte FRD v6 event header followed by ``event_size`` bytes of FED fragments back to back.
A FED fragment is a 64-bit header word (BOE 0x5 in bits 60..63, level-1 id in bits 32..55,
bunch crossing in 20..31, FED id in 8..19), payload words, and a 64-bit trailer word (EOE 0xA
in bits 60..63, length in 64-bit words in bits 32..55, CRC-16 in 16..31). Fragments are found
from the end of the event backwards, by their trailers, as CMS reads them.
"""

import sys

import numpy as np

FILE_HEADER = np.dtype(
    [
        ("id", "S4"),
        ("version", "S4"),
        ("header_size", "<u2"),
        ("data_type", "<u2"),
        ("event_count", "<u4"),
        ("run", "<u4"),
        ("lumi", "<u4"),
        ("file_size", "<u8"),
    ]
)
EVENT_HEADER = np.dtype(
    [
        ("version", "<u2"),
        ("flags", "<u2"),
        ("run", "<u4"),
        ("lumi", "<u4"),
        ("event", "<u4"),
        ("event_size", "<u4"),
        ("crc32c", "<u4"),
    ]
)
FLAG_INCOMPLETE = 1 << 15


def fed_fragments(payload: np.ndarray):
    """(FED id, level-1 id, bunch crossing, payload words) of each fragment, last first."""
    words = payload.view("<u8")
    end = len(words)
    while end > 0:
        trailer = int(words[end - 1])
        assert trailer >> 60 == 0xA, "not a FED trailer"
        length = (trailer >> 32) & 0xFFFFFF
        assert 2 <= length <= end, "bad FED length"
        header = int(words[end - length])
        assert header >> 60 == 0x5, "not a FED header"
        yield (header >> 8) & 0xFFF, (header >> 32) & 0xFFFFFF, (header >> 20) & 0xFFF, words[end - length + 1 : end - 1]
        end -= length


def events(path: str):
    """The file header, then (event header, list of FED fragments) per event."""
    data = np.fromfile(path, dtype=np.uint8)
    header = data[: FILE_HEADER.itemsize].view(FILE_HEADER)[0]
    assert header["id"] == b"RAW_" and header["version"] == b"0002"
    assert header["file_size"] == len(data)
    yield header
    at = int(header["header_size"])
    for _ in range(int(header["event_count"])):
        event = data[at : at + EVENT_HEADER.itemsize].view(EVENT_HEADER)[0]
        assert event["version"] == 6
        start = at + EVENT_HEADER.itemsize
        payload = data[start : start + int(event["event_size"])]
        yield event, list(fed_fragments(payload))
        at = start + int(event["event_size"])
    assert at == len(data), "bytes after the last event"


if __name__ == "__main__":
    it = events(sys.argv[1])
    header = next(it)
    print(f"run {header['run']} lumi {header['lumi']}: {header['event_count']} events, {header['file_size']} bytes")
    for event, feds in it:
        incomplete = " INCOMPLETE" if event["flags"] & FLAG_INCOMPLETE else ""
        print(f"event {event['event']}: {event['event_size']} bytes, FEDs {sorted(f[0] for f in feds)}{incomplete}")
