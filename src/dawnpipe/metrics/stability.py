"""stability: how repeatable an entry's time-to-accuracy is over seeds.

    python -m dawnpipe stability --entry resnet20-dawn --out results/stability/resnet20-dawn.json \\
        results/runs/resnet20-dawn/seed0/time_to_accuracy.json results/runs/resnet20-dawn/seed1/...

Coefficient of variation = sample std / mean of the time-to-accuracy of the
runs that reached the threshold (docs/rules.md#analysis-metrics); the fraction
of runs that reached it is reported beside it, since a CoV over the survivors
alone hides the runs that never converged. With at least five seeds the entry
also gets MLPerf's score: the olympic mean of the time to accuracy, a seed
that did not reach the threshold counting as the slowest, none when more than
one did not (dawnpipe.olympic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_json
from dawnpipe.olympic import MIN_RUNS, olympic_mean
from dawnpipe.runfiles import check_run_file, files_under
from dawnpipe.schemas.results import StabilityResult, validate


def stability(entry: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    if not records:
        raise DawnpipeError(f"{entry}: no runs to summarise")
    times = np.array([r["time_to_accuracy_hours"] for r in records if r["reached"]], dtype=np.float64)
    epochs = np.array([r["epochs_to_accuracy"] for r in records if r["reached"]], dtype=np.float64)
    mean = float(times.mean()) if times.size else None
    std = float(times.std(ddof=1)) if times.size >= 2 else (0.0 if times.size == 1 else None)
    cov = std / mean if mean and std is not None else None
    return {
        "entry": entry,
        "seeds": sorted(int(r["seed"]) for r in records),
        "runs": len(records),
        "reached_runs": int(times.size),
        "reached_fraction": times.size / len(records),
        "tta_mean_hours": mean,
        "tta_median_hours": float(np.median(times)) if times.size else None,
        "tta_std_hours": std,
        "tta_cov": cov,
        "tta_min_hours": float(times.min()) if times.size else None,
        "tta_max_hours": float(times.max()) if times.size else None,
        "epochs_mean": float(epochs.mean()) if epochs.size else None,
        "olympic_tta_hours": olympic_mean(times.tolist(), len(records) - times.size) if len(records) >= MIN_RUNS else None,
        "note": None if times.size >= 2 else "fewer than two runs reached the threshold: no spread to measure",
    }


def configure(p) -> None:
    p.add_argument("--entry", required=True, help="entry id")
    p.add_argument("--out", required=True, type=Path, help="output JSON")
    p.add_argument("results", nargs="+", type=Path, help="time_to_accuracy.json of each seed, or directories holding them")


def run(args) -> int:
    paths = files_under(args.results, "time_to_accuracy.json")
    records = [read_json(p) for p in paths]
    for path, record in zip(paths, records):
        if not isinstance(record, dict) or record.get("entry") != args.entry:
            found = record.get("entry") if isinstance(record, dict) else None
            raise DawnpipeError(f"{path}: field entry is {found!r}, not --entry {args.entry}: a result of another entry (or not a time-to-accuracy result)")
        check_run_file(record, path, "time_to_accuracy")  # every field it needs, of the right type
    summary = stability(args.entry, records)
    validate(StabilityResult, pd.DataFrame([summary]).drop(columns=["seeds"]), f"stability of {args.entry}")
    write_json(args.out, summary)
    cov = "n/a" if summary["tta_cov"] is None else f"{summary['tta_cov']:.3f}"
    print(terminal_safe(f"stability: {args.entry}: {summary['reached_runs']}/{summary['runs']} runs reached the threshold; CoV of time-to-accuracy {cov}"))
    return 0
