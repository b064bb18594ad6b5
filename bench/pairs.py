"""Paired timing of two sides, for the overhead benches (bench/overhead.py,
bench/program_overhead.py).

Runs go in pairs in fresh processes; each pair gives a ratio, second side /
first side, and the overhead is the median of the pairs' ratios with its
distribution-free interval (dawnpipe.verdict.median_interval: 90% or more,
from 5 pairs on). Pairing keeps a slow drift of the machine (another tenant, a
change of clock speed) out of the ratio, where two separate series of runs
would take it for overhead. The order within a pair alternates (pair 1 runs
the first side first, pair 2 the second side first, ...), so whatever running
first or second in a pair does to a run (the caches and memory the previous
run left, a clock speed that follows the load) falls on both sides alike
instead of always on the same one. Pairs are added until the interval's
half-width is within ``precision`` of the ratio (after at least ``min_repeats``
pairs), or ``max_repeats`` pairs have run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dawnpipe.verdict import Interval, median_interval

# One side of a pair: given the pair's index, it runs once and returns its
# seconds and what to print after them.
Side = Callable[[int], tuple[float, str]]


@dataclass(frozen=True)
class Pairs:
    first: list[float]
    second: list[float]
    interval: Interval
    precision: float

    @classmethod
    def of(cls, first: list[float], second: list[float], precision: float) -> Pairs:
        return cls(first, second, median_interval([s / f for f, s in zip(first, second, strict=True)]), precision)

    @property
    def ratios(self) -> list[float]:
        return [s / f for f, s in zip(self.first, self.second, strict=True)]

    def fields(self) -> dict[str, Any]:
        """The record's fields of the pairs (besides each side's times)."""
        i = self.interval
        return {
            "repeats": len(self.first),
            "pair_ratios": self.ratios,
            "overhead": i.estimate,
            "interval": [i.low, i.high],
            "confidence": float(i.confidence) if i.confidence is not None else None,
            "precision_goal": self.precision,
        }

    def goal_verdict(self, goal: float) -> str:
        """Whether the overhead is at most ``goal``, decided by the interval,
        not the estimate alone: "met" when the whole interval is at or below
        it, "not met" when the whole interval is above it, otherwise (or
        without an interval) "undecided": more pairs, or a quieter machine,
        would tell."""
        i = self.interval
        if not i.exists:
            return "undecided"
        if i.high <= goal:
            return "met"
        return "not met" if i.low > goal else "undecided"

    def shown(self) -> str:
        """The ratio and its interval, as the benches' last line prints them."""
        i = self.interval
        return f"{i.estimate:.3f}x" + (f" [{i.low:.3f}, {i.high:.3f}]" if i.exists else " (too few pairs for an interval)")


def add_pair_flags(p: argparse.ArgumentParser, max_repeats: int = 20) -> None:
    p.add_argument("--min-repeats", type=int, default=5, help="pairs before the interval is looked at (default 5: the fewest with a 90%% interval)")
    p.add_argument("--max-repeats", type=int, default=max_repeats, help=f"pairs at most (default {max_repeats})")
    p.add_argument("--precision", type=float, default=0.015, help="the interval's half-width, as a share of the ratio, to stop at (default 0.015)")


def check_pair_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.min_repeats < 1 or args.max_repeats < args.min_repeats:
        p.error(f"--min-repeats ({args.min_repeats}) must be at least 1 and at most --max-repeats ({args.max_repeats})")
    if not 0 < args.precision < 1:
        p.error(f"--precision must be a share between 0 and 1, not {args.precision}")


def run_pairs(sides: Sequence[tuple[str, Side]], args: argparse.Namespace) -> Pairs:
    """Pairs of runs of the two ``sides`` ((label, side), first then second) until the interval is as precise as ``args`` asks."""
    if len(sides) != 2:
        raise ValueError("a pair has two sides")
    times: tuple[list[float], list[float]] = ([], [])
    pairs = Pairs.of([], [], args.precision)
    width = max(len(label) for label, _ in sides)
    for i in range(args.max_repeats):
        order = list(zip(sides, times, strict=True))
        for (label, side), kept in order if i % 2 == 0 else order[::-1]:
            seconds, note = side(i)
            kept.append(seconds)
            print(f"pair {i + 1}  {label:<{width}}  {seconds:8.2f} s {note}".rstrip(), flush=True)
        pairs = Pairs.of(list(times[0]), list(times[1]), args.precision)
        interval = pairs.interval
        if interval.exists:
            half = (interval.high - interval.low) / 2 / interval.estimate
            print(f"after {i + 1} pairs: ratio {interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}], half-width {half:.1%}", flush=True)
            if i + 1 >= args.min_repeats and half <= args.precision:
                break
    return pairs
