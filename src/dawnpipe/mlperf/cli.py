"""mlperf score: MLPerf Training results scored and checked as MLCommons' tools do.

    python -m dawnpipe mlperf score ../shared/mlperf-results/Dell [more paths] \\
        [--ruleset 4.0.0] [--json OUT.json] [--parquet OUT.parquet] [--max-bytes N]

PATH is a submitter folder, its results/ folder, a system folder or one
benchmark folder (``<submitter>/results/<system>/<benchmark>/result_*.txt``).
For every (system, benchmark), on the terminal and in the JSON: each run's
minutes, run_stop status and compliance verdict (the checker's messages above
the table for the runs it drops), the official score or why there is none,
the scaling factor, the runs against the number required, and the
convergence (RCP) check. Exit code 0 when no result has an error, 1 when some
do, 2 for a usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import UsageError


def configure(p) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    score = sub.add_parser("score", help="score and check MLPerf Training result folders", description=__doc__.split("\n\n")[0])
    score.add_argument("paths", nargs="+", metavar="PATH", help="submitter, results, system or benchmark folders")
    score.add_argument("--ruleset", default=None, metavar="X.Y.Z", help="MLPerf Training ruleset (default 4.0.0)")
    score.add_argument("--json", type=Path, metavar="FILE", help="also write every result, run and message as JSON")
    score.add_argument("--parquet", type=Path, metavar="FILE", help="also write one row per run as Parquet")
    score.add_argument("--max-bytes", type=int, metavar="N", help="size cap of one result file (default 32 MiB)")


def terminal(results) -> str:
    lines = []
    for r in results:
        where = f"{r.submitter}/{r.system}/{r.benchmark}"
        for m in r.errors:
            lines.append(f"{where}: error: {m}")
        for m in r.warnings:
            lines.append(f"{where}: warning: {m}")
        for run in r.runs:
            for m in run.messages if not run.compliant else []:
                lines.append(f"{where}/{run.file}: {m.splitlines()[0] if m else m}")
    if lines:
        lines.append("")
    lines.append(f"{'status':<8} {'submitter/system/benchmark':<48} {'score (min)':>12} {'runs ok':>8} {'scaling':>8}  RCP")
    for r in results:
        score = f"{r.score_minutes:.3f}" if r.score_minutes is not None else "none"
        ok = f"{sum(run.compliant for run in r.runs)}/{len(r.runs)}"
        need = f" of {r.runs_required}" if r.runs_required and len(r.runs) < r.runs_required else ""
        lines.append(
            f"{r.status:<8} {r.submitter + '/' + r.system + '/' + r.benchmark:<48} {score:>12} {ok + need:>8} {r.scaling_factor:>8.4f}  {r.rcp.get('verdict', '-')}"
        )
        lines += [run_line(run) for run in r.runs]
    errors = sum(r.status == "error" for r in results)
    lines.append("")
    lines.append(f"mlperf score: {len(results)} results: {len(results) - errors} scored cleanly, {errors} with errors")
    return "\n".join(terminal_safe(line) for line in lines) + "\n"


def run_line(run) -> str:
    """One run under its result's row: minutes, run_stop status, the two verdicts."""
    minutes = f"{run.minutes:.3f} min" if run.minutes is not None else "none"
    verdicts = f"{'compliant' if run.compliant else 'dropped'}, {'converged' if run.converged else 'not converged'}"
    return f"{'':<9}{run.file:<30} {minutes:>14}  {run.status or ('no run_stop' if run.read else 'not read'):<11} {verdicts}"


def as_json(results, ruleset: str) -> dict[str, Any]:
    from dawnpipe.runinfo import now_iso

    return {"generated": now_iso(), "tool": "dawnpipe mlperf score", "ruleset": ruleset, "results": [r.as_dict() for r in results]}


def run_table(results):
    import pandas as pd

    rows = [
        {
            "submitter": r.submitter,
            "system": r.system,
            "benchmark": r.benchmark,
            "score_minutes": r.score_minutes,
            "file": run.file,
            "minutes": run.minutes,
            "status": run.status,
            "compliant": run.compliant,
            "converged": run.converged,
            "messages": "\n".join(run.messages),
        }
        for r in results
        for run in r.runs
    ]
    return pd.DataFrame(rows, columns=["submitter", "system", "benchmark", "score_minutes", "file", "minutes", "status", "compliant", "converged", "messages"])


def run(args) -> int:
    from dawnpipe.fileio import write_json, write_parquet
    from dawnpipe.mlperf.score import DEFAULT_RULESET, MAX_LOG_BYTES, score_paths

    if args.max_bytes is not None and args.max_bytes < 1:
        raise UsageError(f"--max-bytes must be a positive number of bytes, got {args.max_bytes}")
    ruleset = args.ruleset or DEFAULT_RULESET
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    results = score_paths(args.paths, ruleset, args.max_bytes or MAX_LOG_BYTES)
    sys.stdout.write(terminal(results))
    if args.json:
        write_json(args.json, as_json(results, ruleset))
    if args.parquet:
        write_parquet(args.parquet, run_table(results))
    return 1 if any(r.status == "error" for r in results) else 0
