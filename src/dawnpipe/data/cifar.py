"""CIFAR-10 in its official "python version" layout.

``cifar-10-python.tar.gz`` holds ``cifar-10-batches-py/{data_batch_1..5,
test_batch, batches.meta}``: Python 2 pickles of dicts with byte-string keys;
``b"data"`` is a uint8 array of N x 3072 (the 1024 red, then green, then blue
values of a 32 x 32 image, row by row) and ``b"labels"`` a list of N class ids.
The members are read straight from the verified tarball (nothing is extracted,
so no member path can point outside the output directory) and unpickled by an
unpickler that can build nothing but plain containers and numpy arrays: a
pickle is a program, and a modified mirror must not be able to run one.
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.data.arrays import save_split
from dawnpipe.data.files import fetch_listed_files
from dawnpipe.errors import DawnpipeError
from dawnpipe.tasks.kind import DataKind

BATCH_DIR = "cifar-10-batches-py"
SIDE, CHANNELS = 32, 3

# (module, name) pairs an array pickle needs; numpy 2 renamed numpy.core to numpy._core
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # how Python 3 pickles bytes at protocol 2
}


class _ArrayUnpickler(pickle.Unpickler):
    def __init__(self, file, source: str):
        super().__init__(file, encoding="bytes")  # Python 2 str -> bytes, as the CIFAR page says
        self.source = source

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise DawnpipeError(f"{self.source}: the pickle asks for {module}.{name}, which a CIFAR-10 batch never contains; refusing to load it")
        return super().find_class(module, name)


def _load_member(tar: tarfile.TarFile, archive: Path, name: str) -> dict:
    source = f"{archive}:{name}"
    try:
        member = tar.getmember(name)
    except KeyError:
        raise DawnpipeError(f"{archive}: no member {name} (is this the CIFAR-10 python version?)") from None
    f = tar.extractfile(member)
    if f is None:
        raise DawnpipeError(f"{source}: not a regular file")
    try:
        doc = _ArrayUnpickler(io.BytesIO(f.read()), source).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise DawnpipeError(f"{source}: not a readable pickle ({e})") from None
    if not isinstance(doc, dict):
        raise DawnpipeError(f"{source}: expected a dict, got {type(doc).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in doc.items()}


def _batch_arrays(doc: dict, source: str) -> tuple[np.ndarray, np.ndarray]:
    data, labels = doc.get("data"), doc.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != SIDE * SIDE * CHANNELS:
        shape = getattr(data, "shape", None)
        raise DawnpipeError(f"{source}: 'data' must be a uint8 array of N x {SIDE * SIDE * CHANNELS}, got {type(data).__name__} {shape}")
    if not isinstance(labels, list) or len(labels) != data.shape[0]:
        raise DawnpipeError(
            f"{source}: 'labels' must be a list of {data.shape[0]} class ids, got {type(labels).__name__} of {len(labels) if hasattr(labels, '__len__') else '?'}"
        )
    images = data.reshape(-1, CHANNELS, SIDE, SIDE).transpose(0, 2, 3, 1)  # -> N x 32 x 32 x 3 (HWC)
    return np.ascontiguousarray(images), np.asarray(labels, dtype=np.int64)


def read_cifar10(archive: Path, splits: dict[str, Any], classes: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{split: (images N x 32 x 32 x 3 uint8, labels uint8)} from the tarball."""
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise DawnpipeError(f"{archive}: not a readable tar archive ({e})") from None
    with tar:
        meta = _load_member(tar, archive, f"{BATCH_DIR}/batches.meta")
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", [])]
        if names != list(classes):
            raise DawnpipeError(f"{archive}:{BATCH_DIR}/batches.meta: label_names {names} differ from the task's classes {list(classes)}")
        out = {}
        for split, spec in splits.items():
            parts = [_batch_arrays(_load_member(tar, archive, f"{BATCH_DIR}/{b}"), f"{archive}:{BATCH_DIR}/{b}") for b in spec["batches"]]
            images = np.concatenate([p[0] for p in parts])
            labels = np.concatenate([p[1] for p in parts])
            if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
                bad = int(labels.max() if labels.max() >= len(classes) else labels.min())
                raise DawnpipeError(f"{archive}: {split} has label {bad}, outside 0..{len(classes) - 1}")
            out[split] = (images, labels.astype(np.uint8))
    return out


def prepare_cifar10(task, raw: Path, out: Path) -> dict:
    """PREPARERS entry: the same npy-uint8 layout as Fashion-MNIST (N x 32 x 32 x 3)."""

    data = task.data
    arrays = read_cifar10(raw / data["archive"], data["splits"], data["classes"])
    splits = {split: save_split(out, split, images, labels, data["classes"], data["splits"][split].get("items")) for split, (images, labels) in arrays.items()}
    return {"format": "npy-uint8", "classes": list(data["classes"]), "splits": splits}


# One tarball, verified by its published MD5; prepare reads it in place.
KIND = DataKind("cifar10-python", items="image", fetch=fetch_listed_files, prepare=prepare_cifar10)
