"""One board from our runs and the audit of submission directories, and the
``leaderboard`` command that makes it without running the pipeline:

    python -m dawnpipe leaderboard --submissions ../shared/dawnbench-entries [DIR ...] \\
        [--mlperf ../shared/mlperf-results [DIR ...]] [--runs results] --json leaderboard.json [--html leaderboard.html]

MLPerf Training results (--mlperf) are scored as ``dawnpipe mlperf score``
scores them and ranked in one table per benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dawnpipe import leaderboard
from dawnpipe.audit.rows import shown_as_runs, submission_rows
from dawnpipe.display import terminal_safe
from dawnpipe.report.rows import objective_rows


def merge(runs: list[dict[str, Any]], report, mlperf=()) -> dict[str, Any]:
    """The board of our runs' rows and, where there are any, an audit of
    submission directories and scored MLPerf results."""
    from dawnpipe.mlperf.rows import board_rows

    rows, excluded = objective_rows(runs)
    if report is not None:
        sub_rows, sub_excluded = submission_rows(report, shown_as_runs(report, runs))
        rows, excluded = [*rows, *sub_rows], [*excluded, *sub_excluded]
    ml_rows, ml_excluded = board_rows(mlperf)
    board = leaderboard.build([*rows, *ml_rows], [*excluded, *ml_excluded])
    if report is not None:
        board["audit"] = report.counts()
    if mlperf:
        board["mlperf"] = [r.as_dict() for r in mlperf]
    return board


def add_mlperf_arguments(p) -> None:
    p.add_argument("--mlperf", nargs="*", default=[], type=Path, metavar="DIR", help="MLPerf Training result folders to score and rank (config: mlperf_dirs)")
    p.add_argument("--mlperf-ruleset", default="4.0.0", metavar="X.Y.Z", help="their MLPerf Training ruleset (config: mlperf_ruleset)")


def score_mlperf(args) -> list:
    if not args.mlperf:
        return []
    from dawnpipe.mlperf.score import score_paths

    return score_paths(args.mlperf, args.mlperf_ruleset)


def configure(p) -> None:
    p.add_argument(
        "--submissions", nargs="+", default=[], type=Path, metavar="DIR", help="directories laid out like the DAWNBench entries repository (audited first)"
    )
    add_mlperf_arguments(p)
    p.add_argument(
        "--runs", nargs="+", default=[], type=Path, metavar="RESULTS_DIR", help="our own runs: a results directory, results/runs, or run directories"
    )
    p.add_argument("--json", required=True, type=Path, metavar="OUT", help="output: leaderboard JSON")
    p.add_argument("--html", type=Path, metavar="OUT", help="output: self-contained leaderboard HTML")
    from dawnpipe.audit.rules import add_arguments

    add_arguments(p)


def run(args) -> int:
    """``dawnpipe leaderboard``: exit 0 when the board is written, whatever the
    audit found (excluded submissions are listed with the reason)."""
    from dawnpipe.audit.core import audit
    from dawnpipe.audit.rules import rules_from_args
    from dawnpipe.errors import UsageError
    from dawnpipe.fileio import write_json, write_text
    from dawnpipe.report.runs import load_run
    from dawnpipe.runfiles import run_dirs
    from dawnpipe.runinfo import now_iso

    rules = rules_from_args(args)
    if not (args.submissions or args.mlperf or args.runs):
        raise UsageError("nothing to rank: give --submissions, --mlperf or --runs")
    for d in args.submissions:
        if not d.is_dir():
            raise UsageError(f"{d}: {'not a directory' if d.exists() else 'no such directory'}")
    runs = [load_run(d) for d in run_dirs(args.runs)] if args.runs else []
    report = audit([str(d) for d in args.submissions], rules) if args.submissions else None
    mlperf = score_mlperf(args)
    board = merge(runs, report, mlperf)
    board["generated"] = now_iso()
    board["config"] = ""
    write_json(args.json, board)
    if args.html:
        from dawnpipe.report.render import render_html

        name = "submissions: " + ", ".join(map(str, [*args.submissions, *args.mlperf]))
        write_text(args.html, render_html(board, runs, [], config_name=name, audit=report))
    ranked = sum(len(t["rows"]) for t in board["objectives"])
    c = report.counts() if report else {"error": 0}
    print(
        terminal_safe(
            f"leaderboard: {ranked} ranked rows from {len(runs)} runs, {len(report.submissions) if report else 0} submissions "
            f"({c['error']} files with audit errors) and {len(mlperf)} MLPerf results, {len(board['excluded'])} excluded -> {args.json}"
            + (f", {args.html}" if args.html else "")
        )
    )
    return 0
