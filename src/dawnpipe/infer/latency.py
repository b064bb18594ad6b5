"""Latency statistics over per-item times (pure; no framework)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """Mean (= total time / items, the ranking figure), p50, p90, p99 and max, in ms."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if ms.size == 0:
        raise ValueError("no latencies")
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "latency_mean_ms": float(ms.sum() / ms.size),
        "latency_p50_ms": float(p50),
        "latency_p90_ms": float(p90),
        "latency_p99_ms": float(p99),
        "latency_max_ms": float(ms.max()),
    }
