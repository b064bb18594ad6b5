"""Test items a program never sees, and the test of whether it learnt the
ones it was given (docs/rules.md#the-score-and-the-test-items-kept-back; docs/programs.md).

A program is handed the test split with its labels (to evaluate itself, as
programs do), so nothing stops it from training on the very items it is
scored on. dawnpipe therefore hands it only part of the test split: per
class, a share ``fraction`` of the items is kept back, drawn per run from the
run's entry and seed (``draw``), and never written where the program can
read it. Every model the program hands over is scored on the whole split;
the ranked accuracy is that score, the program's claims are compared with
its score on the part it was given (the items it evaluated on).

Once, at the ranked epoch, the model's correctness on the given part and on
the kept part is compared (``memorisation_test``). If the model is no better
on items it was given than on items it never saw, which items were kept back
is independent of which items it gets right; given how many items of each
class it gets right in the whole split, the number of right answers among the
kept items then follows, class by class, the hypergeometric distribution of
drawing that many items without replacement, and their total the
convolution of those. The test's p-value is the exact probability, under that
distribution, of as few right answers among the kept items as were seen; the
run is not ranked when it is at most ``ALPHA`` (0.00135, a one-sided three
sigma). So the false-alarm rate is at most ``ALPHA`` exactly, whatever the
accuracy, class balance or split sizes, and no seed-to-seed estimate enters.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.00135  # one-sided, the normal tail beyond three standard deviations
DEFAULT_FRACTION = 0.2


def draw(labels: np.ndarray, fraction: float, key: str) -> np.ndarray:
    """The indices (sorted) of the items kept back: per class, round(fraction x its items),
    at least one and never all, drawn by a generator seeded from ``key`` (entry id and seed)."""
    labels = np.asarray(labels).reshape(-1)
    if fraction <= 0:
        return np.zeros(0, dtype=np.int64)
    seed = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    kept = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) < 2:
            continue  # a class of one item: kept whole on the given side
        k = min(len(members) - 1, max(1, round(fraction * len(members))))
        kept.append(rng.choice(members, size=k, replace=False))
    return np.sort(np.concatenate(kept)).astype(np.int64) if kept else np.zeros(0, dtype=np.int64)


def given_indices(n: int, kept: np.ndarray) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[kept] = False
    return np.flatnonzero(mask)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeometric_pmf(population: int, successes: int, draws: int) -> np.ndarray:
    """P(X = x) for x = 0..draws: x successes among ``draws`` items drawn without replacement."""
    pmf = np.zeros(draws + 1)
    lo, hi = max(0, draws - (population - successes)), min(draws, successes)
    total = _log_comb(population, draws)
    for x in range(lo, hi + 1):
        pmf[x] = math.exp(_log_comb(successes, x) + _log_comb(population - successes, draws - x) - total)
    return pmf


def kept_correct_pmf(class_sizes: list[int], class_correct: list[int], class_kept: list[int]) -> np.ndarray:
    """The distribution of right answers among the kept items, under the null: the convolution of the classes' hypergeometrics."""
    pmf = np.ones(1)
    for n, k, h in zip(class_sizes, class_correct, class_kept, strict=True):
        pmf = np.convolve(pmf, hypergeometric_pmf(n, k, h))
    return pmf


@dataclass(frozen=True)
class Verdict:
    given_items: int
    kept_items: int
    given_accuracy: float  # percent
    kept_accuracy: float  # percent
    p_value: float
    alpha: float
    memorised: bool

    def as_dict(self) -> dict:
        return {
            "given_items": self.given_items,
            "kept_items": self.kept_items,
            "given_accuracy": self.given_accuracy,
            "kept_accuracy": self.kept_accuracy,
            "gap_points": self.given_accuracy - self.kept_accuracy,
            "p_value": self.p_value,
            "alpha": self.alpha,
            "memorised": self.memorised,
            "rule": "exact one-sided p-value of the kept items' right answers (hypergeometric per class, convolved) <= alpha",
        }


def memorisation_test(correct: np.ndarray, labels: np.ndarray, kept: np.ndarray, alpha: float = ALPHA) -> Verdict | None:
    """The test on one model's per-item correctness over the whole split; None when nothing was kept back."""
    correct = np.asarray(correct, dtype=bool).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if len(kept) == 0:
        return None
    is_kept = np.zeros(len(correct), dtype=bool)
    is_kept[kept] = True
    sizes, rights, kepts = [], [], []
    for c in np.unique(labels):
        members = labels == c
        sizes.append(int(members.sum()))
        rights.append(int(correct[members].sum()))
        kepts.append(int((members & is_kept).sum()))
    pmf = kept_correct_pmf(sizes, rights, kepts)
    seen = int(correct[is_kept].sum())
    p = float(min(1.0, pmf[: seen + 1].sum()))
    n_kept, n_given = int(is_kept.sum()), int((~is_kept).sum())
    return Verdict(
        given_items=n_given,
        kept_items=n_kept,
        given_accuracy=100.0 * float(correct[~is_kept].mean()) if n_given else float("nan"),
        kept_accuracy=100.0 * float(correct[is_kept].mean()),
        p_value=p,
        alpha=alpha,
        memorised=p <= alpha,
    )


def smallest_gap(items_per_class: int, classes: int, kept_per_class: int, accuracy: float, alpha: float = ALPHA) -> float:
    """The smallest gap (points, given minus kept accuracy) the test fires at, for a balanced split
    at an overall ``accuracy`` (percent) with every class equally accurate: what docs/rules.md states."""
    n, h = items_per_class, kept_per_class
    right = round(accuracy / 100.0 * n)
    pmf = kept_correct_pmf([n] * classes, [right] * classes, [h] * classes)
    cdf = np.cumsum(pmf)
    fires = np.flatnonzero(cdf <= alpha)
    if len(fires) == 0:
        return float("inf")
    kept_right = int(fires[-1])  # the most right answers among the kept items that still fire
    total_right, total_kept = right * classes, h * classes
    given_right, total_given = total_right - kept_right, (n - h) * classes
    return 100.0 * (given_right / total_given - kept_right / total_kept)
