"""Energy from telemetry samples (pure functions; no hardware).

A meter is one device's cumulative joules over the sampler's clock: a RAPL
zone's or a GPU's energy counter where it has one, else the trapezoidal
integral of its power samples. The run's meter is the sum of its devices'.
Energy over a span [a, b] is E(b) - E(a), interpolating linearly between
samples; a span outside the sampled time is not measured (None), never
extrapolated.

Energy to accuracy integrates over the same spans as the training clock
(docs/rules.md#1-training-time): each epoch's training, up to and including
the first epoch at the threshold; evaluation and checkpointing between them
are left out. The wall-clock variant (start of training to the end of that
epoch, evaluation included) is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Meter:
    t_s: np.ndarray  # sampler seconds, increasing
    joules: np.ndarray  # cumulative, 0 at the first sample
    source: str  # "NVML", "RAPL", "NVML+RAPL"
    devices: tuple[str, ...]

    def between(self, a: float, b: float) -> float | None:
        """Joules from a to b (sampler seconds); None outside the sampled time."""
        if self.t_s.size < 2 or a > b or a < self.t_s[0] - 1e-9 or b > self.t_s[-1] + 1e-9:
            return None
        return float(np.interp(b, self.t_s, self.joules) - np.interp(a, self.t_s, self.joules))

    @property
    def total(self) -> float:
        return float(self.joules[-1] - self.joules[0]) if self.joules.size else 0.0


def integrate_power(t_s: Sequence[float], power_w: Sequence[float]) -> np.ndarray:
    """Cumulative joules of a power trace (trapezoids), 0 at the first sample."""
    t, p = np.asarray(t_s, dtype=np.float64), np.asarray(power_w, dtype=np.float64)
    if t.size == 0:
        return np.zeros(0)
    steps = np.diff(t) * (p[1:] + p[:-1]) / 2.0
    return np.concatenate([[0.0], np.cumsum(steps)])


def device_joules(rows: pd.DataFrame) -> np.ndarray | None:
    """Cumulative joules of one device's samples (sorted by time), or None
    when the device has neither an energy counter nor power readings."""
    energy = rows["energy_j"].to_numpy(dtype=np.float64)
    if energy.size and np.isfinite(energy).all():
        return energy - energy[0]
    power = rows["power_w"].to_numpy(dtype=np.float64)
    if power.size and np.isfinite(power).all():
        return integrate_power(rows["t_s"].to_numpy(dtype=np.float64), power)
    return None


def meter(samples: pd.DataFrame) -> Meter | None:
    """The run's meter: GPUs (NVML) plus CPU packages (RAPL); None when no
    device measured energy (psutil alone does not)."""
    parts, devices, sources = [], [], set()
    grid = np.sort(samples["t_s"].unique()) if len(samples) else np.zeros(0)
    for (device, kind), rows in samples[samples["kind"].isin(["gpu", "rapl"])].groupby(["device", "kind"], sort=True):
        rows = rows.sort_values("t_s")
        joules = device_joules(rows)
        if joules is None:
            continue
        parts.append(np.interp(grid, rows["t_s"].to_numpy(dtype=np.float64), joules))
        devices.append(device)
        sources.add("NVML" if kind == "gpu" else "RAPL")
    if not parts or grid.size < 2:
        return None
    source = "+".join(s for s in ("NVML", "RAPL") if s in sources)
    return Meter(grid, np.sum(parts, axis=0), source, tuple(devices))


def training_spans(log: pd.DataFrame) -> list[tuple[float, float]]:
    """Per epoch, (start, end) of its training in the log's wall-clock seconds.

    The trainers stamp ``wall_hours`` after the epoch's evaluation, so the
    training ended ``eval_seconds`` earlier and began ``epoch_train_seconds``
    before that (to within the few milliseconds of the logbook update)."""
    end = log["wall_hours"].to_numpy(dtype=np.float64) * 3600.0 - log["eval_seconds"].to_numpy(dtype=np.float64)
    start = end - log["epoch_train_seconds"].to_numpy(dtype=np.float64)
    return [(float(a), float(b)) for a, b in zip(start, end)]


def energy_to_accuracy(m: Meter, log: pd.DataFrame, origin_s: float, threshold_row: int) -> dict[str, float | None]:
    """Joules of the training spans of epochs 1..threshold_row+1 (training
    clock) and of the wall clock from the start of training to the end of
    that epoch. ``origin_s``: sampler time of the log's wall-clock zero."""
    spans = training_spans(log)[: threshold_row + 1]
    parts = [m.between(origin_s + a, origin_s + b) for a, b in spans]
    train = None if any(p is None for p in parts) else float(sum(parts))
    wall_end = float(log["wall_hours"].iloc[threshold_row]) * 3600.0
    return {"energy_to_accuracy_j": train, "wall_energy_to_accuracy_j": m.between(origin_s, origin_s + wall_end)}


def epoch_energy(m: Meter | None, log: pd.DataFrame, origin_s: float | None) -> list[float | None]:
    """Joules of each epoch's training span (None where not measured)."""
    if m is None or origin_s is None:
        return [None] * len(log)
    return [m.between(origin_s + a, origin_s + b) for a, b in training_spans(log)]


def mean_in_spans(samples: pd.DataFrame, kind: str, column: str, spans: list[tuple[float, float]], origin_s: float | None) -> list[float | None]:
    """Mean of ``column`` over the samples of ``kind`` inside each span (per
    device, then summed over devices: two GPUs at 50% show 100)."""
    rows = samples[samples["kind"] == kind]
    out: list[float | None] = []
    for a, b in spans:
        if origin_s is None or rows.empty:
            out.append(None)
            continue
        inside = rows[(rows["t_s"] >= origin_s + a) & (rows["t_s"] <= origin_s + b)]
        values = inside.groupby("device")[column].mean().dropna()
        out.append(float(values.sum()) if len(values) else None)
    return out


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
