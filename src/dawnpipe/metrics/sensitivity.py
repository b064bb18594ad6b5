"""sensitivity: time to accuracy of one run at a ladder of thresholds.

    python -m dawnpipe sensitivity --tsv results/runs/E/seed0/train.tsv \\
        --run-json results/runs/E/seed0/run.json --out results/runs/E/seed0/sensitivity.json \\
        [--ladder 90 91 92 | --fashion-mnist 90 91 92 --cifar10 91 92 93]

The ladder comes from the task (``metric.sensitivity_ladder`` in
``tasks/<task>.yaml``) unless ``--ladder`` or the run's own ``--<task>``
(the config's ``sensitivity_ladders`` as Snakemake and DVC pass it) replaces it; the official
threshold and the run's own are always on it. Each rung is recomputed from
the TSV with ``dawnpipe.metrics.tta.time_to_accuracy``, the same rule as the training
objective. A rung a run did not reach is "not reached" only when the run had
the chance: a run stopped at its (lower, demo) threshold says nothing about
higher rungs, which are then "not observed".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dawnpipe.argtypes import add_task_options, task_option
from dawnpipe.argtypes import threshold as threshold_value
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json
from dawnpipe.metrics.tta import time_to_accuracy
from dawnpipe.runfiles import read_run_info
from dawnpipe.tasks import get_task

REACHED, NOT_REACHED, NOT_OBSERVED = "reached", "not reached", "not observed"


def ladder_for(task, override: Sequence[float] | None, run_threshold: float) -> list[float]:
    rungs = list(override) if override else list(task.sensitivity_ladder)
    return sorted({float(t) for t in rungs} | {float(task.threshold), float(run_threshold)})


def rungs(
    epochs: Sequence[float], hours: Sequence[float], metric: Sequence[float], ladder: Sequence[float], *, run_threshold: float, stopped_early: bool
) -> list[dict[str, Any]]:
    """Per threshold: status, epoch and training hours of the first epoch at or above it."""
    out = []
    own = time_to_accuracy(epochs, hours, metric, run_threshold)
    for threshold in ladder:
        tta = time_to_accuracy(epochs, hours, metric, threshold)
        if tta.reached:
            status = REACHED
        elif own.reached and stopped_early and threshold > run_threshold:
            status = NOT_OBSERVED
        else:
            status = NOT_REACHED
        out.append({"threshold": float(threshold), "status": status, "epoch": tta.epoch, "hours": tta.hours})
    return out


def sensitivity(tsv: Path, run_json: Path, ladder: Sequence[float] | None = None) -> dict[str, Any]:
    from dawnpipe.logs import read_run_tsv

    run = read_run_info(run_json)
    task = get_task(run["task"])
    log = read_run_tsv(tsv, task)
    if log.empty:
        raise DawnpipeError(f"{tsv}: no epochs logged")
    result = run.get("result") or {}
    # Without the trainer's word, assume the run may have stopped at its threshold: "not observed" is the safe claim.
    stopped = bool(result.get("stopped_at_threshold", True))
    ladder = ladder_for(task, ladder, run["threshold"])
    for t in ladder:
        if not 0 <= t <= task.metric_max:
            raise DawnpipeError(f"sensitivity ladder of {task.name}: threshold {t:g} is outside 0..{task.metric_max:g} ({task.metric_scale})")
    return {
        "entry": run["entry"],
        "seed": int(run["seed"]),
        "task": task.name,
        "metric": task.metric_column,
        "official_threshold": float(task.threshold),
        "run_threshold": float(run["threshold"]),
        "demo_threshold": bool(run["demo_threshold"]),
        "stopped_at_threshold": stopped,
        "epochs_run": float(log["epoch"].iloc[-1]),
        "rungs": rungs(
            log["epoch"].tolist(), log["hours"].tolist(), log[task.metric_column].tolist(), ladder, run_threshold=float(run["threshold"]), stopped_early=stopped
        ),
    }


def configure(p) -> None:
    p.add_argument("--tsv", required=True, type=Path, help="DAWNBench v1 per-epoch TSV of the run")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (task, thresholds, whether it stopped early)")
    p.add_argument("--out", required=True, type=Path, help="output JSON")
    p.add_argument("--ladder", type=threshold_value, nargs="+", help="thresholds to evaluate (default: the task's ladder)")
    add_task_options(p, what="sensitivity ladder", dest="ladder_for", type=threshold_value, metavar="THRESHOLD", nargs="+")


def run(args) -> int:
    ladder = args.ladder or task_option(args, "ladder_for", read_run_info(args.run_json)["task"])
    record = sensitivity(args.tsv, args.run_json, ladder)
    write_json(args.out, record)
    parts = [
        f"{r['threshold']:g}: " + (f"{r['hours'] * 3600:.1f} s (epoch {r['epoch']:g})" if r["status"] == REACHED else r["status"]) for r in record["rungs"]
    ]
    print(terminal_safe(f"sensitivity: {record['entry']} seed {record['seed']}: " + "; ".join(parts)))  # the entry is run.json's text
    return 0
