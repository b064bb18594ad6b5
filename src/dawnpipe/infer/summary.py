"""A run's headline inference result among its backends (no framework imported).

Each backend is its own result (latency/<backend>.json, ranked on its own in
the leaderboard). latency.json is the run's headline, for whoever wants one
figure per run (DVC metrics, the table of all runs): a copy of the record of
the fastest backend that meets the threshold (of the fastest overall when
none does), with the list of every backend timed in ``backends_timed`` and
of every backend that failed (``backend``, ``error``, ``reason``; not timed,
no result file) in ``backends_failed``;
latency.parquet is that backend's per-item table.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path, write_json


def headline(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The lowest mean latency among the results that meet the threshold,
    else (nothing ranked) the lowest overall; None for no results."""
    ranked = [r for r in results if r["meets_threshold"]] or results
    return min(ranked, key=lambda r: r["latency_mean_ms"], default=None)


def write_headline(results: list[tuple[Path, dict[str, Any]]], out: Path, items_parquet: Path, failed: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """``results``: (path of latency/<backend>.json, its record) of one run;
    ``failed``: the backends of the same job that failed (infer.cli)."""
    if not results:
        raise DawnpipeError(f"{out}: no inference results to summarise")
    runs = {(r["entry"], r["seed"]) for _, r in results}
    if len(runs) > 1:
        raise DawnpipeError(f"{out}: results of several runs ({', '.join(f'{e} seed {s}' for e, s in sorted(runs))}); one run's, please")
    best = headline([r for _, r in results])
    path = next(p for p, r in results if r is best)
    timed = [
        {"backend": r["backend"], "latency_mean_ms": r["latency_mean_ms"], "accuracy": r["accuracy"], "meets_threshold": r["meets_threshold"], "result": str(p)}
        for p, r in sorted(results, key=lambda pr: pr[1]["latency_mean_ms"])
    ]
    summary = {**best, "headline_of": str(path), "backends_timed": timed, "backends_failed": list(failed or [])}
    with atomic_path(items_parquet) as tmp:
        shutil.copyfile(Path(path).with_suffix(".parquet"), tmp)
    write_json(out, summary)
    return summary
