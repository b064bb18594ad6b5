"""FLOPs and utilization of a program entry's run, estimated from the model graph.

    python -m dawnpipe utilization ... --model results/runs/E/seed0/model.pt --data data/prepared/fashion-mnist

A program trains in its own processes, so dawnpipe's counter
(``dawnpipe.metrics.flops``) cannot watch its steps. Its run's utilization
is estimated instead, from what dawnpipe holds and what it measured itself:

- **FLOPs per item**: the training FLOPs per item of the model the program
  handed over (the run's ``model.pt``: the threshold epoch's model), counted
  from its graph by ``dawnpipe.programs.graph_flops``: matrix multiplies and
  convolutions, 2 FLOPs per multiply-add, forward + backward by autograd's
  rule (3x forward, less the first layer's input gradient), the convention
  of a zoo entry's count;
- **items trained**: the training split as the program was given it, never a
  count the program reports (its ``train_samples``): run.json's
  ``program.items_given.train`` where the run says it, else the prepared
  split's size under the run's ``train_limit`` (contract 1's ``{data}``
  holds exactly those first items), times the epochs run to the ranked
  epoch (epochs count from 1, one at a time: epoch N is N epochs);
- **seconds**: dawnpipe's training clock to the ranked epoch (run.json's
  ``program.clock``), against the peak of the precision the entry states
  (``program.precision``), as for a zoo entry.

Each evaluated epoch gets the same estimate from its own training time
(FLOPs per item x items given / that epoch's training seconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json
from dawnpipe.programs import graph_flops

METHOD = graph_flops.METHOD


def run_flops(run: dict[str, Any], checkpoint: Path | None, data: Path | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the run's FLOP record, in flops.json's shape; the training items it was
    given: ``{"train": n, "from": where the number comes from}`` or None)."""
    items = train_items_given(run, data)
    record: dict[str, Any] = {"entry": run["entry"], "counted": False, "method": METHOD, "bytes_per_item": None, "arithmetic_intensity": None}
    if checkpoint is None:
        return {**record, "reason": "no model of the run was given (utilization --model RUN/model.pt)"}, items
    from dawnpipe.programs.model_files import load_archive

    try:
        model, _facts = load_archive(checkpoint)
    except (DawnpipeError, FileNotFoundError) as e:
        return {**record, "reason": f"the run's model cannot be read ({e})"}, items
    counted = graph_flops.count_model(model, item_shape(data))
    record.update(counted)
    record["method"] = f"{METHOD} ({model.format} model of epoch {model.epoch}, dawnpipe.programs.graph_flops)"
    record["model_epoch"] = model.epoch
    record["model_format"] = model.format
    if counted["counted"]:
        # the graph says nothing of the backward pass's memory traffic: no intensity, no point on the roofline
        record["bytes_reason"] = "operand traffic is not estimated from a graph (the backward pass is not in it)"
    return record, items


def item_shape(data: Path | None) -> tuple[int, ...] | None:
    """One stored test item's shape, from the prepared data's manifest (None without data)."""
    if data is None:
        return None
    manifest = read_json(Path(data) / "manifest.json")
    try:
        return tuple(int(d) for d in manifest["splits"]["test"]["images"]["shape"][1:])
    except (KeyError, TypeError, ValueError):
        raise DawnpipeError(f"{Path(data) / 'manifest.json'}: field 'splits.test.images.shape': missing or not a list of sizes") from None


def train_items_given(run: dict[str, Any], data: Path | None) -> dict[str, Any] | None:
    """How many training items the program was given, and where the number comes from; None when unknown."""
    given = ((run.get("program") or {}).get("items_given") or {}).get("train")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return {"train": given, "from": "run.json program.items_given.train"}
    if data is None:
        return None
    manifest_path = Path(data) / "manifest.json"
    try:
        total = int(read_json(manifest_path)["splits"]["train"]["items"])
    except (KeyError, TypeError, ValueError):
        raise DawnpipeError(f"{manifest_path}: field 'splits.train.items': missing or not a number") from None
    limit = (run.get("settings") or {}).get("train_limit")
    n = min(total, int(limit)) if limit else total
    return {"train": n, "from": f"the prepared training split ({total:,} items)" + (f" under train_limit {int(limit):,}" if limit else "")}


def ranked_epoch(run: dict[str, Any], log: pd.DataFrame, metric: str) -> tuple[int, float]:
    """(the run's ranked epoch, dawnpipe's training seconds to it): run.json's
    program.clock, else the log's first row at the threshold, else its last."""
    clock = (run.get("program") or {}).get("clock") or {}
    if isinstance(clock.get("epoch"), int) and isinstance(clock.get("dawnpipe_seconds"), int | float):
        return int(clock["epoch"]), float(clock["dawnpipe_seconds"])
    reached = log[log[metric] >= float(run["threshold"])]
    row = reached.iloc[0] if len(reached) else log.iloc[-1]
    return int(row["epoch"]), float(row["hours"]) * 3600.0


def estimate(flops: dict[str, Any], run: dict[str, Any], log: pd.DataFrame, metric: str, items: dict[str, Any] | None, peak: dict[str, Any]) -> dict[str, Any]:
    """The run's estimate to its ranked epoch: training FLOPs, achieved TFLOP/s and the fraction of peak, with what they rest on."""
    epoch, seconds = ranked_epoch(run, log, metric)
    out: dict[str, Any] = {
        "method": METHOD,
        "ranked_epoch": epoch,
        "epochs": epoch,
        "training_seconds": seconds,
        "train_items": items["train"] if items else None,
        "train_items_from": items["from"] if items else None,
        "flops_per_item": flops.get("flops_per_item"),
        "training_flops": None,
        "achieved_tflops": None,
        "fraction_of_peak": None,
        "reason": None,
    }
    if not flops.get("counted"):
        out["reason"] = f"FLOPs not counted: {flops.get('reason')}"
    elif items is None:
        out["reason"] = "the number of training items the program was given is unknown (no run.json program.items_given, no --data)"
    elif seconds <= 0:
        out["reason"] = "no training time to the ranked epoch"
    else:
        total = flops["flops_per_item"] * items["train"] * epoch
        achieved = total / seconds / 1e12
        out.update(training_flops=total, achieved_tflops=achieved)
        out["fraction_of_peak"] = achieved / peak["compute_tflops"] if peak.get("compute_tflops") else None
    return out
