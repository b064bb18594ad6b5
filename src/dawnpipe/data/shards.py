"""Decode images in parallel into fixed-size, memory-mappable shards.

Each image is resized so its shorter side is ``size / crop_ratio`` and the
central ``size`` x ``size`` square is kept (crop_ratio 1 keeps the whole
shorter side: training shards, from which random crops are taken later;
0.875 is the usual evaluation crop). Items are put in a seeded random order
first, so a prefix (``--train-limit``, ``--test-limit``) is a random subset
across classes, not the first classes.

One worker process decodes and writes one shard (``<split>_NNNNN.npy``, uint8,
n x size x size x 3) at a time; the parent only collects digests and channel
sums, and shows progress. ``<split>_labels.npy`` and ``<split>_items.tsv``
(which source image is which item) are written beside them.
"""

from __future__ import annotations

import io
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dawnpipe.data.arrays import save_array
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_text
from dawnpipe.progress import progress


class ImageRef(NamedTuple):
    path: str  # a file, or the archive holding the image
    offset: int | None  # byte offset inside ``path`` (archives), None for a whole file
    size: int | None  # bytes at ``offset``
    name: str  # how messages and <split>_items.tsv name it


def read_bytes(ref: ImageRef) -> bytes:
    if ref.offset is None:
        with open(ref.path, "rb") as f:
            return f.read()
    fd = os.open(ref.path, os.O_RDONLY)
    try:
        data = os.pread(fd, ref.size, ref.offset)
    finally:
        os.close(fd)
    if len(data) != ref.size:
        raise DawnpipeError(f"{ref.name}: {len(data)} of {ref.size} bytes readable (truncated archive?)")
    return data


def decode_resized(data: bytes, size: int, crop_ratio: float, name: str) -> np.ndarray:
    """size x size x 3 uint8: shorter side to size / crop_ratio, then the centre square."""
    from PIL import Image, UnidentifiedImageError

    short = max(size, round(size / crop_ratio))
    try:
        img = Image.open(io.BytesIO(data))
        img.draft("RGB", (short, short))  # JPEG: decode at 1/2, 1/4, 1/8 scale when still >= short (much faster)
        img = img.convert("RGB")  # greyscale and CMYK images occur in ILSVRC2012
        w, h = img.size
        scale = short / min(w, h)
        nw, nh = max(short, round(w * scale)), max(short, round(h * scale))
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)
        left, top = (nw - size) // 2, (nh - size) // 2
        return np.asarray(img.crop((left, top, left + size, top + size)), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DawnpipeError(f"{name}: not a decodable image ({e})") from None


def _write_shard(path: Path, refs: list[ImageRef], size: int, crop_ratio: float) -> dict:

    array = np.empty((len(refs), size, size, 3), dtype=np.uint8)
    for i, ref in enumerate(refs):
        array[i] = decode_resized(read_bytes(ref), size, crop_ratio, ref.name)
    pixels = array.reshape(-1, 3).astype(np.float64) / 255.0
    entry = save_array(path, array)
    return {"file": entry["file"], "items": len(refs), "sha256": entry["sha256"], "sum": pixels.sum(0).tolist(), "sumsq": np.square(pixels).sum(0).tolist()}


def workers_available() -> int:
    """CPUs this process may use (respects taskset, cgroups and Slurm's binding)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def write_image_shards(
    out: Path,
    split: str,
    items: list[tuple[ImageRef, int]],
    classes: list[str],
    *,
    size: int,
    crop_ratio: float,
    shard_items: int,
    order_seed: int,
    workers: int | None = None,
) -> dict:
    """Decode ``items`` ((ref, class id)) into shards under ``out``; the split's manifest entry.
    ``workers``: decoding processes (default: every CPU this process may use); the
    shards are the same bytes whatever the number."""

    order = np.random.default_rng(order_seed).permutation(len(items))
    items = [items[i] for i in order]
    refs = [ref for ref, _ in items]
    labels = np.array([label for _, label in items], dtype=np.uint8 if len(classes) <= 256 else np.int16)
    chunks = [(out / f"{split}_{k:05d}.npy", refs[start : start + shard_items]) for k, start in enumerate(range(0, len(refs), shard_items))]
    workers = max(1, min(workers or workers_available(), len(chunks)))
    print(f"prepare: {split}: decoding {len(refs)} images into {len(chunks)} shards of {size}x{size} with {workers} processes")
    results: list[dict | None] = [None] * len(chunks)
    with progress(total=len(refs), desc=f"prepare {split}", unit="img") as bar:
        if workers <= 1:
            for k, (path, chunk) in enumerate(chunks):
                results[k] = _write_shard(path, chunk, size, crop_ratio)
                bar.update(len(chunk))
        else:
            # forkserver: workers start clean instead of inheriting this process's threads (progress bar)
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
                futures = {pool.submit(_write_shard, path, chunk, size, crop_ratio): k for k, (path, chunk) in enumerate(chunks)}
                try:
                    for future in as_completed(futures):
                        results[futures[future]] = future.result()  # re-raises a worker's DawnpipeError here
                        bar.update(results[futures[future]]["items"])
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # do not decode the rest of a set that has already failed
                    raise
    n_pixels = len(refs) * size * size
    sums = np.sum([r["sum"] for r in results], axis=0)
    sumsqs = np.sum([r["sumsq"] for r in results], axis=0)
    mean = sums / n_pixels
    std = np.sqrt(np.maximum(sumsqs / n_pixels - mean**2, 0.0))
    write_text(
        out / f"{split}_items.tsv",
        "item\tlabel\tclass\tsource\n" + "".join(f"{i}\t{label}\t{classes[label]}\t{ref.name}\n" for i, (ref, label) in enumerate(items)),
    )
    counts = np.bincount(labels, minlength=len(classes))
    return {
        "items": len(refs),
        "images": {"shards": [{k: r[k] for k in ("file", "items", "sha256")} for r in results], "shape": [len(refs), size, size, 3], "dtype": "uint8"},
        "labels": save_array(out / f"{split}_labels.npy", labels),
        "class_counts": {c: int(n) for c, n in zip(classes, counts)},
        "mean": mean.tolist(),
        "std": std.tolist(),  # per channel, of pixel / 255
        "size": size,
        "crop_ratio": crop_ratio,
        "order_seed": order_seed,
        "items_file": f"{split}_items.tsv",
    }
