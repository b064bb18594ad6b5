"""The IDX format of (Fashion-)MNIST: a big-endian header (magic 0x0000TTDD:
TT the element type, DD the number of dimensions, then DD uint32 sizes) and
the raw array."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from dawnpipe.errors import DawnpipeError

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise DawnpipeError(f"{path}: {len(data)} bytes, too short for an IDX header")
    zero, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code not in _TYPES or ndim == 0:
        raise DawnpipeError(f"{path}: not an IDX file (magic {data[:4].hex()})")
    header = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_TYPES[type_code])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) - header != expected:
        raise DawnpipeError(f"{path}: header says shape {shape} ({expected} bytes) but {len(data) - header} bytes follow")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write ``array`` (uint8) as IDX, gzip-compressed when the name ends in .gz (tests, mirrors)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())
