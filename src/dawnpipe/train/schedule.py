"""Learning-rate schedules as pure functions of the fractional epoch.

Stateless on purpose: a resumed run recomputes the rate from the epoch it
resumes at, so there is no scheduler state to checkpoint or get wrong.
"""

from __future__ import annotations

import bisect
from typing import Any


def lr_at(epoch: float, lr: float, schedule: dict[str, Any], total_epochs: float) -> float:
    kind = schedule.get("kind", "constant")
    if kind == "constant":
        return lr
    if kind == "step":
        if epoch < schedule.get("warmup_epochs", 0):
            return schedule.get("warmup_lr", lr)
        drops = bisect.bisect_right(sorted(schedule.get("milestones", [])), epoch)
        return lr * schedule.get("gamma", 0.1) ** drops
    if kind == "onecycle":
        peak = schedule.get("peak_epoch", 1.0)
        start = lr * schedule.get("start_fraction", 0.1)
        end = lr * schedule.get("end_fraction", 0.0)
        if epoch <= peak:
            return start + (lr - start) * (epoch / peak if peak > 0 else 1.0)
        span = max(total_epochs - peak, 1e-12)
        return lr + (end - lr) * min((epoch - peak) / span, 1.0)
    raise ValueError(f"unknown schedule kind {kind!r}")
