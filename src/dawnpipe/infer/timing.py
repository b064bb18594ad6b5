"""The timing loop of the inference objective, framework-agnostic.

Every item of the inference set is answered on its own (batch of one), in
order, and timed on its own: the clock starts when the stored item is handed
to ``predict`` and stops when the answer is back on the host. The mean of
these times (= their total / items) is the DAWNBench latency.

- Warm-up: the first ``warmup`` items are answered once before timing (lazy
  initialisation, JIT compilation, caches). Their times are kept and reported,
  never counted.
- Devices that queue work (CUDA): ``sync`` is called before the clock starts
  (nothing earlier leaks into the item) and before it stops (nothing of the
  item leaks out). On the CPU, and where the answer is copied to the host,
  ``sync`` is None.
- The garbage collector is off while timing (as in ``timeit``), so that a
  collection of garbage made between items does not land in one item's time.
- Answers are kept and scored after timing: scoring is not timed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dawnpipe.progress import progress


@dataclass(frozen=True)
class ItemTimes:
    seconds: np.ndarray  # one per timed item, in item order
    answers: list[Any]  # what predict returned, per timed item
    warmup_seconds: np.ndarray  # one per warm-up call (reported, not counted)


def time_items(
    predict: Callable[[Any], Any],
    items: Sequence[Any],
    *,
    warmup: int = 0,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    desc: str = "infer",
) -> ItemTimes:
    """Answer ``items`` one at a time with ``predict`` and time each answer.

    ``clock`` is a monotonic clock in seconds (a parameter so that tests can
    give the loop a cost profile that is known exactly)."""
    n = len(items)
    if n == 0:
        raise ValueError("no items to answer")
    warm = min(max(warmup, 0), n)
    wait = sync or (lambda: None)
    warmup_seconds = np.empty(warm)
    seconds = np.empty(n)
    answers: list[Any] = [None] * n
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(warm):
            item = items[i]
            wait()
            start = clock()
            predict(item)
            wait()
            warmup_seconds[i] = clock() - start
        for i in progress(range(n), desc=desc, unit="item"):
            item = items[i]
            wait()
            start = clock()
            answer = predict(item)
            wait()
            seconds[i] = clock() - start
            answers[i] = answer
    finally:
        if gc_was_enabled:
            gc.enable()
    return ItemTimes(seconds=seconds, answers=answers, warmup_seconds=warmup_seconds)
