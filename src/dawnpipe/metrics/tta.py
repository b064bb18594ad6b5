"""Time-to-accuracy: the DAWNBench training objective
(docs/rules.md#1-training-time).

The time to accuracy of a run is the cumulative training time at the end of
the first logged epoch whose metric is at or above the threshold. These are
pure functions over the per-epoch log, shared by the extract stage (our runs)
and the auditor (other people's submissions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeToAccuracy:
    reached: bool
    row: int | None  # 0-based index of the first row at/above the threshold
    epoch: float | None
    hours: float | None
    metric: float | None  # metric value in that row
    best_metric: float | None  # best value anywhere in the log (for DNC messages)


def time_to_accuracy(epochs: Sequence[float], hours: Sequence[float], metric: Sequence[float], threshold: float) -> TimeToAccuracy:
    if not (len(epochs) == len(hours) == len(metric)):
        raise ValueError("epochs, hours and metric must have the same length")
    finite = [m for m in metric if m is not None and math.isfinite(m)]
    best = max(finite) if finite else None
    for i, m in enumerate(metric):
        if m is not None and math.isfinite(m) and m >= threshold:
            return TimeToAccuracy(True, i, float(epochs[i]), float(hours[i]), float(m), best)
    return TimeToAccuracy(False, None, None, None, None, best)


def cost_usd(hours: float | None, usd_per_hour: float | None) -> float | None:
    """Training cost = training hours x on-demand price; None where either is unknown."""
    if hours is None or usd_per_hour is None:
        return None
    return hours * usd_per_hour


def inference_cost_per_10k(latency_ms: float | None, usd_per_hour: float | None) -> float | None:
    """USD for 10,000 items answered one at a time: latency in hours x price x 10,000."""
    if latency_ms is None or usd_per_hour is None:
        return None
    return latency_ms / 3_600_000.0 * usd_per_hour * 10_000
