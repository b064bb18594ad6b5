"""report: the leaderboard of our runs as JSON, one offline HTML page, and a
table of every run (Parquet + CSV).

    python -m dawnpipe report --runs results/runs/E/seed0 results/runs/E/seed1 ... \\
        --stability results/stability/E.json ... --config-name config/config.yaml \\
        --json results/leaderboard.json --html results/leaderboard.html \\
        --table results/runs.parquet --csv results/runs.csv

Each run directory holds run.json, train.parquet and time_to_accuracy.json;
each inference result (one per backend) is latency/<backend>.json beside its
per-item latency/<backend>.parquet (``dawnpipe.runfiles.latency_files``). The
JSON follows the shape of ``dawnpipe.leaderboard.build`` (rows: dawnpipe.report.rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_csv, write_json, write_parquet, write_text
from dawnpipe.report.board import add_mlperf_arguments, merge, score_mlperf
from dawnpipe.report.frameworks import framework_comparison
from dawnpipe.report.render import render_html
from dawnpipe.report.runs import load_run
from dawnpipe.runfiles import files_under, read_run_file, run_dirs
from dawnpipe.runinfo import now_iso


def runs_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    records = []
    for r in runs:
        tta, info = r["tta"], r["run"]
        lat = r["latency"] or dict.fromkeys(
            ("backend", "threads", "accuracy", "latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "cost_per_10k_usd")
        )
        gen = r.get("generalization") or dict.fromkeys(("test", "held_out", "gap", "new_test", "new_test_gap"))
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
                "test_metric_at_check": gen["test"],  # held-out split only: at the threshold checkpoint (else the last epoch)
                "held_out_metric": gen["held_out"],
                "generalization_gap": gen["gap"],
                "new_test_metric": gen["new_test"],  # the task's new test set (CIFAR-10.1 for CIFAR-10), same checkpoint
                "new_test_gap": gen["new_test_gap"],
                "config_hash": info["config_hash"],
                "git_commit": info["environment"]["git"]["commit"],
                "cpu_model": info["environment"]["cpu_model"],
                "threads": info["environment"]["threads"],
                "finished": info["finished"],
            }
        )
    return pd.DataFrame(records)


def study_links(paths: list[Path], html: Path) -> list[dict[str, Any]]:
    """What the page says of each study: its name, claim, base, top rung, the
    fastest variant there, and a link to its page (relative to the leaderboard's)."""
    import os

    from dawnpipe.fileio import read_json

    links = []
    for path in paths:
        doc = read_json(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("variants"), list) or not doc.get("ladder"):
            raise DawnpipeError(f"{path}: not a study result (no 'variants' or 'ladder'); written by 'dawnpipe study summarize'?")
        top = str(doc["ladder"][-1])
        ranked = [v for v in doc["variants"][1:] if (v.get("speedup") or {}).get(top)]
        best = max(ranked, key=lambda v: v["speedup"][top], default=None)
        links.append(
            {
                "study": doc.get("study", path.stem),
                "claim": doc.get("claim", ""),
                "base": doc.get("base", ""),
                "variants": len(doc["variants"]),
                "top": top,
                "best": None if best is None else {"id": best["id"], "speedup": best["speedup"][top]},
                # how many of its checks each verdict (dawnpipe.studies.checks); empty for a study without checks
                "verdicts": {
                    k: n for k in ("reproduced", "not reproduced", "inconclusive") if (n := sum(v.get("verdict") == k for v in doc.get("verdicts") or ()))
                },
                "href": os.path.relpath(path.with_suffix(".html"), html.parent),
            }
        )
    return links


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
    add_mlperf_arguments(p)
    p.add_argument(
        "--studies",
        nargs="*",
        default=[],
        type=Path,
        metavar="JSON",
        help="study results (results/studies/<name>.json) linked from the page, each beside its .html",
    )
    from dawnpipe.audit.rules import add_arguments

    add_arguments(p)  # --max-bytes, --rules (config: audit_rules): how the submissions are audited
    p.add_argument("--json", required=True, type=Path, help="output: leaderboard JSON")
    p.add_argument("--html", required=True, type=Path, help="output: self-contained leaderboard HTML")
    p.add_argument("--table", required=True, type=Path, help="output: all runs (Parquet)")
    p.add_argument("--csv", required=True, type=Path, help="output: all runs (CSV)")


def run(args) -> int:
    runs = [load_run(d) for d in run_dirs(args.runs)]
    stability = [read_run_file(p, "stability") for p in files_under(args.stability, "*.json")]
    report = _audit(args.submissions, args)
    board = merge(runs, report, score_mlperf(args))
    board["generated"] = now_iso()
    board["config"] = args.config_name
    board["frameworks"] = framework_comparison(runs)
    table = runs_table(runs)
    html = render_html(board, runs, stability, config_name=args.config_name, audit=report, studies=study_links(args.studies, args.html))
    write_parquet(args.table, table)
    write_csv(args.csv, table)
    write_json(args.json, board)
    write_text(args.html, html)
    filled = sum(1 for t in board["objectives"] if t["rows"])
    print(
        terminal_safe(
            f"report: {len(runs)} runs, {len(report.submissions) if report else 0} submissions, {filled} non-empty objective tables, "
            f"{len(board['excluded'])} exclusions -> {args.html}"
        )
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
    from dawnpipe.audit.core import audit

    return audit([str(d) for d in dirs], rules)
