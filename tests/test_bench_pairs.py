"""bench/pairs.py: the paired ratio's interval, and a goal decided by it."""

import argparse
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from pairs import Pairs, run_pairs


def pairs_with_ratios(ratios: list[float]) -> Pairs:
    return Pairs.of([10.0] * len(ratios), [10.0 * r for r in ratios], precision=0.015)


@pytest.mark.parametrize(
    "ratios, verdict",
    [
        ([0.99, 1.0, 1.01, 1.02, 1.005, 0.995, 1.0, 1.01], "met"),  # the whole interval at or below 1.03
        ([1.06, 1.07, 1.08, 1.05, 1.09, 1.065, 1.075, 1.07], "not met"),  # the whole interval above it
        # the estimate below the goal, the interval across it: more pairs would tell
        ([0.974, 1.081, 1.01, 1.012, 0.99, 1.02, 1.05, 1.0], "undecided"),
        ([1.0, 1.01], "undecided"),  # two pairs: no interval
    ],
)
def test_a_goal_is_met_only_when_the_whole_interval_is_within_it(ratios, verdict):
    pairs = pairs_with_ratios(ratios)
    assert pairs.goal_verdict(1.03) == verdict
    if verdict == "undecided" and pairs.interval.exists:
        assert pairs.interval.estimate <= 1.03 < pairs.interval.high


def test_the_side_that_runs_first_alternates_and_each_ratio_stays_second_over_first():
    """Whatever running first in a pair does to a run falls on both sides in
    turn; the ratio is still the second side's time over the first's."""
    ran: list[tuple[str, int]] = []

    def side(name: str, seconds: float):
        def run(i: int) -> tuple[float, str]:
            ran.append((name, i))
            return seconds, ""

        return run

    args = argparse.Namespace(max_repeats=4, min_repeats=4, precision=0.015)
    pairs = run_pairs([("bare", side("bare", 10.0)), ("stage", side("stage", 10.5))], args)
    assert ran == [("bare", 0), ("stage", 0), ("stage", 1), ("bare", 1), ("bare", 2), ("stage", 2), ("stage", 3), ("bare", 3)]
    assert pairs.first == [10.0] * 4 and pairs.second == [10.5] * 4 and pairs.ratios == [1.05] * 4
