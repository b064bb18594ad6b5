"""Read prepared arrays (memory-mapped) and check them against the manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8, N x H x W (grey) or N x H x W x C
    labels: np.ndarray  # uint8 class ids
    classes: list[str]


def load_split(prepared: Path, split: str, limit: int | None = None) -> Split:
    """The first ``limit`` items of ``split`` (all when None). Subsets are a
    prefix, so every seed and stage sees the same items."""
    prepared = Path(prepared)
    manifest = read_json(prepared / "manifest.json")
    if split not in manifest.get("splits", {}):
        raise DawnpipeError(f"{prepared / 'manifest.json'}: no split {split!r}")
    entry = manifest["splits"][split]
    images = np.load(prepared / entry["images"]["file"], mmap_mode="r")
    labels = np.load(prepared / entry["labels"]["file"], mmap_mode="r")
    for name, arr in (("images", images), ("labels", labels)):
        if list(arr.shape) != entry[name]["shape"]:
            raise DawnpipeError(f"{prepared / entry[name]['file']}: shape {list(arr.shape)} disagrees with manifest.json ({entry[name]['shape']})")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return Split(images=images, labels=labels, classes=manifest["classes"])


def prepared_dir(path: Path, task: str) -> Path:
    """The prepared data of ``task``: ``path`` itself when it holds a
    manifest.json, else ``path/<task>`` (``path`` is then a directory of
    prepared data sets, one per task, like data/prepared/; DVC passes that,
    since its stage templates cannot look up an entry's task)."""
    path = Path(path)
    found = path if (path / "manifest.json").is_file() else path / task
    manifest = found / "manifest.json"
    if not manifest.is_file():
        raise DawnpipeError(f"{path}: no prepared data for task {task} (no {path / 'manifest.json'} or {manifest}); "
                            f"run 'dawnpipe prepare {task} --out {path / task}' first")
    prepared_task = read_json(manifest).get("task", task)
    if prepared_task != task:
        raise DawnpipeError(f"{manifest}: data prepared for task {prepared_task!r}, not {task!r}")
    return found
