"""One statistical rule for every verdict dawnpipe states over seeds: a
study's checks (dawnpipe.studies.checks), the leaderboard's ties
(dawnpipe.leaderboard) and the race's speed-up goal (scripts/docs.py). Pure
Python, exact, no scipy; docs/rules.md ("Verdicts over seeds") states the rule
and its assumptions.

Two samples (a variant V against a comparison C, m and n seeds):

- the effect of a lower-is-better measure (a time, epochs, seconds per epoch,
  a cost) is the ratio C/V (above 1: V is better); of an accuracy or a gap,
  the difference V - C;
- the estimate is Hodges-Lehmann's: the median of the m*n pairwise effects
  (for ratios the median on the log scale, so that C/V and V/C estimate
  reciprocals: with an even count, the geometric mean of the two middle ones);
- the interval is the exact distribution-free one of the Mann-Whitney
  statistic: [D_(k), D_(mn+1-k)] of the sorted pairwise effects, k the largest
  integer with P(U <= k-1) <= ALPHA under the exact null distribution of U
  (``u_counts``, counted, not approximated); ALPHA = 0.05 per side, a 90%
  two-sided interval. No k >= 1 (P(U = 0) = 1/C(m+n, m) > ALPHA: too few
  seeds): no interval.

A seed that never reached the rung is infinitely slow (``math.inf``): the
ratio C/inf is 0, inf/V is inf, inf/inf is 1 (a tie). When every seed of one
side never reached and every seed of the other did, the order is decided
whatever the number of seeds: a rung not reached within the whole budget is
a categorical outcome, not a slow time.

One sample (a held-out gap claimed small): the interval of the median from
order statistics, [x_(k), x_(n+1-k)], k the largest with
P(Binomial(n, 1/2) <= k-1) <= ALPHA; none under five values.

Verdicts (``decide``): reproduced when the whole interval lies strictly beyond
the claimed bound on the claimed side; not reproduced when none of it does
(the whole interval at the bound or on the other side); inconclusive
otherwise, and whenever there is no interval.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

ALPHA = Fraction(1, 20)  # per side: a 90% two-sided interval
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
RATIO, DIFFERENCE = "ratio", "difference"


# --- exact null distributions -------------------------------------------------


@functools.cache
def u_counts(m: int, n: int) -> tuple[int, ...]:
    """counts[u]: how many of the C(m+n, m) equally likely orderings of m and n
    values give the Mann-Whitney statistic U = u (pairs with the first
    sample's value above the second's), u = 0 .. m*n. By the recurrence on
    which sample the largest value comes from: f(m, n) = x^n f(m-1, n) + f(m, n-1)."""
    if m < 0 or n < 0:
        raise ValueError(f"sample sizes must be >= 0, not {m}, {n}")
    # rows[j]: the counts for (i, j) of the current i
    rows = [(1,) for _ in range(n + 1)]  # i = 0: U = 0 only
    for i in range(1, m + 1):
        new = [(1,)]  # j = 0
        for j in range(1, n + 1):
            above, left = rows[j], new[j - 1]  # (i-1, j) shifted by j; (i, j-1)
            size = i * j + 1
            poly = [0] * size
            for u, c in enumerate(above):
                poly[u + j] += c
            for u, c in enumerate(left):
                poly[u] += c
            new.append(tuple(poly))
        rows = new
    return rows[n]


def u_cdf(m: int, n: int, u: int) -> Fraction:
    """P(U <= u) for sizes m, n under the null (exact)."""
    counts = u_counts(m, n)
    return Fraction(sum(counts[: max(0, u + 1)]), math.comb(m + n, m))


@functools.cache
def two_sample_k(m: int, n: int, alpha: Fraction = ALPHA) -> int:
    """The largest k with P(U <= k-1) <= alpha; 0 when none (too few values)."""
    if m < 1 or n < 1:
        return 0
    counts, total = u_counts(m, n), math.comb(m + n, m)
    k, below = 0, 0
    while k < len(counts) and Fraction(below + counts[k], total) <= alpha:
        below += counts[k]
        k += 1
    return k


@functools.cache
def one_sample_k(n: int, alpha: Fraction = ALPHA) -> int:
    """The largest k with P(Binomial(n, 1/2) <= k-1) <= alpha; 0 when none."""
    k, below = 0, 0
    while k <= n and Fraction(below + math.comb(n, k), 2**n) <= alpha:
        below += math.comb(n, k)
        k += 1
    return k


def two_sample_confidence(m: int, n: int, alpha: Fraction = ALPHA) -> Fraction | None:
    """The exact coverage of the interval for sizes m, n: 1 - 2 P(U <= k-1); None without one."""
    k = two_sample_k(m, n, alpha)
    return None if k == 0 else 1 - 2 * u_cdf(m, n, k - 1)


def one_sample_confidence(n: int, alpha: Fraction = ALPHA) -> Fraction | None:
    k = one_sample_k(n, alpha)
    return None if k == 0 else 1 - 2 * Fraction(sum(math.comb(n, i) for i in range(k)), 2**n)


# --- effects -----------------------------------------------------------------


def ratio(c: float, v: float) -> float:
    """C/V with the rule's infinities: never reached (inf) on both sides is a tie."""
    if math.isinf(c) and math.isinf(v):
        return 1.0
    if math.isinf(c):
        return math.inf
    if math.isinf(v):
        return 0.0
    if v == 0:
        return 1.0 if c == 0 else math.inf
    return c / v


def difference(c: float, v: float) -> float:
    """V - C (an infinity on both sides of the same sign is a tie)."""
    if math.isinf(c) and math.isinf(v) and (c > 0) == (v > 0):
        return 0.0
    return v - c


def _median_sorted(values: Sequence[float], kind: str) -> float:
    n = len(values)
    if n % 2:
        return values[n // 2]
    a, b = values[n // 2 - 1], values[n // 2]
    if kind == DIFFERENCE:
        return a if a == b else (a + b) / 2
    # the median on the log scale: the geometric mean of the two middle ratios
    if a == b:
        return a
    if a == 0 and math.isinf(b):
        return 1.0  # half the pairs say never, half say always: no direction
    if a == 0 or math.isinf(b):
        return a if a == 0 else b
    return math.sqrt(a * b)


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval (low, high; None where there is none)."""

    estimate: float | None
    low: float | None
    high: float | None
    k: int  # the order statistic of the interval's ends (0: no interval)
    confidence: Fraction | None  # the exact coverage of the interval
    m: int  # sizes: V's (the one sample's) ...
    n: int  # ... and C's (0 for one sample)
    categorical: bool = False  # decided by reached against never reached, whatever the sizes

    @property
    def exists(self) -> bool:
        return self.low is not None


def as_times(values: Iterable[float | None]) -> list[float]:
    """Per-seed values with None (never reached the rung) as infinitely slow."""
    return [math.inf if v is None else float(v) for v in values]


def two_sample(v: Sequence[float], c: Sequence[float], kind: str = RATIO, alpha: Fraction = ALPHA) -> Interval:
    """The effect of V against C (``kind``: RATIO, C/V; DIFFERENCE, V - C),
    its Hodges-Lehmann estimate and its exact interval. Values may be inf
    (never reached: see ``as_times``), never NaN."""
    if any(math.isnan(x) for x in (*v, *c)):
        raise ValueError("a NaN among the values: a seed without a value is None (never reached), not NaN")
    m, n = len(v), len(c)
    if m == 0 or n == 0:
        return Interval(None, None, None, 0, None, m, n)
    if all(math.isfinite(x) and x > 0 for x in (*v, *c)):  # the common case, without the rule's special values
        pairs = sorted([ci / vi for vi in v for ci in c] if kind == RATIO else [vi - ci for vi in v for ci in c])
    else:
        effect = ratio if kind == RATIO else difference
        pairs = sorted(effect(ci, vi) for vi in v for ci in c)
    estimate = _median_sorted(pairs, kind)
    k = two_sample_k(m, n, alpha)
    if k:
        return Interval(estimate, pairs[k - 1], pairs[m * n - k], k, 1 - 2 * u_cdf(m, n, k - 1), m, n, categorical_order(v, c))
    if categorical_order(v, c):
        # every seed of one side never reached, every seed of the other did: every pair says the same
        return Interval(estimate, pairs[0], pairs[-1], 0, None, m, n, categorical=True)
    return Interval(estimate, None, None, 0, None, m, n)


def categorical_order(v: Sequence[float], c: Sequence[float]) -> bool:
    """Every value of one side infinite (never reached), every value of the other finite."""
    v_never, c_never = [math.isinf(x) for x in v], [math.isinf(x) for x in c]
    return bool(v and c) and ((all(v_never) and not any(c_never)) or (all(c_never) and not any(v_never)))


def median_interval(x: Sequence[float], alpha: Fraction = ALPHA) -> Interval:
    """The median of ``x`` and the distribution-free interval of the median
    from order statistics (none when too few values)."""
    values = sorted(x)
    n = len(values)
    if n == 0:
        return Interval(None, None, None, 0, None, 0, 0)
    estimate = _median_sorted(values, DIFFERENCE)
    k = one_sample_k(n, alpha)
    if not k:
        return Interval(estimate, None, None, 0, None, n, 0)
    return Interval(estimate, values[k - 1], values[n - k], k, one_sample_confidence(n, alpha), n, 0)


# --- verdicts ----------------------------------------------------------------


def decide(interval: Interval, side: str, bound: float) -> str:
    """``side``: "above" (the claim: the effect > bound) or "below" (< bound)."""
    if not interval.exists:
        return INCONCLUSIVE
    low, high = interval.low, interval.high
    if side == "above":
        return REPRODUCED if low > bound else NOT_REPRODUCED if high <= bound else INCONCLUSIVE
    if side == "below":
        return REPRODUCED if high < bound else NOT_REPRODUCED if low >= bound else INCONCLUSIVE
    raise ValueError(f"side must be 'above' or 'below', not {side!r}")


def claimed_side(kind: str, direction: str, min_effect: float | None = None) -> tuple[str, float]:
    """Where the effect must lie for a claim that V is ``direction`` ("lower"
    or "higher") than C: (side, bound). ``min_effect``: for ratios the
    smallest factor that counts (default 1: any), for differences the smallest
    difference (default 0)."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")
    if kind == RATIO:  # C/V > f: V lower by a factor f; C/V < 1/f: V higher by f
        f = 1.0 if min_effect is None else float(min_effect)
        return ("above", f) if direction == "lower" else ("below", 1.0 / f)
    d = 0.0 if min_effect is None else float(min_effect)
    return ("above", d) if direction == "higher" else ("below", -d)


def faster(a: Sequence[float], b: Sequence[float], alpha: Fraction = ALPHA) -> bool:
    """Whether the rule says times ``a`` are faster than times ``b`` (b/a's
    whole interval above 1). Used by the leaderboard."""
    return decide(two_sample(a, b, RATIO, alpha), "above", 1.0) == REPRODUCED


def categorical(outcomes: Sequence[bool], claimed: bool) -> str:
    """A claim that every seed reaches (``claimed`` True) or never reaches a
    rung: reproduced when every seed does as claimed, not reproduced when
    every seed does the opposite, else inconclusive (none: inconclusive)."""
    if not outcomes:
        return INCONCLUSIVE
    if all(o == claimed for o in outcomes):
        return REPRODUCED
    if all(o != claimed for o in outcomes):
        return NOT_REPRODUCED
    return INCONCLUSIVE


# --- what a number of seeds can show -------------------------------------------


def fewest_seeds() -> dict[str, int]:
    """The fewest seeds with which the rule can say anything but inconclusive
    (apart from a categorical outcome): per side of a two-sample check with
    equal sizes, and for the one-sample median interval."""
    return {"two_sample": next(n for n in range(1, 100) if two_sample_k(n, n)), "one_sample": next(n for n in range(1, 100) if one_sample_k(n))}


def seeds_table(sizes: Iterable[int] = (2, 3, 4, 5, 6, 8, 10)) -> list[str]:
    """The docs' table (docs/rules.md, tests/test_verdict.py keeps it equal to
    this): per number of seeds, the order statistic k and the exact coverage of
    the two-sample interval (that many seeds on each side) and of the one-sample
    median interval."""

    def cell(k: int, conf: Fraction | None) -> str:
        return "none" if not k else f"k = {k}, {100 * float(conf):.1f}%"

    rows = [
        "| seeds | two-sample interval, that many seeds on each side: k, coverage | P(U <= k-1), or P(U = 0) where there is none | one-sample median interval: k, coverage |",
        "|---|---|---|---|",
    ]
    for n in sizes:
        k = two_sample_k(n, n)
        orderings = u_counts(n, n)[: max(k, 1)]  # those with U <= k-1 (U = 0 where there is no interval)
        tail = f"P(U <= {k - 1})" if k else "P(U = 0)"
        p = f"{sum(orderings)}/{math.comb(2 * n, n)}"
        rows.append(f"| {n} | {cell(k, two_sample_confidence(n, n))} | {tail} = {p} | {cell(one_sample_k(n), one_sample_confidence(n))} |")
    return rows


# --- JSON ----------------------------------------------------------------------


def json_number(x: float | None) -> float | str | None:
    """A value for strict JSON: an infinity as the string "inf" or "-inf"."""
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf"


def from_json_number(x: float | str | None) -> float | None:
    if isinstance(x, str):
        if x not in ("inf", "-inf"):
            raise ValueError(f"not a number: {x!r}")
        return math.inf if x == "inf" else -math.inf
    return None if x is None else float(x)
