"""The clock of a program run (docs/rules.md#the-clock).

dawnpipe stamps every line of the program's output with its own monotonic
clock when the line arrives; the program's MLLOG carries its own ``time_ms``.
Both clocks of a run are computed by the one rule below, each from its own
times alone, so that they can be compared.

The training clock of epoch N is the time from ``run_start`` to the moment
epoch N's model is handed over (contract 2: its ``epoch_stop``; contract 1:
the line that completed its evaluation, ``eval_stop`` or an ``eval_accuracy``
logged after it, when the model file must exist),
less what is **off the clock**, counted once:

    off the clock = the union of
        every freeze: dawnpipe froze the program to take and score a model
            (dawnpipe's work, never the program's), and
        under contract 1 only, every evaluation window of the program
            (``eval_start`` to ``eval_stop``), each cut to its bound:
            ``evaluation_factor`` x the seconds dawnpipe's own scoring of
            that epoch's model took, plus ``EVALUATION_SLACK_S``; the rest of
            a longer window is on the clock.

Under contract 2 the program's own evaluation, if it keeps one, is on the
clock: only dawnpipe's freezes are off it.

A freeze's **export** is not off the clock: where the program hands over
weights, the part of the freeze in which its own factory code builds the
network and writes the model file (dawnpipe.programs.weights) is the
program's work, counted as the export of a program that writes ONNX itself.

Freezes are spans of dawnpipe's clock. On the program's clock a freeze is
placed by the offset between the two clocks at the line that caused it (the
``epoch_stop``, or under contract 1 the line that completed the evaluation):
a freeze that began d seconds after that line arrived began d seconds after
the ``time_ms`` the line carries.

**Start-up** (from starting the process to ``run_start``) is off the clock as
long as its work stays within the configuration's allowance,
``programs.startup_allowance_cpu_seconds`` of CPU time used by the program's
processes (importing a framework, loading data and building a network take a
few CPU seconds, however loaded the machine; training does not fit). Beyond
it, the share of the start-up's wall time that the excess work took is added
to the clock of every epoch: wall x (1 - allowance / CPU seconds). A run
whose counted excess, start-up or evaluation, is more than
``EXCESS_TOLERANCE`` x its time plus ``EXCESS_SLACK_S`` is not ranked: work
was placed where the clock does not run.

Nothing here can be negative: every span is cut to [run_start, epoch_stop]
and a union is never longer than the interval it lies in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

EVALUATION_SLACK_S = 1.0  # of every contract 1 evaluation window, beyond evaluation_factor x dawnpipe's scoring
EXCESS_TOLERANCE = 0.02  # counted excess up to 2% of the run's time ...
EXCESS_SLACK_S = 1.0  # ... plus one second does not unrank the run

Span = tuple[float, float]


def union(spans: Iterable[Span], lo: float, hi: float) -> list[Span]:
    """The spans cut to [lo, hi], overlaps merged, in order."""
    cut = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi and min(b, hi) > max(a, lo))
    merged: list[Span] = []
    for a, b in cut:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def covered(spans: Iterable[Span], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] that ``spans`` cover, each second once."""
    return float(sum(b - a for a, b in union(spans, lo, hi)))


@dataclass(frozen=True)
class Freeze:
    """dawnpipe froze the program from ``start`` to ``end`` (its clock), because of the line stamped
    ``cause_stamp`` that carried ``cause_time_ms``. ``exports``: the spans of it in which the program's own
    code (its factory, dawnpipe.programs.weights) turned the weights it handed over into a model file:
    the program's work, on the clock as a program's own export is."""

    start: float
    end: float
    cause_stamp: float
    cause_time_ms: float
    epoch: int
    exports: tuple[Span, ...] = ()  # the exports done in it (usually one: its own epoch's)

    def spans(self, side: int) -> list[Span]:
        """The freeze's off-clock spans on one clock (0: dawnpipe's, 1: the program's): the freeze less its exports."""
        offset = 0.0 if side == 0 else self.cause_stamp - self.cause_time_ms / 1000.0
        left = [(self.start - offset, self.end - offset)]
        for x, y in union(self.exports, self.start, self.end):
            x, y = x - offset, y - offset
            left = [part for a, b in left for part in ((a, min(b, x)), (max(a, y), b)) if part[1] > part[0]]
        return left


@dataclass(frozen=True)
class Window:
    """An evaluation window of the program: (dawnpipe's stamp, the program's time_ms) at each end."""

    epoch: int
    start: tuple[float, float]
    stop: tuple[float, float]


@dataclass
class ClockRule:
    """What the clock takes off, for one run: its contract, its freezes, its evaluation windows and their bounds."""

    contract: int
    freezes: list[Freeze] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    bounds: dict[int, float] = field(default_factory=dict)  # epoch -> seconds of its evaluation window that are off the clock

    def allowed_windows(self, side: int) -> list[Span]:
        """The off-clock part of each evaluation window on one clock (0: dawnpipe's, 1: the program's, seconds)."""
        if self.contract >= 2:
            return []
        scale = 1.0 if side == 0 else 1e-3
        spans = []
        for w in self.windows:
            a, b = w.start[side] * scale, w.stop[side] * scale
            bound = self.bounds.get(w.epoch)
            if bound is None:  # not scored (yet): nothing of it is off the clock
                continue
            spans.append((a, min(b, a + max(0.0, bound))))
        return spans

    def exports(self) -> list[Span]:
        """The spans of dawnpipe's clock in which the program's factory exported handed-over weights inside a freeze (on the clock)."""
        return [span for f in self.freezes for span in union(f.exports, f.start, f.end)]

    def off_clock(self, side: int) -> list[Span]:
        freezes = [span for f in self.freezes for span in f.spans(side)]
        return [*freezes, *self.allowed_windows(side)]

    def training_seconds(self, run_start: tuple[float, float], stop: tuple[float, float]) -> tuple[float, float]:
        """(dawnpipe's, the program's) training seconds from ``run_start`` to ``stop`` (each a (stamp, time_ms) pair)."""
        clocks = []
        for side, scale in ((0, 1.0), (1, 1e-3)):
            lo, hi = run_start[side] * scale, stop[side] * scale
            if hi <= lo:
                clocks.append(0.0)
                continue
            clocks.append(max(0.0, (hi - lo) - covered(self.off_clock(side), lo, hi)))
        return clocks[0], clocks[1]

    def parts(self, run_start: float, stop: float) -> dict[str, float]:
        """dawnpipe's clock from ``run_start`` to ``stop`` taken apart: wall, freezes, evaluation off the clock, evaluation counted."""
        freezes = covered([span for f in self.freezes for span in f.spans(0)], run_start, stop)
        off = covered(self.off_clock(0), run_start, stop)
        windows = covered([(w.start[0], w.stop[0]) for w in self.windows], run_start, stop)
        allowed = covered(self.allowed_windows(0), run_start, stop)
        return {
            "wall_seconds": max(0.0, stop - run_start),
            "freeze_seconds": freezes,
            "evaluation_off_clock_seconds": max(0.0, off - freezes),
            "evaluation_seconds": windows,
            "evaluation_counted_seconds": max(0.0, windows - allowed) if self.contract < 2 else windows,
        }


def startup_excess(startup_seconds: float, cpu_seconds: float, allowance_cpu_seconds: float) -> float:
    """Seconds of start-up counted on the clock: the share of its wall time that its work beyond the allowance took."""
    if cpu_seconds <= allowance_cpu_seconds or cpu_seconds <= 0:
        return 0.0
    return max(0.0, startup_seconds) * (1.0 - allowance_cpu_seconds / cpu_seconds)


def excess_unranks(excess_seconds: float, ranked_seconds: float) -> bool:
    """Whether work placed off the clock (counted now) is more than the rule tolerates."""
    return excess_seconds > EXCESS_TOLERANCE * ranked_seconds + EXCESS_SLACK_S


def evaluation_bound(factor: float, scoring_seconds: float) -> float:
    """Seconds of a contract 1 evaluation window that are off the clock."""
    return factor * max(0.0, scoring_seconds) + EVALUATION_SLACK_S
