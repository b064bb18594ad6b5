"""Leaderboard rows of audited DAWNBench v1 submissions (dawnpipe.audit).

Only what the audit recomputed is ranked, per objectives.yaml's
``submission`` figure: the time from the TSV, the cost from it and
``costPerHour``; never a figure the submitter merely claims. A submission
with an error anywhere, or one that does not reach the task's official
threshold, is excluded with the reason.
"""

from __future__ import annotations

from typing import Any

from dawnpipe.display import format_value
from dawnpipe.objectives import of_result


def submission_rows(report, skip: frozenset[int] = frozenset()) -> tuple[list[dict], list[dict]]:
    """Rows and exclusions of the submissions of ``report``; ``skip``: ids of
    submissions shown through our own runs instead (``shown_as_runs``)."""
    rows, excluded = [], []
    for sub in report.submissions:
        if id(sub) in skip:
            continue
        objectives = [o for o in of_result(sub.kind) if o.submission]
        names = [o.name for o in objectives]
        if not sub.valid:
            reasons = sub.errors() or [f"{sub.source}: incomplete submission"]
            reason = "audit error: " + "; ".join(reasons[:3]) + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
            excluded.append({"source": sub.source, "objectives": names, "audit_anchor": sub.anchor, "reason": reason})
            continue
        if sub.notes:
            excluded.append({"source": sub.source, "objectives": names, "audit_anchor": sub.anchor, "reason": sub.notes[0]})
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
        if sub.kind == "inference":
            common["accuracy"] = fig.get("accuracy")
        mine = [
            {**common, **{name: fig.get(key) for name, key in o.submission_fields.items()}, "objective": o.name, "value": fig.get(o.submission)}
            for o in objectives
            # a train submission's time is always recomputed (a None would be a bug of the audit: excluded below, not hidden)
            if fig.get(o.submission) is not None or (sub.kind == "train" and o.name == names[0])
        ]
        shown = [r for r in mine if displayable(r, next(o for o in objectives if o.name == r["objective"]).unit)]
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


def displayable(row: dict[str, Any], unit: str) -> bool:
    try:
        format_value(row["value"], unit)
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
