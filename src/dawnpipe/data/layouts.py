"""The data layouts a program's own loader reads, written from dawnpipe's
prepared data and exactly the items the program is given (program contract 2,
placeholders ``{torchvision}`` and ``{npz}``; docs/programs.md).

    from dawnpipe.data.layouts import write_layout
    root = write_layout("torchvision", "data/prepared/fashion-mnist", work / "torchvision", train_index, test_index, "fashion-mnist")
    torchvision.datasets.FashionMNIST(root, train=True, download=False)

``train_index`` and ``test_index`` are the positions, in the prepared
``train`` and ``test`` splits, of the items the program is given (the
train/test limits, the test split less the items dawnpipe keeps back); a
layout holds those items, in that order, and nothing else.

The layouts:

- ``torchvision`` of ``fashion-mnist``: ``FashionMNIST/raw/`` with the four
  uncompressed IDX files (``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``), which
  ``torchvision.datasets.FashionMNIST(root, train=..., download=False)``
  reads as they are (it checks that they exist, not their checksums).
- ``torchvision`` of ``imagenet``: ``train/<wnid>/`` and ``val/<wnid>/``, one
  PNG per item, as ``torchvision.datasets.ImageFolder`` reads them. The files
  are the prepared items themselves (the decoded, resized crops dawnpipe
  scores on, losslessly encoded), written anew: no link to the user's
  originals, so nothing a program writes reaches them. Every class has its
  folder, so ImageFolder numbers the classes as dawnpipe does; a selection
  that leaves a class without items needs ``ImageFolder(...,
  allow_empty=True)`` (without it ImageFolder refuses the set, rather than
  numbering the classes differently).
- ``npz`` of ``fashion-mnist`` and ``cifar10``: one uncompressed ``.npz``
  with ``x_train``, ``y_train``, ``x_test``, ``y_test`` as
  ``keras.datasets.<name>.load_data()`` returns them (Fashion-MNIST: uint8
  ``[N, 28, 28]`` and uint8 ``[N]``; CIFAR-10: uint8 ``[N, 32, 32, 3]`` and
  uint8 ``[N, 1]``); plain arrays, read with ``numpy.load(path,
  allow_pickle=False)``.

Refused, with the reason (``layout_refusal``, from
``dawnpipe.programs.data_layouts``, which the entry check reads too):

- ``torchvision`` of ``cifar10``: torchvision's ``CIFAR10`` compares the MD5
  of each of its six files (``data_batch_1``..``5``, ``test_batch``) with the
  official release's before it reads any, also with ``download=False``, and
  raises "Dataset not found or corrupted" otherwise. Files holding only the
  items a program is given (never the whole release: the test split always
  lacks the items dawnpipe keeps back) cannot pass that check, and files that
  did would be the release, not the selection.
- ``npz`` of ``imagenet``: Keras has no ImageNet set, and 1.28 million
  images are not one in-memory array.

Each layout is written into a temporary directory beside ``out_dir`` and
renamed into place (what stood there before is replaced whole), its files
made read-only; it is written only when the harness asks for it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dawnpipe.data.loader import ShardedArray, load_split
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json
from dawnpipe.programs.data_layouts import KINDS, layout_refusal

__all__ = ["KINDS", "layout_refusal", "write_layout"]  # the refusal is the entry check's too (dawnpipe.programs.data_layouts)

IDX_FILES = {  # split -> (images, labels), as torchvision's MNIST classes name them in raw/
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
NPZ_NAMES = {"fashion-mnist": "fashion_mnist.npz", "cifar10": "cifar10.npz"}  # keras.datasets' names
IMAGENET_FOLDERS = {"train": "train", "test": "val"}  # "test" is ILSVRC2012 validation
PNG_CHUNK = 256  # items read from the shards at a time


def write_layout(
    kind: str, prepared_dir: str | os.PathLike, out_dir: str | os.PathLike, train_index, test_index, task: str, *, field: str | None = None
) -> Path:
    """Write layout ``kind`` of ``task`` into ``out_dir`` with the prepared
    items at ``train_index`` and ``test_index``; the path its placeholder
    names (``torchvision``: ``out_dir``, the root to give the dataset class;
    ``npz``: the ``.npz`` file in it). ``field``: the entry field that asks
    for it (``program.command[3]``), named in an error. Errors are one
    DawnpipeError line; nothing is left half-written."""
    where = f"field '{field}': " if field else ""
    reason = layout_refusal(kind, task)
    if reason is not None:
        raise DawnpipeError(f"{where}{reason}")
    prepared, out_dir = Path(prepared_dir), Path(out_dir)
    manifest = read_json(prepared / "manifest.json")
    if manifest.get("task", task) != task:
        raise DawnpipeError(f"{prepared / 'manifest.json'}: data prepared for task {manifest.get('task')!r}, not {task!r}")
    train, test = _selected(prepared, "train", train_index), _selected(prepared, "test", test_index)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)
        named = WRITERS[(kind, task)](tmp, train, test, manifest["classes"])
        _make_read_only(tmp)
        _replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir / named if named else out_dir


class Selection:
    """The items of one split at the given positions (in that order)."""

    def __init__(self, images: np.ndarray | ShardedArray, labels: np.ndarray, index: np.ndarray, split: str):
        self.images_source, self.index, self.split = images, index, split
        self.labels = np.asarray(labels[index])

    def __len__(self) -> int:
        return len(self.index)

    def images(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        part = self.index[start:stop]
        if isinstance(self.images_source, ShardedArray):
            return self.images_source.take(part)
        return np.asarray(self.images_source[part])


def _selected(prepared: Path, split: str, index) -> Selection:
    name = f"{split}_index"
    try:
        index = np.asarray(index)
    except (TypeError, ValueError):
        raise DawnpipeError(f"{name}: not an array of item positions") from None
    if index.ndim != 1 or not (np.issubdtype(index.dtype, np.integer) or index.size == 0):
        raise DawnpipeError(f"{name}: expected a one-dimensional array of integer positions, got {index.dtype} of shape {list(index.shape)}")
    index = index.astype(np.int64)
    part = load_split(prepared, split)
    n = len(part.labels)
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = int(index[(index < 0) | (index >= n)][0])
        raise DawnpipeError(f"{name}: position {bad} is outside the {n:,} items of the prepared {split} split ({prepared})")
    if len(np.unique(index)) != len(index):
        raise DawnpipeError(f"{name}: an item is given more than once; a layout holds each item of its selection once")
    return Selection(part.images, part.labels, index, split)


def _make_read_only(root: Path) -> None:
    """Files read-only (a program's loader only reads them); directories stay
    writable by their owner, so the harness can remove the layout after the run."""
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            os.chmod(Path(dirpath) / f, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def _replace(tmp: Path, out_dir: Path) -> None:
    """``tmp`` renamed to ``out_dir``; an old ``out_dir`` is moved aside first and removed after."""
    old = None
    if os.path.lexists(out_dir):
        if out_dir.is_symlink() or not out_dir.is_dir():
            raise DawnpipeError(f"{out_dir}: exists and is not a directory; a layout is written as a directory of its own")
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
        os.replace(out_dir, old / "layout")
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------ the writers
def _uint8(images: np.ndarray, what: str) -> np.ndarray:
    if images.dtype != np.uint8:
        raise DawnpipeError(f"{what}: prepared items are {images.dtype}, the layout stores uint8 pixels")
    return np.ascontiguousarray(images)


def _labels_uint8(labels: np.ndarray, what: str) -> np.ndarray:
    if labels.size and (labels.min() < 0 or labels.max() > 255):
        raise DawnpipeError(f"{what}: labels outside 0..255 do not fit the layout's uint8 labels")
    return labels.astype(np.uint8)


def _torchvision_fashion_mnist(root: Path, train: Selection, test: Selection, classes: list[str]) -> str:
    from dawnpipe.data.idx import write_idx

    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for sel in (train, test):
        images_name, labels_name = IDX_FILES[sel.split]
        images = _uint8(sel.images(), f"{sel.split} split")
        if images.ndim != 3:
            raise DawnpipeError(f"{sel.split} split: items of shape {list(images.shape[1:])}; the IDX images of FashionMNIST are [28, 28] grey")
        write_idx(raw / images_name, images)
        write_idx(raw / labels_name, _labels_uint8(sel.labels, f"{sel.split} split"))
    return ""


def _torchvision_imagenet(root: Path, train: Selection, test: Selection, classes: list[str]) -> str:
    from PIL import Image

    from dawnpipe.progress import progress

    for c in classes:
        if not c or c in (".", "..") or "/" in c or "\\" in c or not c.isprintable():
            raise DawnpipeError(f"class name {c!r} of the prepared data is not a plain folder name")
    total = len(train) + len(test)
    with progress(total=total, desc="layout torchvision imagenet", unit="img") as bar:
        for sel in (train, test):
            folder = root / IMAGENET_FOLDERS[sel.split]
            for c in classes:
                (folder / c).mkdir(parents=True)
            for start in range(0, len(sel), PNG_CHUNK):
                images = _uint8(sel.images(start, start + PNG_CHUNK), f"{sel.split} split")
                for k, image in enumerate(images):
                    item = int(sel.index[start + k])
                    target = folder / classes[int(sel.labels[start + k])] / f"{sel.split}_{item:08d}.png"
                    Image.fromarray(image).save(target, format="PNG", compress_level=1)
                bar.update(len(images))
    return ""


def _npz(task: str) -> Callable[[Path, Selection, Selection, list[str]], str]:
    def write(root: Path, train: Selection, test: Selection, classes: list[str]) -> str:
        arrays = {}
        for sel in (train, test):
            images = _uint8(sel.images(), f"{sel.split} split")
            labels = _labels_uint8(sel.labels, f"{sel.split} split")
            arrays[f"x_{sel.split}"] = images
            arrays[f"y_{sel.split}"] = labels.reshape(-1, 1) if task == "cifar10" else labels  # Keras' CIFAR-10 labels are [N, 1]
        name = NPZ_NAMES[task]
        with open(root / name, "wb") as f:
            np.savez(f, **arrays)  # plain uint8 arrays: nothing to pickle, read back with allow_pickle=False
        return name

    return write


WRITERS: dict[tuple[str, str], Callable[[Path, Selection, Selection, list[str]], str]] = {
    ("torchvision", "fashion-mnist"): _torchvision_fashion_mnist,
    ("torchvision", "imagenet"): _torchvision_imagenet,
    ("npz", "fashion-mnist"): _npz("fashion-mnist"),
    ("npz", "cifar10"): _npz("cifar10"),
}
