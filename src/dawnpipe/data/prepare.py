"""prepare: decode the verified raw files once into memory-mappable arrays.

    dawnpipe prepare fashion-mnist --raw data/raw/fashion-mnist --out data/prepared/fashion-mnist
    dawnpipe prepare imagenet --raw data/raw/imagenet --out data/prepared/imagenet --workers 8

Writes ``<split>_images.npy`` (uint8, N x H x W or N x H x W x C) and
``<split>_labels.npy`` (uint8 class ids) for every split, plus
``manifest.json`` with shapes, class counts and the sha256 of every array's
content, so a later stage can prove it trains on what was verified.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from dawnpipe.argtypes import positive_int
from dawnpipe.data.fetch import lazy
from dawnpipe.data.idx import read_idx
from dawnpipe.data.squad import prepare_squad
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path, read_json, write_json
from dawnpipe.tasks import get_task


def array_sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def save_array(path: Path, array: np.ndarray) -> dict:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)
    return {"file": path.name, "shape": list(array.shape), "dtype": str(array.dtype), "sha256": array_sha256(array)}


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


def prepare(task_name: str, raw: Path, out: Path, workers: int | None = None) -> Path:
    """``workers``: processes for the kinds that decode in parallel (PARALLEL_KINDS;
    default: every CPU this process may use). The output does not depend on it."""
    task = get_task(task_name)
    fetched = raw / "fetch.json"
    if not fetched.is_file():
        raise DawnpipeError(f"{raw}: no fetch.json, so these files were never verified; run 'dawnpipe fetch {task_name} --dest {raw}' first")
    if read_json(fetched).get("task") != task_name:
        raise DawnpipeError(f"{fetched}: fetched for task {read_json(fetched).get('task')!r}, not {task_name!r}")
    out.mkdir(parents=True, exist_ok=True)
    # manifest.json vouches for the arrays beside it: gone until this run has written them all
    (out / "manifest.json").unlink(missing_ok=True)
    kind = task.data.get("kind")
    if kind not in PREPARERS:
        raise DawnpipeError(f"task {task_name}: no preparer for data kind {kind!r} (known: {', '.join(PREPARERS)})")
    if kind in PARALLEL_KINDS:
        manifest = PREPARERS[kind](task, raw, out, workers=workers)
    else:
        if workers is not None and workers > 1:
            print(f"prepare: note: {task_name} ({kind}) is prepared in one process; --workers {workers} does not apply")
        manifest = PREPARERS[kind](task, raw, out)
    write_json(out / "manifest.json", {"task": task_name, **manifest})
    return out


# data kind (tasks/*.yaml `data.kind`) -> function(task, raw, out) -> manifest fields
# ("format", "splits", ...); manifest.json is written last, by prepare().
PREPARERS = {
    "idx": prepare_idx,
    "squad": prepare_squad,
    "cifar10-python": lazy("dawnpipe.data.cifar", "prepare_cifar10"),
    "imagenet": lazy("dawnpipe.data.imagenet", "prepare_imagenet"),
}
PARALLEL_KINDS = {"imagenet"}  # preparers taking workers=N (decoding processes)


def configure(p) -> None:
    p.add_argument("task", help="task name, e.g. fashion-mnist")
    p.add_argument("--raw", required=True, type=Path, help="directory written by 'dawnpipe fetch'")
    p.add_argument("--out", required=True, type=Path, help="directory for the arrays and manifest.json")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="processes decoding images in parallel (ImageNet; default: every CPU this process may use; "
                        "the output is the same whatever N); other tasks are prepared in one process")


def run(args) -> int:
    prepare(args.task, args.raw, args.out, workers=args.workers)
    return 0
