"""prepare: decode the verified raw files once into memory-mappable arrays.

    dawnpipe prepare fashion-mnist --raw data/raw/fashion-mnist --out data/prepared/fashion-mnist
    dawnpipe prepare imagenet --raw data/raw/imagenet --out data/prepared/imagenet --workers 8

Writes ``<split>_images.npy`` (uint8, N x H x W or N x H x W x C) and
``<split>_labels.npy`` (uint8 class ids) for every split, plus
``manifest.json`` with shapes, class counts and the sha256 of every array's
content, so a later stage can prove it trains on what was verified. A task's
new test set, where fetch got it (``--new-test``), becomes split ``new_test``.
"""

from __future__ import annotations

from pathlib import Path

from dawnpipe.argtypes import positive_int
from dawnpipe.data.cifar10_1 import RECORD, SPLIT, prepare_new_test
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_json
from dawnpipe.tasks import get_task


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
    kind = task.data_kind
    if kind.parallel_prepare:
        manifest = kind.prepare(task, raw, out, workers=workers)
    else:
        if workers is not None and workers > 1:
            print(f"prepare: note: {task_name} ({kind.name}) is prepared in one process; --workers {workers} does not apply")
        manifest = kind.prepare(task, raw, out)
    fetch_record = read_json(fetched)
    if RECORD in fetch_record:  # fetched with --new-test: its own split beside the task's
        side = tuple(manifest["splits"]["train"]["images"]["shape"][1:])
        extra = prepare_new_test(task, raw, out, fetch_record[RECORD], side)
        manifest = {**manifest, "splits": {**manifest["splits"], SPLIT: extra["split"]}, RECORD: extra["about"]}
    write_json(out / "manifest.json", {"task": task_name, **manifest})
    return out


def configure(p) -> None:
    p.add_argument("task", help="task name, e.g. fashion-mnist")
    p.add_argument("--raw", required=True, type=Path, help="directory written by 'dawnpipe fetch'")
    p.add_argument("--out", required=True, type=Path, help="directory for the arrays and manifest.json")
    p.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="processes decoding images in parallel (ImageNet; default: every CPU this process may use; "
        "the output is the same whatever N); other tasks are prepared in one process",
    )


def run(args) -> int:
    prepare(args.task, args.raw, args.out, workers=args.workers)
    return 0
