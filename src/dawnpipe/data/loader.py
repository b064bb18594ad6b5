"""Read prepared arrays (memory-mapped) and check them against the manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dawnpipe.data.arrays import load_array
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json


class ShardedArray:
    """uint8 N x H x W x C images kept in several memory-mapped ``.npy`` shards
    (format npy-uint8-shards: ImageNet-sized sets never sit in memory whole).
    Indexing with an int, a slice or an index array returns an ordinary
    in-memory array, so the pages are read before the caller's clock starts."""

    def __init__(self, shards: list[np.ndarray]):
        self.shards = shards
        self.starts = np.cumsum([0] + [len(s) for s in shards])
        self.shape = (int(self.starts[-1]), *shards[0].shape[1:])
        self.dtype = shards[0].dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def prefix(self, n: int) -> ShardedArray:
        if n >= len(self):
            return self
        k = int(np.searchsorted(self.starts, n, side="left"))  # shards needed to hold n items
        parts = self.shards[:k]
        if k and self.starts[k] > n:
            parts = [*parts[:-1], parts[-1][: n - self.starts[k - 1]]]
        return ShardedArray(parts or [self.shards[0][:0]])

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            i = int(index) + (len(self) if index < 0 else 0)
            k = int(np.searchsorted(self.starts, i, side="right")) - 1
            return np.array(self.shards[k][i - self.starts[k]])
        if isinstance(index, slice):
            index = np.arange(*index.indices(len(self)))
        return self.take(np.asarray(index))

    def take(self, index: np.ndarray) -> np.ndarray:
        """Items at ``index`` (any order), gathered shard by shard in sorted order for locality."""
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        shard_of = np.searchsorted(self.starts, index, side="right") - 1
        for k in np.unique(shard_of):
            where = np.nonzero(shard_of == k)[0]
            local = index[where] - self.starts[k]
            order = np.argsort(local, kind="stable")
            out[where[order]] = self.shards[k][local[order]]
        return out

    def __array__(self, dtype=None, copy=None):
        whole = self.take(np.arange(len(self)))
        return whole if dtype is None else whole.astype(dtype)


@dataclass(frozen=True)
class Split:
    images: np.ndarray | ShardedArray  # uint8, N x H x W (grey) or N x H x W x C
    labels: np.ndarray  # integer class ids (uint8; int16 beyond 256 classes)
    classes: list[str]
    stats: dict | None = None  # per-channel mean/std of pixel/255 where prepare computed them


def load_split(prepared: Path, split: str, limit: int | None = None, held_out: int = 0) -> Split:
    """The first ``limit`` items of ``split`` (all when None). Subsets are a
    prefix, so every seed and stage sees the same items. ``held_out``: the
    split's last items kept out first (held_out_split gives them), so a
    limit never reaches into them."""
    prepared = Path(prepared)
    manifest = read_json(prepared / "manifest.json")
    if split not in manifest.get("splits", {}):
        raise DawnpipeError(f"{prepared / 'manifest.json'}: no split {split!r}")
    entry = manifest["splits"][split]
    if "shards" in entry["images"]:
        images = _load_shards(prepared, entry["images"])
    else:
        images = load_array(prepared / entry["images"]["file"])
    labels = load_array(prepared / entry["labels"]["file"])
    for name, arr in (("images", images), ("labels", labels)):
        if list(arr.shape) != entry[name]["shape"]:
            where = entry[name].get("file", f"the shards of {split}")
            raise DawnpipeError(f"{prepared / where}: shape {list(arr.shape)} disagrees with manifest.json ({entry[name]['shape']})")
    if held_out:
        if held_out >= len(labels):
            raise DawnpipeError(f"{prepared}: held_out {held_out} leaves none of the {len(labels)} items of {split!r} to train on")
        limit = len(labels) - held_out if limit is None else min(limit, len(labels) - held_out)
    if limit is not None:
        images = images.prefix(limit) if isinstance(images, ShardedArray) else images[:limit]
        labels = labels[:limit]
    stats = {"mean": entry["mean"], "std": entry["std"]} if "mean" in entry else None
    return Split(images=images, labels=labels, classes=manifest["classes"], stats=stats)


DEFAULT_HELD_OUT = 5000  # items of an entry's held_out: true


def held_out_size(entry: dict) -> int:
    """The number of training items an entry holds out (its field held_out: true, false or a count)."""
    value = entry.get("held_out", False)
    if value is True:
        return DEFAULT_HELD_OUT
    return int(value or 0)


def held_out_split(prepared: Path, n: int) -> Split:
    """The last ``n`` items of the training split: the held-out set, the same for every entry."""
    full = load_split(prepared, "train")
    total = len(full.labels)
    if not 0 < n < total:
        raise DawnpipeError(f"{prepared}: held_out {n} must be between 1 and {total - 1} (the training split has {total} items)")
    images = np.asarray(full.images[total - n : total]) if not isinstance(full.images, ShardedArray) else full.images[np.arange(total - n, total)]
    return Split(images=images, labels=full.labels[total - n :], classes=full.classes, stats=full.stats)


def new_test_split(prepared: Path, task_name: str) -> tuple[Split, dict]:
    """The task's new test set as prepared (split ``new_test``) and what
    manifest.json says of it (title, verified); one line when it was not fetched."""
    manifest = read_json(Path(prepared) / "manifest.json")
    if "new_test" not in manifest.get("splits", {}):
        raise DawnpipeError(
            f"{Path(prepared) / 'manifest.json'}: no new test set (the entry asks for one: new_test: true); "
            f"fetch it with `dawnpipe fetch {task_name} --new-test` and prepare again (the pipeline does when an entry asks)"
        )
    return load_split(prepared, "new_test"), manifest.get("new_test", {})


def evaluation_sets(prepared: Path, entry: dict) -> list[tuple[str, Split, dict]]:
    """What every evaluation of ``entry`` is also scored on, besides the test
    set: (log column prefix, items, what it is) for its held-out split (entry
    field held_out) and its task's new test set (new_test)."""
    from dawnpipe.logs import HELD_OUT_PREFIX, NEW_TEST_PREFIX

    sets = []
    held = held_out_size(entry)
    if held:  # the training split's last items: never trained on
        sets.append((HELD_OUT_PREFIX, held_out_split(prepared, held), {"title": f"held-out split (last {held} training items)", "verified": True}))
    if entry.get("new_test"):
        split, about = new_test_split(prepared, entry["task"])
        sets.append((NEW_TEST_PREFIX, split, about))
    return sets


def _load_shards(prepared: Path, spec: dict) -> ShardedArray:
    shards = []
    for shard in spec["shards"]:
        arr = load_array(prepared / shard["file"])
        if len(arr) != shard["items"] or list(arr.shape[1:]) != spec["shape"][1:]:
            raise DawnpipeError(
                f"{prepared / shard['file']}: shape {list(arr.shape)} disagrees with manifest.json ({shard['items']} items of {spec['shape'][1:]})"
            )
        shards.append(arr)
    if not shards:
        raise DawnpipeError(f"{prepared / 'manifest.json'}: a split without shards")
    return ShardedArray(shards)


def prepared_dir(path: Path, task: str) -> Path:
    """The prepared data of ``task``: ``path`` itself when it holds a
    manifest.json, else ``path/<task>`` (``path`` is then a directory of
    prepared data sets, one per task, like data/prepared/; DVC passes that,
    since its stage templates cannot look up an entry's task)."""
    path = Path(path)
    found = path if (path / "manifest.json").is_file() else path / task
    manifest = found / "manifest.json"
    if not manifest.is_file():
        raise DawnpipeError(
            f"{path}: no prepared data for task {task} (no {path / 'manifest.json'} or {manifest}); run 'dawnpipe prepare {task} --out {path / task}' first"
        )
    prepared_task = read_json(manifest).get("task", task)
    if prepared_task != task:
        raise DawnpipeError(f"{manifest}: data prepared for task {prepared_task!r}, not {task!r}")
    return found
