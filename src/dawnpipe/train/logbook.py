"""The per-epoch log of a training run, shared by every framework's trainer.

Two files: the DAWNBench v1 TSV (``epoch, hours, <metric columns>``; hours are
cumulative *training-clock* hours) and a Parquet log with everything else.
While training, both are rewritten atomically every epoch in the work
directory; the declared outputs are written only when the run completes, so
an interrupted run never leaves a file that looks finished.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe.display import format_hours, terminal_safe
from dawnpipe.fileio import write_parquet, write_text

PARQUET_COLUMNS = [
    "epoch",
    "hours",
    "wall_hours",
    "train_loss",
    "eval_loss",
    "eval_seconds",
    "checkpoint_seconds",
    "epoch_train_seconds",
    "lost_seconds",
    "lr",
    "items_per_second",
]
# lost_seconds: training time of this epoch lost to interruptions of earlier
# attempts (dawnpipe.train.interruptions), included in `hours`; every trainer
# tracks it (0 when nothing was lost).
UNKNOWN = float("nan")  # a value the run does not know (a program's training loss): NaN in a row, null in train.parquet


def held_out_columns(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The extra log columns of an entry: its metric on its held-out split
    (held_out) and on its task's new test set (new_test); none without them."""
    from dawnpipe.data.loader import held_out_size
    from dawnpipe.logs import HELD_OUT_PREFIX, NEW_TEST_PREFIX
    from dawnpipe.tasks import get_task

    column = get_task(entry["task"]).metric_column
    return (*((HELD_OUT_PREFIX + column,) if held_out_size(entry) else ()), *((NEW_TEST_PREFIX + column,) if entry.get("new_test") else ()))


def extra_set_summary(sets: list[tuple[str, int, dict]]) -> dict[str, Any]:
    """run.json's record of the extra evaluation sets: held_out_items, and the new test set's items, name and whether it was verified."""
    from dawnpipe.logs import HELD_OUT_PREFIX, NEW_TEST_PREFIX

    out: dict[str, Any] = {"held_out_items": 0}
    for prefix, items, about in sets:
        if prefix == HELD_OUT_PREFIX:
            out["held_out_items"] = items
        elif prefix == NEW_TEST_PREFIX:
            out |= {"new_test_items": items, "new_test": {"title": about.get("title"), "verified": bool(about.get("verified"))}}
    return out


def extra_set_text(sets: list[tuple[str, int, dict]]) -> str:
    """The extra evaluation sets in the run's first line; an unverified new test set says so.
    Its title is the prepared data's manifest.json text (a directory from dvc pull): shown escaped."""
    from dawnpipe.logs import HELD_OUT_PREFIX, NEW_TEST_PREFIX

    words = []
    for prefix, items, about in sets:
        if prefix == HELD_OUT_PREFIX:
            words.append(f", {items} held-out items")
        elif prefix == NEW_TEST_PREFIX:
            check = "" if about.get("verified") else " (NOT VERIFIED: no checksum of its files is known)"
            words.append(f", {items} items of {terminal_safe(str(about.get('title', 'the new test set')))}{check}")
    return "".join(words)


def epoch_row(
    epoch: int,
    clock_seconds: float,
    metrics: dict[str, float],
    *,
    train_loss: float | None,
    eval_loss: float | None,
    eval_seconds: float,
    wall_seconds: float,
    epoch_seconds: float,
    lr: float | None,
    items: float | None,
    lost_seconds: float,
) -> dict[str, Any]:
    """One epoch's row of the log, for every trainer (checkpoint_seconds is filled in once known).

    ``wall_seconds``: the wall clock when the epoch's evaluation ended, read
    before anything is saved (a program's: when its model was handed over).
    Readers rely on it: the epoch's training ended ``eval_seconds`` earlier
    (telemetry.energy.training_spans), and the wall time to accuracy ends
    with the evaluation that found it. None for ``train_loss``, ``eval_loss``,
    ``lr`` or ``items``: the run does not know it (a program's loss and
    learning rate are inside the program), and the row says UNKNOWN."""
    return {
        "epoch": epoch,
        "hours": clock_seconds / 3600.0,
        **metrics,
        "wall_hours": wall_seconds / 3600.0,
        "train_loss": UNKNOWN if train_loss is None else train_loss,
        "eval_loss": UNKNOWN if eval_loss is None else eval_loss,
        "eval_seconds": eval_seconds,
        "checkpoint_seconds": 0.0,
        "epoch_train_seconds": epoch_seconds,
        "lost_seconds": lost_seconds,
        "lr": UNKNOWN if lr is None else lr,
        "items_per_second": items / epoch_seconds if items is not None and epoch_seconds > 0 else UNKNOWN,
    }


class Logbook:
    def __init__(
        self,
        metric_columns: tuple[str, ...],
        threshold_column: str,
        threshold: float,
        rows: list[dict] | None = None,
        *,
        demo: bool = False,
        extra_columns: tuple[str, ...] = (),
        format_metric: Callable[[float], str] = lambda v: f"{v:.2f}",
    ):
        """``demo``: the threshold is a demo config's, not the task's official
        one; every line that names it says so. ``extra_columns``: more of a
        trainer's metrics for the Parquet log (SQuAD's exact match), after
        the metric columns. ``format_metric``: how messages show the metric
        (the task's: percent or a fraction)."""
        self.metric_columns = tuple(metric_columns)
        self.threshold_column = threshold_column
        self.threshold = threshold
        self.demo = demo
        self.extra_columns = tuple(extra_columns)
        self.format_metric = format_metric
        self.rows: list[dict[str, Any]] = list(rows or [])

    @property
    def reached_row(self) -> dict[str, Any] | None:
        for row in self.rows:
            if row[self.threshold_column] >= self.threshold:
                return row
        return None

    def add(self, row: dict[str, Any]) -> bool:
        """Append an epoch; True if this is the first epoch at/above the threshold."""
        first = self.reached_row is None and row[self.threshold_column] >= self.threshold
        self.rows.append(row)
        return first

    def stops_early(self, first_reached: bool, epochs_done: int, budget: int, stop_at_threshold: bool, say: bool = True) -> bool:
        """True (and, if ``say``, says so) when stop_at_threshold ends the run at the epoch that first reached the threshold."""
        if not (first_reached and stop_at_threshold and epochs_done < budget):
            return False
        if say:
            print(f"train: stopping at the threshold (stop_at_threshold); {budget - epochs_done} epochs of the budget not run", flush=True)
        return True

    def not_converged_message(self) -> str:
        best = max(r[self.threshold_column] for r in self.rows)
        fmt = self.format_metric
        return f"train: did not converge: best {self.threshold_column} {fmt(best)} < {self._threshold_label()} {fmt(self.threshold)} after {self.rows[-1]['epoch']} epochs"

    def _threshold_label(self) -> str:
        return "demo threshold" if self.demo else "threshold"

    def summary(self, *, clock_seconds: float, wall_seconds: float, stopped_early: bool, resumed_from: int | None) -> dict[str, Any]:
        """The framework-independent part of the summary a trainer returns to train.cli (run.json's result)."""
        reached = self.reached_row
        return {
            "reached": reached is not None,
            "threshold_epoch": reached["epoch"] if reached else None,
            "time_to_accuracy_hours": reached["hours"] if reached else None,
            "epochs_run": self.rows[-1]["epoch"],
            "stopped_at_threshold": stopped_early,
            "training_hours": clock_seconds / 3600.0,
            "wall_hours": wall_seconds / 3600.0,
            "best_metric": max(r[self.threshold_column] for r in self.rows),
            "resumed_from_epoch": resumed_from,
        }

    def tsv_text(self) -> str:
        cols = ["epoch", "hours", *self.metric_columns]
        lines = ["\t".join(cols)]
        for row in self.rows:
            lines.append("\t".join(_fmt(row[c]) for c in cols))
        return "\n".join(lines) + "\n"

    def frame(self) -> pd.DataFrame:
        cols = [c for c in PARQUET_COLUMNS if c != "epoch"]
        return pd.DataFrame(self.rows, columns=["epoch", *self.metric_columns, *self.extra_columns, *cols])

    def write(self, tsv: Path, parquet: Path) -> None:
        write_text(tsv, self.tsv_text())
        write_parquet(parquet, self.frame())

    def progress_line(self, row: dict[str, Any], total_epochs: int, first_reached: bool) -> str:
        metrics = "  ".join(f"{c} {row[c]:.2f}" for c in self.metric_columns)
        line = (
            f"epoch {row['epoch']:>3}/{total_epochs}  loss {row['train_loss']:.4f}  {metrics}  "
            f"clock {format_hours(row['hours'])}  epoch {row['epoch_train_seconds']:.1f}s  "
            f"{row['items_per_second']:.0f} items/s  lr {row['lr']:.4g}  eval {row['eval_seconds']:.1f}s"
        )
        if first_reached:
            line += f"  <- {self._threshold_label()} {self.threshold:g} reached"
        return line


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(round(value, 10)) if math.isfinite(value) else "nan"
    return str(value)
