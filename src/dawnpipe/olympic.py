"""MLPerf's olympic mean, as MLCommons' result summarizer computes it.

A result is the mean of its runs after dropping the fastest and the slowest
(four at each end for unet3d, one otherwise); runs that failed count as the
slowest, so they are the first dropped at the slow end; too many failures
leave no score. The package keeps this inside its summarizer, so it is
written once here (for MLPerf results and for our own seeds' stability) and
tests/test_mlperf.py checks it against the summarizer on real results.
"""

from __future__ import annotations

MIN_RUNS = 5  # the fewest runs any MLPerf Training benchmark asks for at one drop per end (resnet, ssd)


def max_dropped(benchmark: str = "") -> int:
    """Runs dropped at each end (the summarizer's rule)."""
    return 4 if benchmark == "unet3d" else 1


def olympic_mean(values: list[float], failed: int, benchmark: str = "") -> float | None:
    """The olympic mean of the successful runs' ``values`` with ``failed``
    runs counted as the slowest; None when more failed than may be dropped
    or nothing is left."""
    drop = max_dropped(benchmark)
    if failed > drop:
        return None
    values = sorted(values)
    countable = values[drop : len(values) - (drop - failed)]
    if not countable:
        return None
    return sum(countable) * 1.0 / len(countable)
