"""A task's new test set: images collected after the fact the way the test set
was, for the generalization analysis (docs/rules.md#analysis-metrics) of
entries that ask for it (entry field ``new_test: true``). For CIFAR-10:
CIFAR-10.1 v6 (Recht et al. 2018), 2,000 images in two ``.npy`` files of the
CIFAR-10.1 repository (``datasets/cifar10.1_v6_data.npy``, ``_labels.npy``).

The task file's ``data.new_test`` says where the files come from and, when
known, their checksums (``files: {name: {sha256, bytes}}``). None is known
for CIFAR-10.1 here: the files are then fetched unverified, and fetch.json,
manifest.json, the fetch's log, the run's output and run.json all say so.

The files are untrusted downloads and plain arrays: read with
``allow_pickle=False`` (a pickled or object array is refused, nothing in it
runs), the images must be uint8 N x H x W x C as the task's training images,
the labels integers in the task's class range. Any problem is one line
naming the file.

    dawnpipe fetch cifar10 --dest data/raw/cifar10 --new-test [--new-test-source URL_OR_DIR]
    dawnpipe prepare cifar10 --raw data/raw/cifar10 --out data/prepared/cifar10   # + new_test_*.npy
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.data.arrays import save_split
from dawnpipe.data.files import fetch_files, has_checksum, source_directory
from dawnpipe.errors import DawnpipeError

SPLIT = "new_test"  # its split in the prepared data (manifest.json, new_test_images.npy)
RECORD = "new_test"  # its key in fetch.json and manifest.json


def spec_of(task) -> dict[str, Any]:
    """The task's ``data.new_test`` section; a one-line error for a task without one."""
    spec = task.data.get("new_test")
    if not spec:
        raise DawnpipeError(f"task {task.name} has no new test set (no data.new_test in {task.source or 'its task file'})")
    return spec


def fetch_new_test(task, dest: Path, cache: Path, source: str | None) -> dict[str, Any]:
    """Fetch the new test set's files into ``dest`` (checked where the task
    file gives checksums); its record for fetch.json."""
    spec = spec_of(task)
    location = {"base_url": spec.get("base_url"), "local_dirs": spec.get("local_dirs", []), "files": spec["files"]}
    if source is not None:
        source = source_directory(source, location)
    files = fetch_files(spec["files"], dest, cache, source, location)
    verified = all(has_checksum(f) for f in spec["files"].values())
    if not verified:
        print(f"fetch: {spec['title']}: NOT VERIFIED: no checksum of its files is known (the task file lists none); they are used as downloaded")
    return {"title": spec["title"], "verified": verified, "files": files}


def read_images(path: Path, side: tuple[int, ...]) -> np.ndarray:
    """A uint8 N x H x W x C array (``side`` = (H, W, C)) from an untrusted .npy file."""
    array = _load(path)
    if array.dtype != np.uint8 or array.ndim != 1 + len(side) or tuple(array.shape[1:]) != tuple(side) or array.shape[0] == 0:
        want = " x ".join(map(str, ("N", *side)))
        raise DawnpipeError(f"{path}: expected a uint8 array of {want} images, got {array.dtype} {tuple(array.shape)}")
    return np.ascontiguousarray(array)


def read_labels(path: Path, items: int, classes: int) -> np.ndarray:
    """``items`` integer class ids in 0..classes-1 from an untrusted .npy file."""
    array = _load(path)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise DawnpipeError(f"{path}: expected a 1-D array of integer class ids, got {array.dtype} {tuple(array.shape)}")
    if array.shape[0] != items:
        raise DawnpipeError(f"{path}: {array.shape[0]} labels for {items} images")
    bad = np.flatnonzero((array < 0) | (array >= classes))
    if bad.size:
        raise DawnpipeError(f"{path}: label {int(array[bad[0]])} at item {int(bad[0])} is outside 0..{classes - 1}")
    return array.astype(np.uint8 if classes <= 256 else np.int16)


def _load(path: Path) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e) or "Python objects" in str(e):  # a pickle instead of an array, or an array of Python objects
            raise DawnpipeError(f"{path}: not a plain .npy array: it needs pickle to load, and dawnpipe runs nothing from a download: refused") from None
        raise DawnpipeError(f"{path}: not a plain .npy array ({str(e)[:160]})") from None
    except (OSError, EOFError) as e:  # a truncated or unreadable file
        raise DawnpipeError(f"{path}: not a plain .npy array ({str(e)[:160]})") from None
    if not isinstance(array, np.ndarray):  # np.load gives a lazy archive for a zip (.npz) file
        raise DawnpipeError(f"{path}: not a plain .npy array (a {type(array).__name__})")
    return array


def prepare_new_test(task, raw: Path, out: Path, record: dict[str, Any], side: tuple[int, ...]) -> dict[str, Any]:
    """Write the new test set as split ``new_test`` of the npy-uint8 layout;
    its manifest fields (the split's entry, and what it is)."""
    spec = spec_of(task)
    classes = list(task.data["classes"])
    images = read_images(raw / spec["images"], side)
    labels = read_labels(raw / spec["labels"], images.shape[0], len(classes))
    entry = save_split(out, SPLIT, images, labels, classes, spec.get("items"))
    if not record.get("verified"):
        print(f"prepare: {spec['title']}: not verified by any checksum (none is known)")
    return {"split": entry, "about": {"title": spec["title"], "verified": bool(record.get("verified")), "items": int(images.shape[0])}}
