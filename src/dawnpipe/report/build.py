"""report: the leaderboard of our runs as JSON, one offline HTML page, and a
table of every run (Parquet + CSV).

    python -m dawnpipe report --runs results/runs/E/seed0 results/runs/E/seed1 ... \\
        --latency results/runs/E/seed0/latency/eager.json ... \\
        --stability results/stability/E.json ... --config-name config/config.yaml \\
        --json results/leaderboard.json --html results/leaderboard.html \\
        --table results/runs.parquet --csv results/runs.csv

Each run directory holds run.json, train.parquet and time_to_accuracy.json;
each inference result (one per backend) is latency/<backend>.json beside its
per-item latency/<backend>.parquet (without --latency, those below each run
directory are read). The JSON follows the shape of ``dawnpipe.leaderboard.build``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe import leaderboard
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_csv, write_json, write_parquet, write_text
from dawnpipe.infer.summary import headline
from dawnpipe.report.frameworks import framework_comparison
from dawnpipe.report.render import render_html
from dawnpipe.runfiles import files_under, run_dirs
from dawnpipe.runinfo import now_iso


def load_run(run_dir: Path) -> dict[str, Any]:
    needed = ["run.json", "time_to_accuracy.json", "train.parquet"]
    missing = [n for n in needed if not (run_dir / n).is_file()]
    if missing:
        raise DawnpipeError(f"{run_dir}: missing {', '.join(missing)} (did the train/extract stages run?)")
    return {
        "dir": run_dir,
        "run": read_json(run_dir / "run.json"),
        "tta": read_json(run_dir / "time_to_accuracy.json"),
        "log": pd.read_parquet(run_dir / "train.parquet"),
        "latencies": [],  # inference results, one per backend (attach_latencies)
        "latency": None,  # the headline of them (dawnpipe.infer.summary.headline)
    }


def attach_latencies(runs: list[dict[str, Any]], paths: list[Path]) -> None:
    """Give each run its inference results: ``paths`` (latency/<backend>.json,
    each beside its .parquet), or when none are given those in each run's
    latency/ directory (else its latency.json alone)."""
    paths = list(paths)
    if not paths:
        for run in runs:
            found = sorted((run["dir"] / "latency").glob("*.json"))
            paths += found or ([run["dir"] / "latency.json"] if (run["dir"] / "latency.json").is_file() else [])
    by_run = {(r["run"]["entry"], int(r["run"]["seed"])): r for r in runs}
    for path in paths:
        record = read_json(path)
        key = (record.get("entry"), record.get("seed"))
        if key not in by_run:
            raise DawnpipeError(f"{path}: inference result of entry {key[0]!r} seed {key[1]!r}, which is none of the --runs")
        per_item = Path(path).with_suffix(".parquet")
        if not per_item.is_file():
            raise DawnpipeError(f"{path}: its per-item latencies {per_item} are missing")
        by_run[key]["latencies"].append({**record, "per_item_path": str(per_item)})
    for run in runs:
        run["latencies"].sort(key=lambda r: r["latency_mean_ms"])
        run["latency"] = headline(run["latencies"])


def run_source(run: dict[str, Any]) -> str:
    return f"runs/{run['run']['entry']}/seed{run['run']['seed']}"


def objective_rows(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Leaderboard rows and exclusions for our own runs."""
    rows, excluded = [], []
    for r in runs:
        tta, info = r["tta"], r["run"]
        common = {
            "task": tta["task"], "threshold": tta["threshold"], "demo_threshold": tta["demo_threshold"],
            "model": info["model"], "hardware": info["hardware"], "framework": info["framework"],
            "timestamp": info["finished"][:10], "source": run_source(r), "entry": info["entry"], "seed": info["seed"],
        }
        if tta["reached"]:
            rows.append({**common, "objective": "train_time", "value": tta["time_to_accuracy_hours"],
                         "epochs": tta["epochs_to_accuracy"], "wall_hours": tta["wall_time_to_accuracy_hours"]})
            if tta["cost_usd"] is not None:
                rows.append({**common, "objective": "train_cost", "value": tta["cost_usd"]})
        else:
            excluded.append({"source": common["source"], "objectives": ["train_time", "train_cost"], "reason": tta["reason"]})
        for lat in r["latencies"]:
            rows_, excl = inference_rows(lat, common)
            rows += rows_
            excluded += excl
    return rows, excluded


def inference_rows(lat: dict[str, Any], common: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """One inference result (one backend of one run): its latency and cost rows,
    or, below the threshold, its exclusion with the accuracy it reached."""
    source = f"{common['source']}/latency/{lat['backend']}"
    if not lat["meets_threshold"]:
        return [], [{"source": source, "objectives": ["inference_latency", "inference_cost"], "reason": lat["reason"]}]
    extra = {"backend": lat["backend"], "threads": lat["threads"], "device": lat["device"], "precision": lat["precision"],
             "accuracy": lat["accuracy"], "items": lat["items"], "source": source}
    rows = [{**common, **extra, "objective": "inference_latency", "value": lat["latency_mean_ms"], "p50_ms": lat["latency_p50_ms"],
             "p90_ms": lat["latency_p90_ms"], "p99_ms": lat["latency_p99_ms"], "max_ms": lat["latency_max_ms"]}]
    if lat["cost_per_10k_usd"] is not None:
        rows.append({**common, **extra, "objective": "inference_cost", "value": lat["cost_per_10k_usd"]})
    return rows, []


def runs_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    records = []
    for r in runs:
        tta, info = r["tta"], r["run"]
        lat = r["latency"] or dict.fromkeys(("backend", "threads", "accuracy", "latency_mean_ms", "latency_p50_ms",
                                            "latency_p90_ms", "latency_p99_ms", "cost_per_10k_usd"))
        records.append({
            "entry": info["entry"], "seed": info["seed"], "task": info["task"], "model": info["model"],
            "framework": info["framework"], "hardware": info["hardware"], "threshold": tta["threshold"],
            "demo_threshold": tta["demo_threshold"], "reached": tta["reached"],
            "epochs_to_accuracy": tta["epochs_to_accuracy"], "time_to_accuracy_hours": tta["time_to_accuracy_hours"],
            "wall_time_to_accuracy_hours": tta["wall_time_to_accuracy_hours"], "cost_usd": tta["cost_usd"],
            "best_metric": tta["best_metric"], "epochs_run": tta["epochs_run"], "training_hours": tta["training_hours"],
            "inference_results": len(r["latencies"]),  # backends timed; the columns below are the best's
            "inference_backend": lat["backend"], "inference_threads": lat["threads"], "inference_accuracy": lat["accuracy"],
            "latency_mean_ms": lat["latency_mean_ms"], "latency_p50_ms": lat["latency_p50_ms"],
            "latency_p90_ms": lat["latency_p90_ms"], "latency_p99_ms": lat["latency_p99_ms"],
            "inference_cost_per_10k_usd": lat["cost_per_10k_usd"], "usd_per_hour": tta["usd_per_hour"],
            "config_hash": info["config_hash"], "git_commit": info["environment"]["git"]["commit"],
            "cpu_model": info["environment"]["cpu_model"], "threads": info["environment"]["threads"],
            "finished": info["finished"],
        })
    return pd.DataFrame(records)


def configure(p) -> None:
    p.add_argument("--runs", nargs="+", required=True, type=Path, help="run directories (results/runs/<entry>/seed<k>), or directories holding them")
    p.add_argument("--latency", nargs="*", default=[], type=Path, help="inference results (latency/<backend>.json); default: those in each run directory")
    p.add_argument("--stability", nargs="*", default=[], type=Path, help="stability JSON of each entry, or directories holding them")
    p.add_argument("--config-name", default="", help="the configuration the runs came from (shown in the page)")
    p.add_argument("--json", required=True, type=Path, help="output: leaderboard JSON")
    p.add_argument("--html", required=True, type=Path, help="output: self-contained leaderboard HTML")
    p.add_argument("--table", required=True, type=Path, help="output: all runs (Parquet)")
    p.add_argument("--csv", required=True, type=Path, help="output: all runs (CSV)")


def run(args) -> int:
    runs = [load_run(d) for d in run_dirs(args.runs)]
    attach_latencies(runs, args.latency)
    stability = [read_json(p) for p in files_under(args.stability, "*.json")]
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    board["generated"] = now_iso()
    board["config"] = args.config_name
    board["frameworks"] = framework_comparison(runs)
    table = runs_table(runs)
    html = render_html(board, runs, stability, config_name=args.config_name)
    write_parquet(args.table, table)
    write_csv(args.csv, table)
    write_json(args.json, board)
    write_text(args.html, html)
    filled = sum(1 for t in board["objectives"] if t["rows"])
    print(f"report: {len(runs)} runs, {filled} non-empty objective tables, {len(excluded)} exclusions -> {args.html}")
    return 0


