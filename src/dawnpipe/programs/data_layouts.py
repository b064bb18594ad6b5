"""Which data layouts a program can be given for which task, and why the
others cannot be given (program contract 2, placeholders ``{torchvision}``
and ``{npz}``; docs/programs.md). Tables only, no data read: an entry's
placeholders are checked against them when the configuration is read; the
layouts themselves are written by ``dawnpipe.data.layouts``.
"""

from __future__ import annotations

KINDS = ("torchvision", "npz")
AVAILABLE = frozenset({("torchvision", "fashion-mnist"), ("torchvision", "imagenet"), ("npz", "fashion-mnist"), ("npz", "cifar10")})
REFUSED = {
    ("torchvision", "cifar10"): (
        "torchvision's CIFAR10 checks the MD5 of each of its six files against the official release before reading any, "
        "also with download=False, so files holding only the items a program is given (the test split always lacks the items "
        "dawnpipe keeps back) are refused with 'Dataset not found or corrupted'; give the program {npz} (Keras' layout) or {data}"
    ),
    ("npz", "imagenet"): (
        "keras.datasets has no ImageNet and 1.28 million images are not one in-memory array; "
        "give the program {torchvision} (train/ and val/ class folders) or {data}"
    ),
}


def layout_refusal(kind: str, task: str) -> str | None:
    """Why layout ``kind`` cannot be given for ``task`` (one line), or None
    when it can: for checking an entry's placeholders before anything runs."""
    if kind not in KINDS:
        return f"no data layout {kind!r} (known: {', '.join(KINDS)})"
    if (kind, task) in REFUSED:
        return f"the {kind} layout of {task} cannot be given: {REFUSED[(kind, task)]}"
    if (kind, task) not in AVAILABLE:
        tasks = sorted(t for k, t in AVAILABLE if k == kind)
        return f"no {kind} layout for task {task} (it exists for {', '.join(tasks)})"
    return None
