"""The framework-independent part of a trainer's per-epoch state (its
``last.pt`` / ``last.npz``): the settings hash, the epochs done, the log so
far, the training and wall clocks, the host's random number generators
(Python's ``random`` and NumPy's global one) and the learning-rate schedule's
position. Each trainer adds its framework's own objects (weights, optimizer,
gradient scaler, generators, device RNGs) beside it.

Plain JSON types only, so the PyTorch trainers store it with ``torch.save``
and the TensorFlow trainer in its ``.npz`` archive's JSON meta record.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from dawnpipe.train.schedule import lr_at

# Bumped when the state's content changes: a state of another format is not
# resumed from (the run starts over, saying why) rather than half-restored.
STATE_FORMAT = 2  # 2: host RNGs and the schedule's position


def host_rng_state() -> dict[str, Any]:
    """Python's and NumPy's global generators. Nothing in today's training
    loops draws from them, but a recipe or library that does must resume on
    the same draws as an uninterrupted run, not on the seed's first ones."""
    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": [version, list(internal), gauss],
        "numpy": {**numpy_state, "state": {**numpy_state["state"], "key": numpy_state["state"]["key"].tolist()}},
    }


def set_host_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": np.asarray(numpy_state["state"]["key"], dtype=np.uint32)}})


def schedule_position(hp: dict[str, Any], epochs_done: int) -> dict[str, Any]:
    """The checkpoint's ``scheduler`` entry. There is no scheduler object to
    take a ``state_dict`` of: the rate is ``schedule.lr_at`` of the fractional
    epoch (epoch + step / steps), a pure function, recomputed at every step.
    So the schedule's whole state is its position, recorded here for whoever
    reads the checkpoint: the next step is step 0 of epoch ``epochs_done + 1``,
    at ``next_lr``."""
    return {
        "kind": "stateless: lr = dawnpipe.train.schedule.lr_at(epoch + step / steps, lr, schedule, epochs)",
        "schedule": hp["schedule"],
        "lr": hp["lr"],
        "epochs": hp["epochs"],
        "next_epoch": epochs_done + 1,
        "next_step": 0,
        "next_lr": lr_at(float(epochs_done), hp["lr"], hp["schedule"], hp["epochs"]),
    }


def common_state(
    settings_hash: str, epochs_done: int, *, hp: dict[str, Any], rows: list[dict[str, Any]], clock_seconds: float, wall_seconds: float
) -> dict[str, Any]:
    """Everything of the per-epoch state that is not a framework object."""
    return {
        "state_format": STATE_FORMAT,
        "settings_hash": settings_hash,
        "epoch": epochs_done,
        "rows": rows,
        "clock_seconds": clock_seconds,
        "wall_seconds": wall_seconds,
        "host_rng": host_rng_state(),
        "scheduler": schedule_position(hp, epochs_done),
    }


def why_not_resumable(state: dict[str, Any], settings_hash: str) -> str | None:
    """None when ``state`` can be resumed from by a run of ``settings_hash``, else the reason it cannot."""
    if state.get("settings_hash") != settings_hash:
        return "it belongs to a different configuration"
    if state.get("state_format") != STATE_FORMAT:
        return f"it was written by another version of dawnpipe (state format {state.get('state_format', 1)}, this one reads {STATE_FORMAT})"
    return None


def restore_common(state: dict[str, Any]) -> tuple[list[dict[str, Any]], float, float, int]:
    """Set the host generators from a ``common_state``; (rows, clock seconds,
    wall seconds, epochs done). KeyError for a part it lacks, ValueError naming
    the part that holds something else, before anything is set."""
    rows, clock, wall, epoch = state["rows"], state["clock_seconds"], state["wall_seconds"], state["epoch"]
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError("its rows are not a list of log rows")
    for name, value in (("clock_seconds", clock), ("wall_seconds", wall)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"its {name} is {value!r:.60}, not a number of seconds")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"its epoch is {epoch!r:.60}, not a count of epochs")
    set_host_rng_state(state["host_rng"])
    return rows, float(clock), float(wall), epoch
