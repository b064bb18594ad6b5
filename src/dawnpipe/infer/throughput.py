"""Inference throughput beside latency: items per second when a backend
answers batches of 1, 8, 64 and 256 items (the latency-throughput trade-off
of the DAWNBench analysis). One-item latency stays the ranked objective
(``dawnpipe.infer.timing``); throughput is described, never ranked.

For each batch size ``b``, the backend's ``predict_batch`` answers
consecutive batches of ``b`` items of the inference set (wrapping around to
its start when the set is shorter than the work), after one untimed warm-up
batch (compilation or allocation for that shape). The clock runs around the
whole sequence of batches, from the first stored batch handed over to the
last answers back on the host (``sync`` before starting and stopping, as for
latency); it stops after the batch that passes ``min_seconds`` and at least
``min_batches`` batches. items/s = items answered / elapsed seconds. The
batch-of-``b`` answers of the first ``b`` items are compared with the
backend's one-at-a-time answers of the same items: a backend whose batches
answer differently is named, not hidden (``answers_differing``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dawnpipe.progress import progress

BATCH_SIZES = (1, 8, 64, 256)
MIN_SECONDS = 1.0  # per batch size, timed
MIN_BATCHES = 3


def batch_of(items: Sequence[Any], start: int, size: int) -> Any:
    """Items start .. start+size-1 of ``items``, wrapping around; an array
    stays an array (one contiguous batch), items that are arrays (a sharded
    image set read item by item) are stacked into one, anything else becomes
    a list."""
    n = len(items)
    idx = [(start + i) % n for i in range(size)]
    if isinstance(items, np.ndarray):
        if idx == list(range(idx[0], idx[0] + size)):
            return np.ascontiguousarray(items[idx[0] : idx[0] + size])
        return np.ascontiguousarray(items[idx])
    picked = [items[i] for i in idx]
    if all(isinstance(item, np.ndarray) for item in picked):
        return np.stack(picked)
    return picked


def same_answer(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        return list(np.asarray(a).ravel().tolist()) == list(np.asarray(b).ravel().tolist())
    return a == b


def measure_throughput(
    predict_batch: Callable[[Any], Sequence[Any]],
    items: Sequence[Any],
    *,
    single_answers: Sequence[Any] | None = None,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    min_seconds: float = MIN_SECONDS,
    min_batches: int = MIN_BATCHES,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    desc: str = "throughput",
) -> dict[str, Any]:
    """Items per second at each batch size, and how it was measured."""
    if len(items) == 0:
        raise ValueError("no items to answer")
    wait = sync or (lambda: None)
    per_size: dict[str, float] = {}
    detail: dict[str, dict[str, Any]] = {}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for size in progress(list(batch_sizes), desc=desc, unit="batch size"):
            first = batch_of(items, 0, size)
            answers = list(predict_batch(first))  # warm-up, untimed; also the answers compared below
            if len(answers) != size:
                raise ValueError(f"a batch of {size} items got {len(answers)} answers")
            differing = None
            if single_answers is not None:
                k = min(size, len(items), len(single_answers))
                differing = sum(not same_answer(answers[i], single_answers[i]) for i in range(k))
            batches, start_item = 0, 0
            wait()
            start = clock()
            while True:
                predict_batch(batch_of(items, start_item, size))
                batches += 1
                start_item = (start_item + size) % len(items)
                if batches >= min_batches:
                    wait()
                    elapsed = clock() - start
                    if elapsed >= min_seconds:
                        break
            per_size[str(size)] = batches * size / elapsed if elapsed > 0 else float("inf")
            detail[str(size)] = {"batches": batches, "items": batches * size, "seconds": elapsed, "answers_differing": differing}
    finally:
        if gc_was_enabled:
            gc.enable()
    return {"throughput_items_per_second": per_size, "throughput": detail}
