"""What a data module tells the pipeline about its task's data: one
``DataKind`` per module (its ``KIND``), named by a task file's
``data.module``. A new task is a task file plus such a module; nothing else
names the task.

    KIND = DataKind(
        name="idx",                    # shown in messages
        items="image",                 # what one inference item is (dawnpipe.infer.items):
                                       # "image" (a stored image -> class ids) or "question"
        fetch=fetch_listed_files,      # (spec_data, dest, cache, source) -> record of the verified files
        prepare=prepare_idx,           # (task, raw, out[, workers]) -> manifest fields
        parallel_prepare=False,        # prepare takes workers=N (decoding processes)
    )

The kind of items decides the rest: which trainer trains an entry of the
task in each framework (dawnpipe.train.cli), which inference backends answer
its items, how answers are scored. A prepared image task uses the npy-uint8
layout (dawnpipe.data.arrays) that the image trainers and backends read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ITEM_KINDS = ("image", "question")


@dataclass(frozen=True)
class DataKind:
    name: str
    items: str
    fetch: Callable[[dict[str, Any], Path, Path, str | None], dict[str, Any]]
    prepare: Callable[..., dict[str, Any]]
    parallel_prepare: bool = False
