"""The prepared-data layout every image task shares: uint8 arrays saved
atomically as ``.npy`` with the sha256 of their content, and one split's
images, labels and class counts as a manifest entry."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from dawnpipe.fileio import atomic_path


def array_sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def save_array(path: Path, array: np.ndarray) -> dict:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)
    return {"file": path.name, "shape": list(array.shape), "dtype": str(array.dtype), "sha256": array_sha256(array)}


def save_split(out: Path, split: str, images: np.ndarray, labels: np.ndarray, classes: list[str], official_items: int | None) -> dict:
    """Write one split of the npy-uint8 layout; its manifest entry. Labels must already be in range."""
    if official_items is not None and images.shape[0] != official_items:
        print(f"prepare: note: {split} has {images.shape[0]} items (the official set has {official_items})")
    counts = np.bincount(labels, minlength=len(classes))
    entry = {
        "items": int(images.shape[0]),
        "images": save_array(out / f"{split}_images.npy", images),
        "labels": save_array(out / f"{split}_labels.npy", labels.astype(np.uint8)),
        "class_counts": {c: int(n) for c, n in zip(classes, counts)},
    }
    print(f"prepare: {split}: {images.shape[0]} items, shape {tuple(images.shape[1:])}")
    return entry


def load_array(path: Path) -> np.ndarray:
    """A prepared ``.npy`` array, memory-mapped (never unpickled); a truncated
    or foreign file is one DawnpipeError naming it (prepare again)."""
    from dawnpipe.errors import DawnpipeError

    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as e:
        raise DawnpipeError(f"{path}: not a readable prepared array ({str(e)[:160]}); run `dawnpipe prepare` again") from None
