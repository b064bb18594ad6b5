"""report: the leaderboard of our runs as JSON, one offline HTML page, and a
table of every run (Parquet + CSV).

    python -m dawnpipe report --runs results/runs/E/seed0 results/runs/E/seed1 ... \\
        --stability results/stability/E.json ... --config-name config/config.yaml \\
        --json results/leaderboard.json --html results/leaderboard.html \\
        --table results/runs.parquet --csv results/runs.csv

Each run directory holds run.json, train.parquet and time_to_accuracy.json;
each inference result (one per backend) is latency/<backend>.json beside its
per-item latency/<backend>.parquet (``dawnpipe.runfiles.latency_files``). The
JSON follows the shape of ``dawnpipe.leaderboard.build``.
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
from dawnpipe.runfiles import files_under, latency_files, read_run_info, run_dirs
from dawnpipe.runinfo import now_iso
from dawnpipe.tasks import get_task


def load_run(run_dir: Path) -> dict[str, Any]:
    needed = ["run.json", "time_to_accuracy.json", "train.parquet"]
    missing = [n for n in needed if not (run_dir / n).is_file()]
    if missing:
        raise DawnpipeError(f"{run_dir}: missing {', '.join(missing)} (did the train/extract stages run?)")
    latencies = sorted((load_latency(p) for p in latency_files(run_dir)), key=lambda r: r["latency_mean_ms"])
    return {
        "dir": run_dir,
        "run": read_run_info(run_dir / "run.json"),
        "tta": read_json(run_dir / "time_to_accuracy.json"),
        "log": pd.read_parquet(run_dir / "train.parquet"),
        "latencies": latencies,  # every inference result, one per backend (fastest first)
        "latency": headline(latencies),  # the run's headline among them (dawnpipe.infer.summary)
        **{
            name: read_json(run_dir / f"{name}.json") if (run_dir / f"{name}.json").is_file() else None for name in ("utilization", "sensitivity")
        },  # optional: the analysis stages of issue 9
    }


def load_latency(path: Path) -> dict[str, Any]:
    """One inference result, with the path of its per-item table (None where
    the tool that wrote it kept none: no distribution plot then)."""
    per_item = Path(path).with_suffix(".parquet")
    return {**read_json(path), "per_item_path": str(per_item) if per_item.is_file() else None}


def run_source(run: dict[str, Any]) -> str:
    return f"runs/{run['run']['entry']}/seed{run['run']['seed']}"


def objective_rows(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Leaderboard rows and exclusions for our own runs."""
    rows, excluded = [], []
    for r in runs:
        tta, info = r["tta"], r["run"]
        common = {
            "task": tta["task"],
            "threshold": tta["threshold"],
            "demo_threshold": tta["demo_threshold"],
            "model": info["model"],
            "hardware": info["hardware"],
            "framework": info["framework"],
            "timestamp": info["finished"][:10],
            "source": run_source(r),
            "entry": info["entry"],
            "seed": info["seed"],
            "audit_anchor": f"run-{info['entry']}-{info['seed']}",
        }
        if tta["reached"]:
            rows.append(
                {
                    **common,
                    "objective": "train_time",
                    "value": tta["time_to_accuracy_hours"],
                    "epochs": tta["epochs_to_accuracy"],
                    "wall_hours": tta["wall_time_to_accuracy_hours"],
                }
            )
            if tta["cost_usd"] is not None:
                rows.append({**common, "objective": "train_cost", "value": tta["cost_usd"]})
            energy = (r.get("utilization") or {}).get("energy") or {}
            nodes = info.get("nodes") or 1
            if energy.get("energy_to_accuracy_j") is not None and nodes > 1:
                # rank 0 samples its own node: a part of the energy, not to be ranked against wholes
                excluded.append(
                    {
                        "source": common["source"],
                        "objectives": ["train_energy"],
                        "reason": f"energy measured on node 0 of {nodes} only (each node's counters are not collected)",
                    }
                )
            elif energy.get("energy_to_accuracy_j") is not None:  # shown only where measured
                rows.append({**common, "objective": "train_energy", "value": energy["energy_to_accuracy_j"], "energy_source": energy["source"]})
        else:
            measured = ((r.get("utilization") or {}).get("energy") or {}).get("run_j") is not None
            excluded.append(
                {"source": common["source"], "objectives": ["train_time", "train_cost"] + (["train_energy"] if measured else []), "reason": tta["reason"]}
            )
        for lat in r.get("latencies") or ([r["latency"]] if r.get("latency") else []):  # hand-made runs may hold only one
            rows_, excl = inference_rows(lat, common)
            rows += rows_
            excluded += excl
    return rows, excluded


def inference_rows(lat: dict[str, Any], common: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """One inference result (one backend of one run): its latency and cost rows,
    or, below the threshold, its exclusion with the accuracy it reached."""
    source = common["source"]  # the run; the row's backend and threads tell its results apart
    if not lat["meets_threshold"]:
        task = get_task(common["task"])
        reason = lat.get("reason") or (
            f"inference {lat['metric']} {task.format_metric(lat['accuracy'])} with backend {lat['backend']} < threshold {task.format_metric(lat['threshold'])}"
        )
        return [], [{"source": source, "objectives": ["inference_latency", "inference_cost"], "reason": reason}]
    extra = {
        "backend": lat["backend"],
        "threads": lat["threads"],
        "device": lat.get("device"),
        "precision": lat.get("precision"),
        "accuracy": lat["accuracy"],
        "items": lat["items"],
        "official_items": lat.get("official_items"),
    }  # fewer items than the test set: tagged so in the table
    rows = [
        {
            **common,
            **extra,
            "objective": "inference_latency",
            "value": lat["latency_mean_ms"],
            "p50_ms": lat["latency_p50_ms"],
            "p90_ms": lat["latency_p90_ms"],
            "p99_ms": lat["latency_p99_ms"],
            "max_ms": lat["latency_max_ms"],
        }
    ]
    if lat["cost_per_10k_usd"] is not None:
        rows.append({**common, **extra, "objective": "inference_cost", "value": lat["cost_per_10k_usd"]})
    return rows, []


def runs_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    records = []
    for r in runs:
        tta, info = r["tta"], r["run"]
        lat = r["latency"] or dict.fromkeys(
            ("backend", "threads", "accuracy", "latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "cost_per_10k_usd")
        )
        records.append(
            {
                "entry": info["entry"],
                "seed": info["seed"],
                "task": info["task"],
                "model": info["model"],
                "framework": info["framework"],
                "hardware": info["hardware"],
                "threshold": tta["threshold"],
                "demo_threshold": tta["demo_threshold"],
                "reached": tta["reached"],
                "epochs_to_accuracy": tta["epochs_to_accuracy"],
                "time_to_accuracy_hours": tta["time_to_accuracy_hours"],
                "wall_time_to_accuracy_hours": tta["wall_time_to_accuracy_hours"],
                "cost_usd": tta["cost_usd"],
                "best_metric": tta["best_metric"],
                "epochs_run": tta["epochs_run"],
                "training_hours": tta["training_hours"],
                "inference_results": len(r["latencies"]),  # backends timed; the columns below are the best's
                "inference_backend": lat["backend"],
                "inference_threads": lat["threads"],
                "inference_accuracy": lat["accuracy"],
                "latency_mean_ms": lat["latency_mean_ms"],
                "latency_p50_ms": lat["latency_p50_ms"],
                "latency_p90_ms": lat["latency_p90_ms"],
                "latency_p99_ms": lat["latency_p99_ms"],
                "inference_cost_per_10k_usd": lat["cost_per_10k_usd"],
                "usd_per_hour": tta["usd_per_hour"],
                "config_hash": info["config_hash"],
                "git_commit": info["environment"]["git"]["commit"],
                "cpu_model": info["environment"]["cpu_model"],
                "threads": info["environment"]["threads"],
                "finished": info["finished"],
            }
        )
    return pd.DataFrame(records)


def configure(p) -> None:
    p.add_argument("--runs", nargs="+", required=True, type=Path, help="run directories (results/runs/<entry>/seed<k>), or directories holding them")
    p.add_argument("--stability", nargs="*", default=[], type=Path, help="stability JSON of each entry, or directories holding them")
    p.add_argument("--config-name", default="", help="the configuration the runs came from (shown in the page)")
    p.add_argument(
        "--submissions",
        nargs="*",
        default=[],
        type=Path,
        metavar="DIR",
        help="DAWNBench v1 submission directories to audit and rank with the runs (config: submission_dirs)",
    )
    from dawnpipe.audit.rules import add_arguments

    add_arguments(p)  # --max-bytes, --rules (config: audit_rules): how the submissions are audited
    p.add_argument("--json", required=True, type=Path, help="output: leaderboard JSON")
    p.add_argument("--html", required=True, type=Path, help="output: self-contained leaderboard HTML")
    p.add_argument("--table", required=True, type=Path, help="output: all runs (Parquet)")
    p.add_argument("--csv", required=True, type=Path, help="output: all runs (CSV)")


def run(args) -> int:
    runs = [load_run(d) for d in run_dirs(args.runs)]
    stability = [read_json(p) for p in files_under(args.stability, "*.json")]
    rows, excluded = objective_rows(runs)
    report = _audit(args.submissions, args)
    board = leaderboard.merge(rows, excluded, report, runs)
    board["generated"] = now_iso()
    board["config"] = args.config_name
    board["frameworks"] = framework_comparison(runs)
    table = runs_table(runs)
    html = render_html(board, runs, stability, config_name=args.config_name, audit=report)
    write_parquet(args.table, table)
    write_csv(args.csv, table)
    write_json(args.json, board)
    write_text(args.html, html)
    filled = sum(1 for t in board["objectives"] if t["rows"])
    print(
        f"report: {len(runs)} runs, {len(report.submissions) if report else 0} submissions, {filled} non-empty objective tables, "
        f"{len(board['excluded'])} exclusions -> {args.html}"
    )
    return 0


def _audit(dirs: list[Path], args):
    """The audit of the submission directories under the rules of ``args``
    (``--rules``, ``--max-bytes``), as ``dawnpipe audit`` would give it; None
    when there are none."""
    from dawnpipe.audit.rules import rules_from_args

    rules = rules_from_args(args)
    if not dirs:
        return None
    for d in dirs:
        if not d.is_dir():
            raise DawnpipeError(f"{d}: submission directory not found")
    from dawnpipe.audit.cli import without_hypothesis_strategies
    from dawnpipe.audit.core import audit

    without_hypothesis_strategies()
    return audit([str(d) for d in dirs], rules)
