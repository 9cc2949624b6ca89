"""Read a swdaq HDF5 trigger-record file with h5py and numpy (no swdaq code needed).

Usage: python examples/read_records.py FILE.hdf5

Layout (DUNE hdf5libs file layout 5): one group per record, ``TriggerRecordNNNNN.SSSS``
(trigger and sequence number), holding a ``RawData`` group with one dataset per fragment,
named ``<source>_<fragment type>`` (e.g. ``Detector_Readout_0x00000001_WIBEth``), and the
record header ``TR_Builder_0x00000000_TriggerRecordHeader``. Datasets are int8 of shape
``[bytes, 1]`` as hdf5libs writes them: view them as uint8 bytes.

A fragment is a 72-byte header (DUNE FragmentHeader v5, little-endian) and its payload; a
WIBEth payload is a run of 7200-byte frames, each 64 time samples x 64 channels of 14-bit ADCs.
"""

import sys

import h5py
import numpy as np

# DUNE FragmentHeader v5: 72 bytes, little-endian.
FRAGMENT_HEADER = np.dtype(
    [
        ("marker", "<u4"),
        ("version", "<u4"),
        ("size", "<u8"),
        ("trigger_number", "<u8"),
        ("trigger_timestamp", "<u8"),
        ("window_begin", "<u8"),
        ("window_end", "<u8"),
        ("run_number", "<u4"),
        ("error_bits", "<u4"),
        ("fragment_type", "<u4"),
        ("sequence_number", "<u2"),
        ("detector_id", "<u2"),
        ("source_version", "<u2"),
        ("source_subsystem", "<u2"),
        ("source_id", "<u4"),
    ]
)
FRAGMENT_MARKER = 0x11112222
FRAGMENT_VERSION = 5
WIBETH_TYPE = 12
WIBETH_FRAME_BYTES = 7200
WIBETH_ROWS_AT = 32  # 16-byte DAQ Ethernet header + 16-byte WIB header
RECORD_HEADER_SUFFIX = "_TriggerRecordHeader"


def as_bytes(dataset: h5py.Dataset) -> np.ndarray:
    """A dataset's content as a flat uint8 array."""
    return np.asarray(dataset[()]).view(np.uint8).reshape(-1)


def fragment_header(raw: np.ndarray) -> np.void:
    """The 72-byte header at the start of a fragment; checks marker, version and size."""
    header = raw[: FRAGMENT_HEADER.itemsize].view(FRAGMENT_HEADER)[0]
    if header["marker"] != FRAGMENT_MARKER or header["version"] != FRAGMENT_VERSION:
        raise ValueError("not a DUNE v5 fragment header")
    if header["size"] != raw.size:
        raise ValueError(f"fragment size {header['size']} but dataset holds {raw.size} bytes")
    return header


def wibeth_adcs(payload: np.ndarray) -> np.ndarray:
    """ADCs of concatenated WIBEth frames as uint16 [frame, sample, channel].

    Each frame holds 64 rows (one per time sample) of 14 little-endian uint64 words (896
    bits, 112 bytes) from byte 32 on; channel c occupies bits [14c, 14c + 14) of its row.
    """
    n = payload.size // WIBETH_FRAME_BYTES
    rows = payload[: n * WIBETH_FRAME_BYTES].reshape(n, WIBETH_FRAME_BYTES)[:, WIBETH_ROWS_AT:]
    # Little-endian words, bits numbered from the LSB: unpack each byte LSB first.
    bits = np.unpackbits(rows.reshape(n, 64, 112), axis=2, bitorder="little")
    weights = 1 << np.arange(14, dtype=np.uint16)
    return (bits.reshape(n, 64, 64, 14) * weights).sum(axis=3, dtype=np.uint16)


def wibeth_timestamps(payload: np.ndarray) -> np.ndarray:
    """Timestamp (62.5 MHz ticks) of each frame's first sample: bytes 8..16."""
    n = payload.size // WIBETH_FRAME_BYTES
    frames = payload[: n * WIBETH_FRAME_BYTES].reshape(n, WIBETH_FRAME_BYTES)
    return frames[:, 8:16].copy().view("<u8")[:, 0]


def records(path: str):
    """Yields (record name, {dataset name: (fragment header, payload bytes)}) in trigger order;
    the record header dataset is left out."""
    with h5py.File(path, "r") as f:
        names = [k for k in f.keys() if k.startswith("TriggerRecord")]
        for name in sorted(names, key=lambda k: tuple(int(x) for x in k[len("TriggerRecord") :].split("."))):
            fragments = {}
            for ds, data in f[name]["RawData"].items():
                if ds.endswith(RECORD_HEADER_SUFFIX):
                    continue
                raw = as_bytes(data)
                fragments[ds] = (fragment_header(raw), raw[FRAGMENT_HEADER.itemsize :])
            yield name, fragments


def main(path: str) -> None:
    with h5py.File(path, "r") as f:
        print({k: v for k, v in f.attrs.items() if k != "filelayout_params"})
    for name, fragments in records(path):
        print(name)
        for ds, (header, payload) in fragments.items():
            line = f"  {ds}: {header['size']} bytes, window [{header['window_begin']}, {header['window_end']})"
            if header["fragment_type"] == WIBETH_TYPE:
                adcs = wibeth_adcs(payload)
                line += f", {adcs.shape[0]} frames, median ADC {np.median(adcs):.0f}"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1])
