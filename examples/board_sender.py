#!/usr/bin/env python3
"""Stands in for a made-up detector's triggered boards (examples/plugins/triggered_board.c's
packets): board k sends one packet per trigger to the base port + k,

    header (20 bytes, big-endian): magic u16 = 0xB0A4, board id u16, trigger number u32,
                                   timestamp u64, payload length u32 (bytes)
    payload: 16-bit ADC samples, big-endian.

Usage: board_sender.py HOST:PORT [--boards N] [--triggers T] [--rate-hz R] [--skip B:T ...]

On 127.0.0.1 it first waits (up to 10 s) until every board's port is bound, so it can be
started right after `swdaq run`. Python's standard library only."""

import argparse
import random
import socket
import struct
import sys
import time
from pathlib import Path


def packet(board: int, trigger: int, samples: list[int]) -> bytes:
    body = struct.pack(f">{len(samples)}H", *samples)
    return struct.pack(">HHIQI", 0xB0A4, board, trigger, trigger * 25, len(body)) + body


def bound(port: int) -> bool:
    """Whether a socket is bound to 127.0.0.1:port (Linux's /proc/net/udp)."""
    local = f"0100007F:{port:04X}"
    lines = Path("/proc/net/udp").read_text().splitlines()[1:]
    return any(line.split()[1] == local for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="HOST:PORT of board 0 (board k: PORT + k)")
    parser.add_argument("--boards", type=int, default=2)
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--rate-hz", type=float, default=2000.0, help="triggers per second")
    parser.add_argument("--skip", action="append", default=[], metavar="B:T",
                        help="board B does not send trigger T (may repeat)")
    args = parser.parse_args()
    host, port = args.address.rsplit(":", 1)
    base = int(port)
    skipped = {tuple(int(x) for x in s.split(":")) for s in args.skip}
    if host == "127.0.0.1":
        deadline = time.monotonic() + 10
        while not all(bound(base + k) for k in range(args.boards)):
            if time.monotonic() > deadline:
                print(f"nothing listens on {host}:{base}..{base + args.boards - 1}", file=sys.stderr)
                return 1
            time.sleep(0.02)
    rng = random.Random(1)
    period = 1.0 / args.rate_hz
    start = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for trigger in range(1, args.triggers + 1):
            for board in range(args.boards):
                if (board, trigger) in skipped:
                    continue
                samples = [rng.randrange(0, 1200) for _ in range(16)]
                sender.sendto(packet(board, trigger, samples), (host, base + board))
            ahead = start + trigger * period - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    print(f"sent {args.triggers} triggers from {args.boards} boards", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
