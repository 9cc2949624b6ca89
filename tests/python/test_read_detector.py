"""A detector swdaq has never seen, read back with the `swdaq` package (#35): three triggered
boards send their packets (a 20-byte big-endian header: magic, board id, trigger number,
timestamp, payload length; then 16-bit samples) over UDP to `swdaq run` of an event builder
whose `[evb.input.decoder]` is a no-code packet format; board 2 skips one trigger. Every
event is read once with each board's payload exactly the packet sent, its timestamp the
board's, and the event lacking board 2 flagged incomplete, as the summary counts."""

import json
import socket
import struct
import subprocess
import time

import swdaq
from swdaq_paths import ROOT, SWDAQ, free_udp_ports, udp_port_bound

BOARDS = 3
TRIGGERS = 200
SKIPPED = 77

BOARD_FORMAT = (ROOT / "examples" / "plugins" / "triggered_board_format.toml").read_text()


def packet(board: int, trigger: int) -> bytes:
    samples = [(i * 97 ^ board ^ trigger) & 0xFFFF for i in range(3 + trigger % 11)]
    body = struct.pack(f">{len(samples)}H", *samples)
    return struct.pack(">HHIQI", 0xB0A4, board, trigger, trigger * 1000 + board, len(body)) + body


def test_a_packet_format_detectors_events_read_back_exactly(tmp_path):
    port = free_udp_ports(BOARDS)
    feds = ", ".join(f"{{ id = {b}, mean_bytes = 64, spread_bytes = 0 }}" for b in range(BOARDS))
    config = tmp_path / "boards.toml"
    config.write_text(
        f'[run]\nduration_s = 20\nmetrics_addr = ""\noutput_dir = "{tmp_path / "out"}"\n'
        f"[evb]\nbuilder_units = 1\nevents_per_file = 50\nmax_events = {TRIGGERS}\nmin_free_bytes = 0\n"
        f'rus = [[{feds}]]\n[evb.input]\nkind = "udp"\nudp_address = "127.0.0.1:{port}"\nstop_wait = 100\n'
        f"[evb.input.decoder.format]\n{BOARD_FORMAT}"
    )
    run = subprocess.Popen([SWDAQ, "run", "--json", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not all(udp_port_bound(port + k) for k in range(BOARDS)):
        assert time.monotonic() < deadline and run.poll() is None, "swdaq run never bound its ports"
        time.sleep(0.02)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for trigger in range(1, TRIGGERS + 1):
            for board in range(BOARDS):
                if (board, trigger) != (2, SKIPPED):
                    sender.sendto(packet(board, trigger), ("127.0.0.1", port + board))
            if trigger % 10 == 0:
                time.sleep(0.01)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 0, err.decode()
    summary = json.loads(out)
    dropped = sum(fed["ingest"]["kernel_dropped"] for fed in summary["feds"])

    seen, incomplete = set(), 0
    for raw in sorted((tmp_path / "out" / "bu0" / "run000001").glob("*.raw")):
        with swdaq.open(raw) as f:
            for event in f:
                assert event.ok and event.number not in seen
                seen.add(event.number)
                boards = {fed.source_id: fed for fed in event.fragments}
                for board, fed in boards.items():
                    assert bytes(fed.detector_payload()) == packet(board, event.number)
                    assert fed.detector_timestamp == event.number * 1000 + board
                    assert fed.ok, fed.problems
                if dropped == 0:
                    expected = {0, 1} if event.number == SKIPPED else {0, 1, 2}
                    assert set(boards) == expected, event.number
                assert event.incomplete == (len(boards) < BOARDS)
                incomplete += event.incomplete
    assert seen == set(range(1, TRIGGERS + 1))
    assert incomplete >= 1 and summary["incomplete"] == incomplete


def chunk_records(data: bytes, order: str):
    """(link, bytes) records of `order` byte order: u32 link, u32 length, the bytes."""
    records, at = [], 0
    while at + 8 <= len(data):
        link, length = struct.unpack_from(f"{order}II", data, at)
        if at + 8 + length > len(data):
            break
        records.append((link, data[at + 8: at + 8 + length]))
        at += 8 + length
    return records


def test_a_sw_rod_aggregation_plugins_payload_reads_as_the_detectors_bytes(tmp_path):
    """The SW ROD with the triggered board's aggregation plugin: each stored ROB fragment says
    `DetectorPayload`, its payload() is the plugin's layout (big-endian link and length
    records of the e-links' chunks), and chunks() refuses to read it as swdaq's records."""
    root = ROOT
    plugin = tmp_path / "libtriggered_board.so"
    subprocess.run(["gcc", "-std=c99", "-O2", "-shared", "-fPIC", "-I", str(root / "include"),
                    str(root / "examples" / "plugins" / "triggered_board.c"), "-o", str(plugin)], check=True)
    config = tmp_path / "swrod.toml"
    config.write_text(
        f'[run]\nduration_s = 0.0\nmetrics_addr = ""\noutput_dir = "{tmp_path / "out"}"\n'
        "[swrod]\nmax_file_mb = 1\ncards = 1\nrobs_per_card = 2\nl1a_rate_hz = 0.0\nmax_l1as = 50\n"
        "hlt_accept_every = 1\n[swrod.felix]\nelinks = 16\nchunk_min = 8\nchunk_max = 90\nseed = 5\n"
        f'[swrod.aggregator]\nplugin = "{plugin}"\n'
    )
    done = subprocess.run([SWDAQ, "run", "--json", "--config", str(config)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    files = sorted((tmp_path / "out").rglob("*.data"))
    assert files
    robs = 0
    for path in files:
        with swdaq.open(path) as f:
            for event in f:
                for rob in event.fragments:
                    robs += 1
                    assert "DetectorPayload" in rob.status_names
                    records = chunk_records(rob.payload().tobytes(), ">")
                    links = [link for link, _ in records]
                    # The ROB's 8 e-links, numbered on the card: 0-7 or 8-15.
                    assert links in (list(range(8)), list(range(8, 16))), links
                    try:
                        rob.chunks()
                    except ValueError as error:
                        assert "payload()" in str(error)
                    else:
                        raise AssertionError("chunks() read a detector's payload as swdaq's records")
    assert robs == 2 * 50


SLICE_CHANNELS, SLICE_SAMPLES, SLICES = 16, 64, 4000


def slice_packet(board: int, index: int) -> bytes:
    """A streaming board's packet (examples/plugins/streaming_board.c's layout): magic, board,
    channels, samples, the slice's first timestamp (1 MHz ticks), then the samples."""
    samples = [(index * 31 + i * 7 + board) % 4096 for i in range(SLICE_CHANNELS * SLICE_SAMPLES)]
    header = struct.pack(">HHHHQ", 0x5B0A, board, SLICE_CHANNELS, SLICE_SAMPLES, 1_000_000 + 64 * index)
    return header + struct.pack(f">{len(samples)}H", *samples)


def test_streaming_boards_slices_read_back_from_the_chain_s_records(tmp_path):
    """Two streaming boards read by the chain (`source.format = "board"`) through a no-code
    packet format, no processor, read out by a periodic trigger on the boards' 1 MHz clock:
    every record's fragment of a board holds, as board frames, exactly the packets of its
    window, each with its timestamp."""
    port = free_udp_ports(2)
    size = 16 + 2 * SLICE_CHANNELS * SLICE_SAMPLES
    config = tmp_path / "boards.toml"
    config.write_text(
        f'[run]\nduration_s = 6\nmetrics_addr = ""\noutput_dir = "{tmp_path / "records"}"\n'
        f'[source]\nkind = "udp"\nformat = "board"\nudp_address = "127.0.0.1:{port}"\n'
        "first_timestamp = 1000000\n"
        "[source.board]\nclock_hz = 1000000\nticks_per_frame = 64\nmax_payload_bytes = 4096\n"
        f'[source.board.decoder.format]\nframing = "fixed"\npacket_bytes = {size}\nheader_bytes = 16\n'
        'magic = { offset = 0, width = 2, order = "big", value = 0x5B0A }\n'
        'source_id = { offset = 2, width = 2, order = "big" }\n'
        'timestamp = { offset = 8, width = 8, order = "big" }\n'
        "[emulator]\nlinks = 2\n[readout]\nbuffer_s = 0.5\n"
        "[trigger]\nwindow_before_ticks = 100\nwindow_after_ticks = 200\n"
        "[trigger.multiplicity]\nenabled = false\n[trigger.track]\nenabled = false\n"
        "[trigger.periodic]\nenabled = true\nrate_hz = 50.0\n"
    )
    run = subprocess.Popen([SWDAQ, "run", "--json", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not all(udp_port_bound(port + k) for k in range(2)):
        assert time.monotonic() < deadline and run.poll() is None, "swdaq run never bound its ports"
        time.sleep(0.02)
    sent = [{}, {}]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for index in range(SLICES):
            for board in range(2):
                packet = slice_packet(board, index)
                sent[board][1_000_000 + 64 * index] = packet
                sender.sendto(packet, ("127.0.0.1", port + board))
            if index % 32 == 31:
                time.sleep(0.002)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 0, err.decode()
    summary = json.loads(out)
    lossless = all(link["checks"]["missing_frames"] == 0 for link in summary["links"])

    records = 0
    for path in sorted((tmp_path / "records").glob("*.hdf5")):
        with swdaq.open(path) as f:
            for record in f:
                records += 1
                for fragment in record.fragments:
                    if fragment.fragment_type != "Detector_Frames":
                        continue
                    if not fragment.ok:
                        assert not lossless, fragment.problems
                        continue
                    board = fragment.source_id
                    begin, end = fragment.window_begin, fragment.window_end
                    want = [t for t in sorted(sent[board]) if t + 64 > begin and t < end]
                    got = fragment.board_frames()
                    assert [t for t, _, _, _ in got] == want
                    for timestamp, source, _, payload in got:
                        assert source == board
                        assert bytes(payload) == sent[board][timestamp]
    assert records == summary["trigger"]["decisions"] >= 3
