"""One board from our runs and the audit of submission directories, and the
``leaderboard`` command that makes it without running the pipeline:

    python -m dawnpipe leaderboard --submissions ../shared/dawnbench-entries [DIR ...] \\
        [--runs results] --json leaderboard.json [--html leaderboard.html]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dawnpipe import leaderboard
from dawnpipe.audit.rows import shown_as_runs, submission_rows
from dawnpipe.report.rows import objective_rows


def merge(runs: list[dict[str, Any]], report) -> dict[str, Any]:
    """The board of our runs' rows and, where there is one, an audit of submission directories."""
    run_rows, run_excluded = objective_rows(runs)
    if report is None:
        return leaderboard.build(run_rows, run_excluded)
    rows, excluded = submission_rows(report, shown_as_runs(report, runs))
    board = leaderboard.build([*run_rows, *rows], [*run_excluded, *excluded])
    board["audit"] = report.counts()
    return board


def configure(p) -> None:
    p.add_argument(
        "--submissions", nargs="+", required=True, type=Path, metavar="DIR", help="directories laid out like the DAWNBench entries repository (audited first)"
    )
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
    from dawnpipe.audit.cli import without_hypothesis_strategies
    from dawnpipe.audit.core import audit
    from dawnpipe.audit.rules import rules_from_args
    from dawnpipe.errors import UsageError
    from dawnpipe.fileio import write_json, write_text
    from dawnpipe.report.runs import load_run
    from dawnpipe.runfiles import run_dirs
    from dawnpipe.runinfo import now_iso

    rules = rules_from_args(args)
    for d in args.submissions:
        if not d.is_dir():
            raise UsageError(f"{d}: {'not a directory' if d.exists() else 'no such directory'}")
    without_hypothesis_strategies()
    runs = [load_run(d) for d in run_dirs(args.runs)] if args.runs else []
    report = audit([str(d) for d in args.submissions], rules)
    board = merge(runs, report)
    board["generated"] = now_iso()
    board["config"] = ""
    write_json(args.json, board)
    if args.html:
        from dawnpipe.report.render import render_html

        write_text(args.html, render_html(board, runs, [], config_name="submissions: " + ", ".join(map(str, args.submissions)), audit=report))
    ranked = sum(len(t["rows"]) for t in board["objectives"])
    c = report.counts()
    print(
        f"leaderboard: {ranked} ranked rows from {len(runs)} runs and {len(report.submissions)} submissions "
        f"({c['error']} files with audit errors), {len(board['excluded'])} excluded -> {args.json}" + (f", {args.html}" if args.html else "")
    )
    return 0
