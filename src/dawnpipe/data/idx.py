"""Tasks in the IDX format of (Fashion-)MNIST: a big-endian header (magic
0x0000TTDD: TT the element type, DD the number of dimensions, then DD uint32
sizes) and the raw array; a list of files with known checksums, prepared into
the npy-uint8 layout (``KIND``)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from dawnpipe.data.arrays import save_split
from dawnpipe.data.files import fetch_listed_files
from dawnpipe.errors import DawnpipeError
from dawnpipe.tasks.kind import DataKind

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
    """Write ``array`` (uint8) as IDX, gzip-compressed when the name ends in .gz: the
    torchvision layout of a program's data (dawnpipe.data.layouts), and tests' mirrors."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def prepare_idx(task, raw: Path, out: Path) -> dict:
    splits: dict = {}
    for split, spec in task.data["splits"].items():
        images = read_idx(raw / spec["images"])
        labels = read_idx(raw / spec["labels"])
        if images.shape[0] != labels.shape[0]:
            raise DawnpipeError(f"{raw / spec['images']}: {images.shape[0]} images but {raw / spec['labels']} has {labels.shape[0]} labels")
        n_classes = len(task.data["classes"])
        if labels.size and (labels.max() >= n_classes):
            raise DawnpipeError(f"{raw / spec['labels']}: label {int(labels.max())} out of range 0..{n_classes - 1}")
        splits[split] = save_split(out, split, images, labels, task.data["classes"], spec.get("items"))
    return {"format": "npy-uint8", "classes": task.data["classes"], "splits": splits}


KIND = DataKind("idx", items="image", fetch=fetch_listed_files, prepare=prepare_idx)
