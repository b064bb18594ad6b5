"""Learning-rate schedules as pure functions of the fractional epoch, and how
an epoch is cut into steps.

Stateless on purpose: a resumed run recomputes the rate from the epoch it
resumes at, so there is no scheduler state to checkpoint or get wrong.
"""

from __future__ import annotations

import bisect
from typing import Any

from dawnpipe.errors import DawnpipeError


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
        decay = max(schedule.get("decay_epoch", peak), peak)  # the peak holds until here (none: no hold)
        if epoch <= decay:
            return lr
        span = max(total_epochs - decay, 1e-12)
        return lr + (end - lr) * min((epoch - decay) / span, 1.0)
    raise ValueError(f"unknown schedule kind {kind!r}")


def steps_per_epoch(n_items: int, batch_size: int, train_limit: int | None, world_size: int = 1) -> int:
    """Optimizer steps of one epoch over ``n_items``: the full global batches,
    plus the remainder when every process gets at least 2 items of it (batch
    norm cannot normalise over 1). Zero steps is an error naming its cause:
    an epoch that trains nothing has no loss, no rate and no time."""
    steps = n_items // batch_size + (1 if n_items % batch_size >= 2 * world_size else 0)
    if steps == 0:
        cause = f"train_limit {train_limit} (the config's train_limit, --train-limit) leaves" if train_limit is not None else "the prepared data has"
        raise DawnpipeError(
            f"{cause} {n_items} training item(s): an epoch would have no training step "
            f"(a step needs at least {2 * world_size} items, 2 per process; hyperparameters.batch_size is {batch_size})"
            + ("; raise train_limit" if train_limit is not None else "")
        )
    return steps
