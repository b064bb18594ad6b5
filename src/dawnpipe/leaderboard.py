"""The leaderboard: every task's four objective tables (SPEC.md section 2).

Rows come from our own runs and from audited submissions alike, as plain
dicts with ``task, objective, value`` and the descriptive fields. Rows are
ordered by the unrounded value (best first) and ranked; equal values share a
rank. Results measured against a different threshold than the table's (a demo
threshold) go into a table of their own, never mixed with official ones.

Also the ``leaderboard`` command, which audits submission directories and
ranks them with our runs:

    python -m dawnpipe leaderboard --submissions ../shared/dawnbench-entries [DIR ...] \
        [--runs results] --json leaderboard.json [--html leaderboard.html]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dawnpipe.display import format_value
from dawnpipe.tasks import all_tasks, leaderboard_order

OBJECTIVES = {
    "train_time": {"unit": "hours", "title": "Training time", "what": "time to reach the threshold"},
    "train_cost": {"unit": "USD", "title": "Training cost", "what": "training hours x price per hour"},
    "inference_latency": {"unit": "ms", "title": "Inference latency", "what": "mean ms per item, one item at a time"},
    "inference_cost": {"unit": "USD per 10,000 items", "title": "Inference cost", "what": "cost of answering 10,000 items"},
    # The metric DAWNBench planned but never shipped: only where a meter measured it (NVML, RAPL), so
    # its tables exist only when they have rows ("optional").
    "train_energy": {"unit": "J", "title": "Energy to accuracy", "what": "joules of the training time to the threshold", "optional": True},
}

ROW_FIELDS = ("model", "hardware", "framework", "timestamp", "source")


def task_order() -> list[str]:
    return leaderboard_order()


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: (r["value"], r.get("source", "")))
    ranked, prev_value, prev_rank = [], None, 0
    for i, row in enumerate(ordered, start=1):
        r = prev_rank if row["value"] == prev_value else i
        ranked.append({"rank": r, **row})
        prev_value, prev_rank = row["value"], r
    return ranked


def build(results: Iterable[dict[str, Any]], excluded: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """``results``: dicts with task, objective, threshold, demo_threshold, value and ROW_FIELDS (+ extras)."""
    tasks = all_tasks()
    groups: dict[tuple, list[dict]] = {}
    for res in results:
        key = (res["task"], res["objective"], float(res["threshold"]), bool(res.get("demo_threshold", False)))
        row = {k: v for k, v in res.items() if k not in ("task", "objective", "threshold", "demo_threshold")}
        row["unit"] = OBJECTIVES[res["objective"]]["unit"]
        row["display"] = format_value(row["value"], row["unit"])
        groups.setdefault(key, []).append(row)
    # every task's official tables exist, empty or not
    for name in task_order():
        for objective in (o for o, spec in OBJECTIVES.items() if not spec.get("optional")):
            groups.setdefault((name, objective, tasks[name].threshold, False), [])
    order = {name: i for i, name in enumerate(task_order())}
    objective_order = {name: i for i, name in enumerate(OBJECTIVES)}
    tables = []
    for task, objective, threshold, demo in sorted(groups, key=lambda k: (order.get(k[0], 99), k[3], -k[2], objective_order[k[1]])):
        tables.append(
            {
                "task": task,
                "objective": objective,
                "threshold": threshold,
                "demo_threshold": demo,
                "official_threshold": tasks[task].threshold if task in tasks else None,
                "rows": rank(groups[(task, objective, threshold, demo)]),
            }
        )
    return {"objectives": tables, "excluded": sorted(excluded, key=lambda e: e["source"])}


# ------------------------------------------------------------ audited submissions
SUBMISSION_OBJECTIVES = {"train": ["train_time", "train_cost"], "inference": ["inference_latency", "inference_cost"]}


def submission_rows(report, skip: frozenset[int] = frozenset()) -> tuple[list[dict], list[dict]]:
    """Leaderboard rows and exclusions of audited submissions (``dawnpipe.audit``).

    Only what the audit recomputed is ranked: the time from the TSV, the cost
    from it and ``costPerHour``; never a figure the submitter merely claims.
    A submission with an error anywhere, or one that does not reach the
    task's official threshold, is excluded with the reason. ``skip``: ids of
    submissions shown through our own runs instead (see ``merge``)."""
    rows, excluded = [], []
    for sub in report.submissions:
        if id(sub) in skip:
            continue
        objectives = SUBMISSION_OBJECTIVES[sub.kind]
        if not sub.valid:
            reasons = sub.errors() or [f"{sub.source}: incomplete submission"]
            excluded.append(
                {
                    "source": sub.source,
                    "objectives": objectives,
                    "audit_anchor": sub.anchor,
                    "reason": "audit error: " + "; ".join(reasons[:3]) + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""),
                }
            )
            continue
        if sub.notes:
            excluded.append({"source": sub.source, "objectives": objectives, "audit_anchor": sub.anchor, "reason": sub.notes[0]})
            continue
        meta, fig = sub.meta, sub.figures
        common = {
            "task": sub.task.name,
            "threshold": sub.task.threshold,
            "demo_threshold": False,
            "model": meta["model"],
            "hardware": meta["hardware"],
            "framework": meta["framework"],
            "timestamp": meta["timestamp"],
            "source": sub.source,
            "author": meta["author"],
            "audit_anchor": sub.anchor,
        }
        mine = []
        if sub.kind == "train":
            mine.append({**common, "objective": "train_time", "value": fig.get("hours_to_threshold"), "epochs": fig.get("epochs_to_threshold")})
            if fig.get("cost_usd") is not None:
                mine.append({**common, "objective": "train_cost", "value": fig["cost_usd"]})
        else:
            if fig.get("latency_ms") is not None:
                mine.append({**common, "objective": "inference_latency", "value": fig["latency_ms"], "accuracy": fig["accuracy"]})
            if fig.get("cost_per_10k_usd") is not None:
                mine.append({**common, "objective": "inference_cost", "value": fig["cost_per_10k_usd"], "accuracy": fig["accuracy"]})
        shown = [r for r in mine if _displayable(r)]
        rows += shown
        if len(shown) < len(mine):  # the audit's caps should make this impossible; one bad value must not break the board
            excluded.append(
                {
                    "source": sub.source,
                    "objectives": [r["objective"] for r in mine if r not in shown],
                    "audit_anchor": sub.anchor,
                    "reason": "a recomputed value that cannot be displayed",
                }
            )
    return rows, excluded


def _displayable(row: dict[str, Any]) -> bool:
    try:
        format_value(row["value"], OBJECTIVES[row["objective"]]["unit"])
    except (ValueError, TypeError, ArithmeticError):
        return False
    return True


def shown_as_runs(report, runs: list[dict[str, Any]]) -> frozenset[int]:
    """Submissions that are our own export of a run also given as a run.

    Decision: our runs and the export of the same runs are the same results,
    so each is ranked once, from the run (which carries the demo-threshold
    label, the wall clock and the latency percentiles). A submission counts as
    the export of a run when its ``misc.dawnpipe.source`` names the run *and*
    its content is the run's: the same per-epoch TSV (training), or the same
    backend, threads and mean latency (inference). A submission that names a
    run but differs from it is not that run: it is ranked on its own, with a
    warning in its audit."""
    from dawnpipe.audit.files import Unreadable
    from dawnpipe.audit.model import FileAudit
    from dawnpipe.audit.rules import lookup
    from dawnpipe.audit.tsvlog import parse_tsv

    by_source = {f"runs/{r['run']['entry']}/seed{r['run']['seed']}": r for r in runs}
    logs: dict[str, Any] = {}
    skip = set()
    for sub in report.submissions:
        claimed = lookup(sub.doc, "misc.dawnpipe.source") if sub.doc else None
        if not isinstance(claimed, str) or claimed not in by_source:
            continue
        run = by_source[claimed]
        if sub.kind == "train":
            if claimed not in logs:
                scratch = FileAudit(str(run["dir"] / "train.tsv"), "", "train-tsv", fs_path=str(run["dir"] / "train.tsv"))
                try:
                    text = (run["dir"] / "train.tsv").read_text(encoding="utf-8")
                    logs[claimed] = parse_tsv(text, scratch, sub.task, 5)
                except (OSError, UnicodeDecodeError, Unreadable):
                    logs[claimed] = None
            same = sub.log is not None and logs[claimed] is not None and sub.log.columns == logs[claimed].columns
        else:
            latency, backend = sub.meta.get("latency"), lookup(sub.doc, "misc.dawnpipe.backend")
            threads = lookup(sub.doc, "misc.dawnpipe.threads")
            same = any(
                lat.get("backend") == backend and lat.get("threads") == threads and lat.get("latency_mean_ms") == latency
                for lat in run.get("latencies", [run.get("latency", {})])
            )
        target = sub.json or sub.tsv
        if same:
            skip.add(id(sub))
            target.add(
                "info",
                "submission.same-as-run",
                "field misc.dawnpipe.source",
                f"the export of {claimed}, which is also given as a run: ranked once, from the run",
            )
        else:
            target.add(
                "warning",
                "submission.differs-from-run",
                "field misc.dawnpipe.source",
                f"names {claimed}, which is also given as a run, but its {'log' if sub.kind == 'train' else 'latency result'} "
                "differs: ranked as a submission of its own",
            )
    return frozenset(skip)


def merge(run_rows: list[dict], run_excluded: list[dict], report, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One board from our runs' rows and an audit of submission directories."""
    if report is None:
        return build(run_rows, run_excluded)
    rows, excluded = submission_rows(report, shown_as_runs(report, runs))
    board = build([*run_rows, *rows], [*run_excluded, *excluded])
    board["audit"] = report.counts()
    return board


# ---------------------------------------------------------------- the command
def configure(p) -> None:
    from pathlib import Path

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
    from dawnpipe.audit.rules import rules_from_args
    from dawnpipe.errors import UsageError

    rules = rules_from_args(args)
    for d in args.submissions:
        if not d.is_dir():
            raise UsageError(f"{d}: {'not a directory' if d.exists() else 'no such directory'}")
    without_hypothesis_strategies()
    from dawnpipe.audit.core import audit
    from dawnpipe.fileio import write_json, write_text
    from dawnpipe.report.build import load_run, objective_rows
    from dawnpipe.runfiles import run_dirs
    from dawnpipe.runinfo import now_iso

    runs = [load_run(d) for d in run_dirs(args.runs)] if args.runs else []
    report = audit([str(d) for d in args.submissions], rules)
    run_rows, run_excluded = objective_rows(runs)
    board = merge(run_rows, run_excluded, report, runs)
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
