"""Render the leaderboard page from ``templates/leaderboard.html.j2``.

Jinja2 autoescaping is on for the whole template: author names, model names
and messages from submissions are data, never markup.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from dawnpipe.display import format_hours, format_ms, format_usd
from dawnpipe.mlperf.rows import PREFIX as MLPERF_PREFIX
from dawnpipe.mlperf.rows import task_view
from dawnpipe.report import telemetry_sections
from dawnpipe.report.charts import line_chart, time_axis, with_scripts
from dawnpipe.report.latency_views import latency_against_training, latency_distribution
from dawnpipe.report.scaling import wants_section as wants_scaling
from dawnpipe.tasks import all_tasks, leaderboard_order


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dawnpipe.report", "templates"),
        autoescape=True,  # every template, whatever its file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(hours=format_hours, usd=format_usd, ms=format_ms, by_batch_size=by_batch_size, anchor=anchor)
    env.globals.update(
        latency_distribution=latency_distribution,
        latency_against_training=latency_against_training,
        source_cell=source_cell,
        tie_text=tie_text,
        table_anchor=table_anchor,
        page_script=page_script(),
        max_distribution_figures=MAX_DISTRIBUTION_FIGURES,
    )
    return env


# Above this many inference results in a task, the per-result latency
# histograms are left out of the page (a page of 1,000 runs must open within
# two seconds: tests/test_page_browser.py); the scatter keeps every result.
MAX_DISTRIBUTION_FIGURES = 60


def anchor(text: Any) -> str:
    """An HTML id from any text (an entry id may hold '+' and '='): letters, digits, '_', '.', '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))


def table_anchor(table: dict[str, Any]) -> str:
    return anchor(f"{table['task']}-{table['objective']}-{table['threshold']}")


def source_cell(row: dict[str, Any]) -> Markup:
    """A ranked row's source, linked: to its audit messages (a submission), to
    each of its seeds' runs (an entry of ours over its seeds), or to its run."""
    if row.get("seed_sources"):
        links = Markup(", ").join(Markup('<a href="#run-{}">{}</a>').format(anchor(f"{row['entry']}-{seed}"), seed) for seed in row["seeds"])
        return Markup("{} (seed{} {})").format(row["source"], "s" if len(row["seeds"]) != 1 else "", links)
    if row.get("audit_anchor") is not None:
        return Markup('<a href="#{}">{}</a>').format(anchor(row["audit_anchor"]), row["source"])
    if row.get("entry") is not None and row.get("seed") is not None:
        return Markup('<a href="#run-{}">{}</a>').format(anchor(f"{row['entry']}-{row['seed']}"), row["source"])
    return Markup("{}").format(row.get("source", ""))


@functools.cache
def page_script() -> Markup:
    """The page's own script (static/page.js: sorting and filtering), embedded so the page needs no network."""
    text = resources.files("dawnpipe.report").joinpath("static/page.js").read_text(encoding="utf-8")
    if "</" in text:
        raise AssertionError("static/page.js must not contain '</' (it is embedded in a <script> element)")
    return Markup(text)


def task_groups(tasks: dict[str, Any], tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task in page order: its tables with ranked rows and those without."""
    groups = []
    for name, task in tasks.items():
        mine = [t for t in tables if t["task"] == name]
        if mine:
            groups.append({"name": name, "task": task, "ranked": [t for t in mine if t["rows"]], "empty": [t for t in mine if not t["rows"]]})
    return groups


def best_per_table(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's opening summary: the first row of every ranked table, task
    by task, and how many others share its rank 1 (the rule cannot order them)."""
    return [
        {
            "task_name": g["name"],
            "task_title": g["task"].title,
            "table": t,
            "best": t["rows"][0],
            "tied_first": sum(1 for r in t["rows"][1:] if r["rank"] == 1),
            "anchor": table_anchor(t),
        }
        for g in groups
        for t in g["ranked"]
    ]


def tie_text(row: dict[str, Any]) -> str:
    """A row the rule cannot tell apart from the row above: with how many seeds each ran."""
    tie = row.get("tied_with_above")
    if not tie:
        return ""

    def runs(n):
        return "1 published run" if n is None else f"{n} seed{'s' if n != 1 else ''}"

    return f"tied with the row above ({runs(tie['own_seeds'])} against {runs(tie['seeds'])})"


def by_batch_size(per_size: dict[str, Any]) -> list[tuple[str, Any]]:
    """(batch size, value) pairs of a ``{"1": .., "8": ..}`` mapping, smallest batch first."""
    return sorted(per_size.items(), key=lambda kv: int(kv[0]))


def curves_by_task(runs: list[dict[str, Any]]) -> dict[str, Any]:
    tasks = all_tasks()
    charts = {}
    for name in sorted({r["run"]["task"] for r in runs}):
        task = tasks[name]
        mine = [r for r in runs if r["run"]["task"] == name]
        label, factor = time_axis(max(float(r["log"]["hours"].max()) for r in mine))
        series = [
            (f"{r['run']['entry']} seed {r['run']['seed']}", (r["log"]["hours"] * factor).tolist(), r["log"][task.metric_column].tolist(), r["run"]["entry"])
            for r in mine
        ]
        thresholds = sorted({r["run"]["threshold"] for r in mine})
        demo = " (demo threshold)" if any(r["run"]["demo_threshold"] for r in mine) else ""
        charts[name] = line_chart(
            series,
            x_label=label,
            y_label=task.metric_label,
            hline=thresholds[0] if len(thresholds) == 1 else None,
            hline_label=f"threshold {thresholds[0]:g}{demo}" if len(thresholds) == 1 else "",
            title=f"{task.title}: accuracy against training time{demo}",
        )
    return charts


# Sections after the objective tables, in page order: (template, predicate
# deciding whether the page has anything to show in it). A new analysis adds
# its template under templates/sections/ and one line here; the context is
# the same for all (board, runs, stability, ...).
SECTIONS = [
    ("sections/studies.html.j2", lambda ctx: bool(ctx["studies"])),
    ("sections/programs.html.j2", lambda ctx: any("program" in r["run"] for r in ctx["runs"])),
    ("sections/excluded.html.j2", lambda ctx: bool(ctx["board"]["excluded"])),
    ("sections/audit.html.j2", lambda ctx: ctx["audit"] is not None),
    ("sections/stability.html.j2", lambda ctx: bool(ctx["stability"])),
    ("sections/scaling.html.j2", wants_scaling),  # fills ctx["scaling"]
    ("sections/utilization.html.j2", lambda ctx: bool(ctx["energy"])),
    ("sections/sensitivity.html.j2", lambda ctx: bool(ctx["sensitivity"])),
    ("sections/frameworks.html.j2", lambda ctx: bool(ctx["board"].get("frameworks"))),
    ("sections/generalization.html.j2", lambda ctx: any(r.get("generalization") for r in ctx["runs"])),
    ("sections/inference.html.j2", lambda ctx: any(r.get("latencies") for r in ctx["runs"])),
    ("sections/runs.html.j2", lambda ctx: bool(ctx["runs"])),
]


def render_html(board: dict[str, Any], runs: list[dict[str, Any]], stability: list[dict[str, Any]], *, config_name: str, audit=None, studies=()) -> str:
    """``audit``: a ``dawnpipe.audit`` report of the submissions merged into ``board`` (None: no submissions);
    ``studies``: the studies linked from the page (dawnpipe.report.build.study_links)."""
    # Every task's four official tables, empty or not (the twelve DAWNBench
    # tables plus Fashion-MNIST); demo-threshold tables only when they have rows.
    tasks: dict[str, Any] = {name: all_tasks()[name] for name in leaderboard_order()}
    tables = [t for t in board["objectives"] if not t["demo_threshold"] or t["rows"]]
    for t in tables:  # MLPerf benchmarks: tables of their own, after the tasks
        if t["task"].startswith(MLPERF_PREFIX):
            tasks.setdefault(t["task"], task_view(t["task"]))
    ctx: dict[str, Any] = dict(
        board=board,
        tables=tables,
        tasks=tasks,
        runs=runs,
        stability=stability,
        studies=list(studies),
        audit=None if audit is None else audit_view(audit),
        curves=curves_by_task(runs),
        config_name=config_name,
        machine=runs[0]["run"]["environment"] if runs else {},
        demo=any(t["demo_threshold"] for t in tables if t["rows"]) or any(r["run"]["demo_threshold"] for r in runs),
    )
    ctx["task_groups"] = task_groups(tasks, tables)
    ctx["summary"] = best_per_table(ctx["task_groups"])
    ctx.update(telemetry_sections.context(runs))
    ctx["sections"] = [{"template": name} for name, wanted in SECTIONS if wanted(ctx)]
    # plotly.js and the script drawing the charts, once, when the page has a chart
    return with_scripts(_env().get_template("leaderboard.html.j2").render(**ctx))


def audit_view(report) -> dict[str, Any]:
    """The audit as the page shows it: one group per submission (its JSON and
    TSV with their messages), anchored so leaderboard rows can link to it."""
    from dawnpipe.audit.output import figure_note

    groups = []
    for sub in report.submissions:
        meta = sub.meta or {}
        groups.append(
            {
                "anchor": sub.anchor,
                "source": sub.source,
                "status": sub.status,
                "task": sub.task.title,
                "author": meta.get("author"),
                "model": meta.get("model"),
                "hardware": meta.get("hardware"),
                "ranked": sub.valid and not sub.notes,
                "files": [
                    {"source": f.source, "status": f.status, "figure": figure_note(sub, f), "messages": [m.as_dict() for m in f.messages]} for f in sub.files
                ],
            }
        )
    owned = {id(f) for sub in report.submissions for f in sub.files}
    others = [{"source": f.source, "status": f.status, "messages": [m.as_dict() for m in f.messages]} for f in report.files if id(f) not in owned]
    return {"counts": report.counts(), "skipped": report.skipped, "groups": groups, "others": others}
