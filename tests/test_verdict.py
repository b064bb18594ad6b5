"""The rule of every verdict over seeds (dawnpipe.verdict): the exact null
distribution of the Mann-Whitney statistic against hand-counted cases and a
brute-force enumeration, the order statistics of both intervals, a seed that
never reached counted as infinitely slow, the categorical outcome, the three
verdicts, properties of the interval (it holds the estimate, it shrinks as
the seeds agree), and the docs' table of what a number of seeds can show."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from dawnpipe import verdict as v

INF = math.inf


def brute_u_counts(m: int, n: int) -> list[int]:
    """U over every choice of which of the m+n ranks are the first sample's."""
    counts = [0] * (m * n + 1)
    for first in itertools.combinations(range(m + n), m):
        second = [r for r in range(m + n) if r not in first]
        counts[sum(1 for x in first for y in second if x > y)] += 1
    return counts


@pytest.mark.parametrize(("m", "n"), [(1, 1), (1, 4), (2, 2), (2, 5), (3, 3), (3, 4), (4, 4), (5, 3), (5, 5), (6, 2)])
def test_the_null_distribution_of_u_is_the_count_of_orderings(m, n):
    assert list(v.u_counts(m, n)) == brute_u_counts(m, n)
    assert sum(v.u_counts(m, n)) == math.comb(m + n, m)


def test_hand_counted_small_cases():
    # 3 against 3: one ordering of 20 has U = 0
    assert v.u_cdf(3, 3, 0) == Fraction(1, 20)
    assert v.two_sample_k(3, 3) == 1 and v.two_sample_confidence(3, 3) == Fraction(9, 10)
    # 4 against 4: U = 0 once and U = 1 once of 70
    assert v.u_cdf(4, 4, 1) == Fraction(2, 70) and v.u_cdf(4, 4, 2) == Fraction(4, 70)
    assert v.two_sample_k(4, 4) == 2  # 4/70 > 1/20, 2/70 <= 1/20
    # 2 against 2 (1/6) and 2 against 3 (1/10): no interval; 2 against 5: 1/21
    assert v.two_sample_k(2, 2) == 0 and v.two_sample_k(2, 3) == 0 and v.two_sample_k(2, 5) == 1
    # one sample: 4 values (1/16 > 1/20) none, 5 values (1/32) the extremes
    assert v.one_sample_k(4) == 0 and v.one_sample_k(5) == 1 and v.one_sample_confidence(5) == Fraction(15, 16)
    assert v.one_sample_k(8) == 2  # P(B <= 1) = 9/256 <= 1/20 < P(B <= 2) = 37/256
    assert v.fewest_seeds() == {"two_sample": 3, "one_sample": 5}


def test_the_interval_is_the_kth_pairwise_ratio_from_each_end():
    base = [10.0, 11.0, 12.0]  # C
    fast = [5.0, 5.5, 6.0]  # V
    iv = v.two_sample(fast, base)
    pairs = sorted(c / x for x in fast for c in base)
    assert (iv.low, iv.high) == (pairs[0], pairs[-1]) and iv.k == 1 and iv.confidence == Fraction(9, 10)
    assert iv.estimate == pairs[4]  # nine pairs: the fifth
    # 4 against 4: k = 2, the second from each end; an even count: the geometric mean of the middle two
    base4, fast4 = [10.0, 11.0, 12.0, 13.0], [5.0, 5.5, 6.0, 9.0]
    iv = v.two_sample(fast4, base4)
    pairs = sorted(c / x for x in fast4 for c in base4)
    assert (iv.low, iv.high) == (pairs[1], pairs[-2]) and iv.estimate == pytest.approx(math.sqrt(pairs[7] * pairs[8]))
    # a difference (accuracy): V - C
    iv = v.two_sample([91.0, 92.0, 93.0], [90.0, 90.5, 91.0], v.DIFFERENCE)
    assert (iv.low, iv.high, iv.estimate) == (0.0, 3.0, 1.5)


def test_a_seed_that_never_reached_is_infinitely_slow_not_missing():
    assert v.as_times([1.0, None]) == [1.0, INF]
    assert (v.ratio(INF, 2.0), v.ratio(2.0, INF), v.ratio(INF, INF)) == (INF, 0.0, 1.0)
    # V: one seed never reached; it is counted: its three pairs are 0
    iv = v.two_sample(v.as_times([5.0, 5.5, None]), [10.0, 11.0, 12.0])
    assert iv.low == 0.0 and iv.high == pytest.approx(12 / 5)
    assert v.decide(iv, "above", 1.0) == v.INCONCLUSIVE  # dropping the seed would have said "faster"
    assert v.decide(v.two_sample([5.0, 5.5, 6.0], [10.0, 11.0, 12.0]), "above", 1.0) == v.REPRODUCED


def test_never_against_reached_is_decided_whatever_the_seeds():
    one = v.two_sample([INF], [10.0])
    assert one.categorical and (one.low, one.high) == (0.0, 0.0)
    assert v.decide(one, "below", 1.0) == v.REPRODUCED and v.decide(one, "above", 1.0) == v.NOT_REPRODUCED
    other = v.two_sample([10.0, 12.0], [INF, INF])
    assert other.categorical and (other.low, other.high) == (INF, INF) and v.decide(other, "above", 1.5) == v.REPRODUCED
    # both never reached: a tie, never "faster"
    both = v.two_sample([INF], [INF])
    assert not both.exists and v.decide(both, "above", 1.0) == v.INCONCLUSIVE
    # a mixed side is not categorical: one seed against one has no interval
    assert not v.two_sample([INF, 3.0], [10.0]).exists


def test_the_three_verdicts_and_the_bounds():
    faster = v.two_sample([5.0, 5.5, 6.0], [10.0, 11.0, 12.0])  # [1.67, 2.4]
    assert v.decide(faster, *v.claimed_side(v.RATIO, "lower")) == v.REPRODUCED
    assert v.decide(faster, *v.claimed_side(v.RATIO, "higher")) == v.NOT_REPRODUCED
    assert v.decide(faster, *v.claimed_side(v.RATIO, "lower", 2.0)) == v.INCONCLUSIVE  # the paper's size inside the interval
    assert v.decide(faster, *v.claimed_side(v.RATIO, "lower", 3.0)) == v.NOT_REPRODUCED  # all of it short of 3x
    spread = v.two_sample([5.0, 9.0, 14.0], [10.0, 11.0, 12.0])
    assert v.decide(spread, *v.claimed_side(v.RATIO, "lower")) == v.INCONCLUSIVE
    # all ties at the bound (equal epochs in every seed): no effect, so not the claimed one
    ties = v.two_sample([4.0, 4.0, 4.0], [4.0, 4.0, 4.0])
    assert (ties.low, ties.high) == (1.0, 1.0) and v.decide(ties, *v.claimed_side(v.RATIO, "higher")) == v.NOT_REPRODUCED
    # differences: V higher by at least min_effect
    acc = v.two_sample([91.0, 92.0, 93.0], [90.0, 90.5, 91.0], v.DIFFERENCE)  # [0, 3]
    assert v.claimed_side(v.DIFFERENCE, "higher", 0.5) == ("above", 0.5)
    assert v.decide(acc, *v.claimed_side(v.DIFFERENCE, "higher")) == v.INCONCLUSIVE  # 0 is the bound itself
    assert v.decide(acc, *v.claimed_side(v.DIFFERENCE, "lower")) == v.NOT_REPRODUCED
    # one sample below X
    gap = v.median_interval([-0.3, 0.1, 0.2, -0.1, 0.4])
    assert (gap.low, gap.estimate, gap.high) == (-0.3, 0.1, 0.4)
    assert v.decide(gap, "below", 1.0) == v.REPRODUCED and v.decide(gap, "below", 0.2) == v.INCONCLUSIVE
    assert v.decide(gap, "below", -0.5) == v.NOT_REPRODUCED
    assert not v.median_interval([0.1, 0.2, 0.3, 0.4]).exists
    # reaching a rung: every seed as claimed, every seed the opposite, or a mix
    assert v.categorical([False], claimed=False) == v.REPRODUCED
    assert v.categorical([True, True], claimed=False) == v.NOT_REPRODUCED
    assert v.categorical([True, False], claimed=False) == v.INCONCLUSIVE and v.categorical([], claimed=True) == v.INCONCLUSIVE


def test_one_seed_is_inconclusive_unless_a_rung_is_never_reached():
    assert v.decide(v.two_sample([5.0], [10.0]), "above", 1.0) == v.INCONCLUSIVE
    assert v.decide(v.median_interval([0.1]), "below", 1.0) == v.INCONCLUSIVE
    assert v.decide(v.two_sample([5.0], [INF]), "above", 1.0) == v.REPRODUCED


def test_the_leaderboards_faster_is_the_same_rule():
    assert v.faster([5.0, 5.5, 6.0], [10.0, 11.0, 12.0]) and not v.faster([10.0, 11.0, 12.0], [5.0, 5.5, 6.0])
    assert not v.faster([5.0, 5.5], [10.0, 11.0])  # 2 against 2: cannot tell
    assert not v.faster([5.0, 9.0, 14.0], [10.0, 11.0, 12.0])


def test_infinities_round_trip_through_strict_json():
    assert [v.json_number(x) for x in (1.5, INF, -INF, None)] == [1.5, "inf", "-inf", None]
    assert [v.from_json_number(x) for x in (1.5, "inf", "-inf", None)] == [1.5, INF, -INF, None]
    with pytest.raises(ValueError):
        v.from_json_number("nan")


times = st.lists(st.floats(min_value=0.5, max_value=100.0, allow_nan=False), min_size=1, max_size=7)
times_or_never = st.lists(st.one_of(st.floats(min_value=0.5, max_value=100.0), st.just(INF)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(times_or_never, times_or_never, st.sampled_from([v.RATIO, v.DIFFERENCE]))
def test_the_interval_holds_the_estimate(a, b, kind):
    iv = v.two_sample(a, b, kind)
    assert iv.estimate is not None
    if iv.exists:
        assert iv.low <= iv.estimate <= iv.high
        assert iv.confidence is None or iv.confidence >= Fraction(9, 10)
    one = v.median_interval([x for x in a if math.isfinite(x)] or [1.0])
    if one.exists:
        assert one.low <= one.estimate <= one.high


@settings(max_examples=200, deadline=None)
@given(times, times, st.floats(min_value=0.0, max_value=1.0))
def test_the_interval_shrinks_as_the_seeds_agree(a, b, t):
    """Each side's seeds pulled toward their own median (on the log scale) by
    a factor t: the interval (in log ratio) is no wider than before."""

    def pulled(xs):
        centre = v.median_interval(xs).estimate
        return [centre * (x / centre) ** t for x in xs]

    before, after = v.two_sample(a, b), v.two_sample(pulled(a), pulled(b))
    assert before.exists == after.exists
    if before.exists:
        assert math.log(after.high / after.low) <= math.log(before.high / before.low) * t + 1e-9
    # seeds that all agree: a point interval
    same = v.two_sample([a[0]] * 3, [b[0]] * 3)
    assert same.low == same.high == pytest.approx(b[0] / a[0])


def test_the_docs_table_of_what_seeds_can_show_is_the_modules():
    text = (ROOT / "docs/rules.md").read_text(encoding="utf-8")
    table = v.seeds_table()
    assert "\n".join(table) in text, "docs/rules.md's table of seeds differs from dawnpipe.verdict.seeds_table(): paste its output"


@pytest.mark.parametrize(("seeds", "too_small", "enough"), [(3, 2.5, 2.75), (5, 1.75, 2.0)])
def test_the_effect_the_seeds_can_show_is_what_the_docs_say(seeds, too_small, enough):
    """docs/rules.md#verdicts-over-seeds, its paragraph "How large an effect they can show": log-normal times with the same spread sigma on both
    sides; the rule itself says reproduced in at least 80% of repetitions once the effect's logarithm is
    ``enough`` sigma, and in fewer at ``too_small`` sigma (3,000 repetitions each, a fixed generator)."""
    import numpy as np

    rng = np.random.default_rng(20261127)

    def share(shift: float) -> float:
        hits = 0
        for _ in range(3000):
            c, w = np.exp(rng.normal(shift, 1.0, seeds)), np.exp(rng.normal(0.0, 1.0, seeds))
            hits += v.decide(v.two_sample(list(w), list(c)), "above", 1.0) == v.REPRODUCED
        return hits / 3000

    assert share(too_small) < 0.8 <= share(enough)
    text = " ".join((ROOT / "docs/rules.md").read_text(encoding="utf-8").split())
    paragraph = text[text.index("How large an effect they can show") :][:900]
    assert f"{seeds} against {seeds}" in paragraph and f"about {enough:g}σ" in paragraph
