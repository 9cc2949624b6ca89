"""Read a swdaq HDF5 trigger-record file with h5py and numpy.

Usage: python examples/read_records.py FILE.hdf5

Layout (DUNE hdf5libs-like): one group per record, ``TriggerRecordNNNNN.SSSS``, holding the
``TriggerRecordHeader`` dataset and a ``RawData`` group with one uint8 dataset per fragment.
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
WIBETH_FRAME_BYTES = 7200
WIBETH_TYPE = 12


def fragment_header(raw: np.ndarray) -> np.void:
    header = raw[: FRAGMENT_HEADER.itemsize].view(FRAGMENT_HEADER)[0]
    if header["marker"] != FRAGMENT_MARKER or header["version"] != 5:
        raise ValueError("not a DUNE v5 fragment header")
    return header


def wibeth_adcs(frames: np.ndarray) -> np.ndarray:
    """ADCs of concatenated WIBEth frames as an array [frame, sample, channel] of uint16.

    Each sample is 14 little-endian uint64 words (896 bits) starting at byte 32 of the
    frame; channel c occupies bits [14c, 14c + 14).
    """
    n = frames.size // WIBETH_FRAME_BYTES
    rows = frames[: n * WIBETH_FRAME_BYTES].reshape(n, WIBETH_FRAME_BYTES)[:, 32:]
    bits = np.unpackbits(rows.reshape(n, 64, 112), axis=2, bitorder="little")
    weights = (1 << np.arange(14, dtype=np.uint32)).astype(np.uint32)
    return (bits.reshape(n, 64, 64, 14).astype(np.uint32) * weights).sum(axis=3).astype(np.uint16)


def wibeth_timestamps(frames: np.ndarray) -> np.ndarray:
    n = frames.size // WIBETH_FRAME_BYTES
    return frames[: n * WIBETH_FRAME_BYTES].reshape(n, WIBETH_FRAME_BYTES)[:, 8:16].copy().view("<u8")[:, 0]


def records(path: str):
    """Yields (record name, {dataset name: (fragment header, payload bytes)})."""
    with h5py.File(path, "r") as f:
        for name in sorted(k for k in f.keys() if k.startswith("TriggerRecord")):
            fragments = {}
            for ds, data in f[name]["RawData"].items():
                raw = np.asarray(data[()], dtype=np.uint8)
                fragments[ds] = (fragment_header(raw), raw[FRAGMENT_HEADER.itemsize :])
            yield name, fragments


def main(path: str) -> None:
    with h5py.File(path, "r") as f:
        print({k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()})
    for name, fragments in records(path):
        print(name)
        for ds, (header, payload) in fragments.items():
            line = f"  {ds}: trigger {header['trigger_number']} window [{header['window_begin']}, {header['window_end']})"
            if header["fragment_type"] == WIBETH_TYPE:
                adcs = wibeth_adcs(payload)
                line += f", {adcs.shape[0]} frames, mean ADC {adcs.mean():.1f}"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1])
