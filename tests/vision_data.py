"""Small files in the exact formats of the real CIFAR-10 and ILSVRC2012
downloads, written here independently of dawnpipe's readers (so a layout bug
in a reader is not mirrored by the writer), and a local HTTP server to fetch
them from.

Images are learnable on purpose: each class has its own colour and stripe
direction, plus noise, so a model can learn something in an epoch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import struct
import tarfile
from pathlib import Path

import numpy as np

CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
# seven real ILSVRC2012 class ids: more than five, so top-5 accuracy can miss
# (with three classes every top-5 answer holds the label and the metric cannot fail)
WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041"]


def class_images(labels: np.ndarray, h: int, w: int, rng: np.random.Generator, n_classes: int) -> np.ndarray:
    """uint8 N x h x w x 3: class colour + stripes whose direction depends on the class + noise."""
    hue = np.linspace(0, 1, n_classes, endpoint=False)
    colours = np.stack([np.abs(np.sin(np.pi * (hue + k / 3))) for k in range(3)], axis=1) * 200 + 20
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.empty((len(labels), h, w, 3), dtype=np.uint8)
    for i, c in enumerate(labels):
        stripes = np.sin((xx if c % 2 else yy) * (0.5 + 0.2 * (c % 3))) * 30
        img = colours[c][None, None, :] + stripes[..., None] + rng.normal(0, 12, (h, w, 3))
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


# ---------------------------------------------------------------- CIFAR-10


def py2_pickle(obj) -> bytes:
    """``obj`` pickled as Python 2's cPickle wrote the CIFAR-10 batches
    (protocol 2): every str and bytes a Python 2 ``str`` (SHORT_BINSTRING /
    BINSTRING, read back as bytes under ``encoding="bytes"``), and numpy
    arrays as numpy 1.x reduced them (``numpy.core.multiarray._reconstruct``,
    the pixels one BINSTRING, the dtype ``numpy.dtype('u1', 0, 1)`` with its
    state). Python 3's pickler would instead write bytes through
    ``_codecs.encode`` and arrays under ``numpy._core``, which the real files
    never contain, so it is written opcode by opcode here. Handles what a batch
    holds: dicts, lists, tuples, str/bytes, ints, bools, None, uint8 arrays."""
    out = bytearray(b"\x80\x02")

    def emit(o) -> None:
        if isinstance(o, dict):
            out.extend(b"}")
            if o:
                out.extend(b"(")
                for k, v in o.items():
                    emit(k)
                    emit(v)
                out.extend(b"u")
        elif isinstance(o, list):
            out.extend(b"]")
            if o:
                out.extend(b"(")
                for v in o:
                    emit(v)
                out.extend(b"e")
        elif isinstance(o, tuple):
            out.extend(b"(")
            for v in o:
                emit(v)
            out.extend(b"t")
        elif o is True or o is False:
            out.extend(b"\x88" if o else b"\x89")
        elif o is None:
            out.extend(b"N")
        elif isinstance(o, (int, np.integer)):
            o = int(o)
            out.extend(b"K" + bytes([o]) if 0 <= o < 256 else b"J" + struct.pack("<i", o))
        elif isinstance(o, (bytes, str)):
            b = o.encode("latin-1") if isinstance(o, str) else o
            out.extend((b"U" + bytes([len(b)]) if len(b) < 256 else b"T" + struct.pack("<I", len(b))) + b)
        elif isinstance(o, np.ndarray):
            assert o.dtype == np.uint8, o.dtype
            out.extend(b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n")
            emit((0,))
            emit(b"b")
            out.extend(b"tR")
            out.extend(b"(K\x01")  # state: (version 1, shape, dtype, fortran order, raw bytes)
            emit(tuple(o.shape))
            out.extend(b"cnumpy\ndtype\n")
            emit(("u1", 0, 1))
            out.extend(b"R")
            emit((3, "|", None, None, None, -1, -1, 0))
            out.extend(b"b")
            emit(False)
            emit(np.ascontiguousarray(o).tobytes())
            out.extend(b"tb")
        else:
            raise TypeError(f"py2_pickle: {type(o).__name__}")

    emit(obj)
    out.extend(b".")
    return bytes(out)


def write_cifar10_tarball(path: Path, n_train: int = 400, n_test: int = 100, seed: int = 0) -> dict:
    """cifar-10-python.tar.gz with the official members and pickle layout
    (Python 2 cPickle, protocol 2, byte-string keys such as b"data" and
    b"labels", data = N x 3072 of R, G, B planes; see ``py2_pickle``).
    Returns the images and labels per split, for checking what prepare made."""
    rng = np.random.default_rng(seed)
    splits = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, 10, n)
        splits[split] = (class_images(labels, 32, 32, rng, 10), labels)
    batches = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    with tarfile.open(path, "w:gz") as tar:

        def add(name: str, obj) -> None:
            blob = py2_pickle(obj)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))

        add("batches.meta", {b"num_cases_per_batch": 10000, b"label_names": [c.encode() for c in CIFAR_CLASSES], b"num_vis": 3072})
        for split, (images, labels) in splits.items():
            parts = np.array_split(np.arange(len(labels)), len(batches[split]))
            for name, idx in zip(batches[split], parts):
                planes = images[idx].transpose(0, 3, 1, 2).reshape(len(idx), 3072)  # R plane, G plane, B plane
                add(
                    name,
                    {
                        b"batch_label": name.encode(),
                        b"labels": [int(v) for v in labels[idx]],
                        b"data": planes,
                        b"filenames": [f"img_{name}_{j}.png".encode() for j in range(len(idx))],
                    },
                )
        readme = b"<html>test copy</html>"
        info = tarfile.TarInfo("cifar-10-batches-py/readme.html")
        info.size = len(readme)
        tar.addfile(info, io.BytesIO(readme))
    return splits


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- ImageNet


def _jpeg(img: np.ndarray, mode: str = "RGB", fmt: str = "JPEG") -> bytes:
    from PIL import Image

    pil = Image.fromarray(img).convert(mode)
    buf = io.BytesIO()
    pil.save(buf, format=fmt, quality=90)
    return buf.getvalue()


def imagenet_files(per_class: int = 12, n_val: int = 12, seed: int = 0) -> tuple[dict, dict, dict]:
    """({wnid: {name: bytes}}, {val name: bytes}, {val name: wnid}) of generated
    images of varied sizes; a few are greyscale, CMYK or PNG, as in ILSVRC2012."""
    rng = np.random.default_rng(seed)
    train: dict[str, dict[str, bytes]] = {}
    odd = iter([("L", "JPEG"), ("CMYK", "JPEG"), ("RGB", "PNG")])
    for c, wnid in enumerate(WNIDS):
        train[wnid] = {}
        for k in range(per_class):
            h, w = rng.integers(40, 90, 2)
            mode, fmt = next(odd, ("RGB", "JPEG"))
            train[wnid][f"{wnid}_{k + 1}.JPEG"] = _jpeg(class_images(np.array([c]), h, w, rng, len(WNIDS))[0], mode, fmt)
    val, labels = {}, {}
    for i, c in enumerate(rng.integers(0, len(WNIDS), n_val)):
        name = f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        h, w = rng.integers(40, 90, 2)
        val[name] = _jpeg(class_images(np.array([c]), h, w, rng, len(WNIDS))[0])
        labels[name] = WNIDS[c]
    return train, val, labels


def write_imagenet_folders(root: Path, train: dict, val: dict, labels: dict) -> Path:
    """train/<wnid>/<image>, val/<image> (flat) and val_labels.txt ("<image> <wnid>")."""
    for wnid, files in train.items():
        (root / "train" / wnid).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (root / "train" / wnid / name).write_bytes(data)
    (root / "val").mkdir(parents=True, exist_ok=True)
    for name, data in val.items():
        (root / "val" / name).write_bytes(data)
    (root / "val_labels.txt").write_text("".join(f"{n} {w}\n" for n, w in sorted(labels.items())))
    return root


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_imagenet_archives(root: Path, train: dict, val: dict, labels: dict) -> Path:
    """ILSVRC2012_img_train.tar (one uncompressed tar per class inside),
    ILSVRC2012_img_val.tar (flat) and val_labels.txt, as image-net.org ships them."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ILSVRC2012_img_train.tar").write_bytes(_tar_bytes({f"{w}.tar": _tar_bytes(files) for w, files in train.items()}))
    (root / "ILSVRC2012_img_val.tar").write_bytes(_tar_bytes(val))
    (root / "val_labels.txt").write_text("".join(f"{n} {w}\n" for n, w in sorted(labels.items())))
    return root


# ---------------------------------------------------------------- HTTP


@contextlib.contextmanager
def serve(directory: Path):
    """The files of ``directory`` served on 127.0.0.1 (tests/local_http.py); yields the base URL."""
    from local_http import serve as serve_files

    with serve_files({p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}) as (url, _log):
        yield url
