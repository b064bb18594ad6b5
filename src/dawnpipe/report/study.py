"""study: a study's variants, and its results as JSON and a page.

    python -m dawnpipe study variants config/studies/batch-size.yaml
    python -m dawnpipe study summarize --study config/studies/batch-size.yaml \\
        --runs results/runs --json results/studies/batch-size.json --html results/studies/batch-size.html

The summary reads each run's own per-epoch log (train.parquet, the training
clock) and run.json: time to accuracy at every rung of the study's ladder
(dawnpipe.metrics.tta, the extract stage's rule), the median over seeds with a seed
that did not reach a rung counted as infinitely slow (none when half or more
did not), the speed-up over the base (the base's median over the variant's;
null where either did not reach), the fraction of seeds reaching each rung,
the final accuracy and the training throughput; per variant also the
median training seconds per epoch and, where config/prices.yaml prices the
runs' hardware, the cost to accuracy (the median time x the price per hour x
the nodes; null where no price is known).

The page's own figure is picked by the study's ``figure:`` key, or else from
what it varies (``figure_kind``): ``scaling`` when a variant changes the
layout (``distributed``, ``threads``, ``device``, ``hardware``): the speed-up of
time per epoch against the speed-up of time to accuracy, and cost against
time; ``batch-size`` when three or more batch sizes are run: items/s and
time to accuracy against batch size; ``tricks`` for combination and lesion
designs: each variant's speed-up, those that did not reach marked.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError

HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dawnpipe study {{ s.study }}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:80em} table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.25em .5em}
td.num{text-align:right;font-variant-numeric:tabular-nums} .dnc{color:#a00} tr.reproduced td:last-child{color:#1a7f37} tr.not-reproduced td:last-child{color:#cf222e} tr.inconclusive td:last-child{color:#9a6700} .muted{color:#666} .empty{color:#888;font-style:italic}
div.chart{width:100%;max-width:760px;min-height:360px}</style></head><body>
<h1>Study {{ s.study }}</h1>
<p>{{ s.description }}</p>
{% if s.claim %}<p><strong>The paper's claim:</strong> {{ s.claim }}</p>{% endif %}
{% if s.get("verdicts") %}<h2 id="verdicts">Verdicts</h2>
<p class="muted">Each check of the study file, decided from the seeds below by one rule (docs/rules.md, "Verdicts over seeds"): for a time, epochs, seconds per epoch or cost the effect is the comparison's value over the variant's (above 1x: the variant's is lower), for an accuracy or a gap the variant's minus the comparison's; the estimate is the median of the pairwise effects of all their seeds and the interval the exact one of the Mann-Whitney statistic (90% or more); a seed that never reached a rung counts as infinitely slow. Reproduced: the whole interval beyond the claimed bound; not reproduced: none of it; inconclusive: the seeds' spread covers both, or there is no interval.</p>
<table id="verdict-table"><tr><th>Claim</th><th>Compared</th><th>Claimed</th><th>Estimate</th><th>Interval</th><th>Seeds</th><th>Verdict</th></tr>
{% for c in s.verdicts %}{% set cell = verdict_cells(c) %}<tr class="verdict {{ c.verdict | replace(" ", "-") }}"><td>{{ c.claim }}</td><td>{{ verdict_compared(c) }}</td><td>{{ verdict_claimed(c) }}</td>
<td class="num">{{ cell.estimate }}</td><td class="num">{{ cell.interval }}</td><td class="num">{{ cell.seeds }}</td><td><strong>{{ c.verdict }}</strong>{% if c.reason %}<br><span class="muted">{{ c.reason }}</span>{% endif %}</td></tr>
{% endfor %}</table>
{% elif "checks" in s %}<p class="muted">The study file states its claim in words only (no <code>checks:</code>): no verdict is computed.</p>{% endif %}
<p class="muted">Base entry <code>{{ s.base }}</code>, design {{ s.design }}, seeds {{ s.seeds | join(", ") }}{% if s.study_file_seeds %} (the configuration's study_seeds, in place of the study file's {{ s.study_file_seeds | join(", ") }}){% endif %}; runs {{ "continue to their whole budget" if s.continue_past_threshold else "stop at the threshold" }}.
Medians over seeds; a seed that did not reach a rung counts as infinitely slow (no median when half or more did not). Speed-up: the base's median over the variant's.</p>
<table><tr><th>Variant</th><th>Overrides</th>{% for t in s.ladder %}<th>Median to {{ t }}</th><th>Speed-up</th><th>Reached</th>{% endfor %}<th>Epochs to {{ s.ladder[-1] }}</th><th>CoV to {{ s.ladder[-1] }}</th><th>Final accuracy (median)</th>{% if held %}<th>Held-out (final, median)</th><th title="test minus held-out accuracy of each seed, median over the seeds">Gap (median of the seeds')</th>{% endif %}<th>Items/s</th><th>s/epoch</th><th>Cost to {{ s.ladder[-1] }}</th></tr>
{% for v in s.variants %}<tr><td><code>{{ v.id }}</code>{% if v.same_as %} <span class="muted">(same recipe as {{ v.same_as }}: run once)</span>{% endif %}</td>
<td>{% for k, val in v.overrides.items() %}<code>{{ k }}={{ val }}</code> {% endfor %}</td>
{% for t in s.ladder %}{% set key = t | string %}<td class="num">{% if v.median_time_to_accuracy_hours[key] is none %}<span class="dnc">did not reach</span>{% else %}{{ v.median_time_to_accuracy_hours[key] | hours }}{% endif %}</td>
<td class="num">{{ "%.2fx" | format(v.speedup[key]) if v.speedup[key] is not none else "-" }}</td><td class="num">{{ "%.0f%%" | format(100 * v.reached_fraction[key]) }}</td>{% endfor %}
<td class="num">{{ "%g" | format(v.median_epochs_to_accuracy) if v.median_epochs_to_accuracy is not none else "-" }}</td><td class="num">{{ "%.3f" | format(v.tta_cov) if v.tta_cov is not none else "-" }}</td>
<td class="num">{{ "%.2f" | format(v.final_accuracy) if v.final_accuracy is not none else "-" }}</td>{% if held %}<td class="num">{{ "%.2f" | format(v.final_held_out_accuracy) if v.final_held_out_accuracy is not none else "-" }}</td><td class="num">{{ "%+.2f" | format(v.generalization_gap) if v.generalization_gap is not none else "-" }}</td>{% endif %}<td class="num">{{ "%.0f" | format(v.items_per_second) if v.items_per_second is not none else "-" }}</td>
<td class="num">{{ "%.2f" | format(v.median_seconds_per_epoch) if v.median_seconds_per_epoch is not none else "-" }}</td>
<td class="num">{% set cost = v.median_cost_to_accuracy_usd[s.ladder[-1] | string] %}{% if cost is not none %}<span title="{{ cost }} USD">{{ cost | usd }}</span>{% else %}<span class="muted">{{ "no price" if v.usd_per_hour is none else "-" }}</span>{% endif %}</td></tr>
{% endfor %}</table>
<h2>Accuracy against training time</h2>
{{ chart }}
<h2>Training loss per epoch</h2>
{{ loss_chart }}
{% if figure %}<h2 id="figure">{{ figure_title }}</h2>
{{ figure }}{% endif %}
<p class="muted">Generated {{ s.generated }}{% if s.commit %} at commit <code>{{ s.commit }}</code>{% endif %}{% if s.machine %} on {{ s.machine }}{% endif %}.</p>
</body></html>
"""


def configure(p) -> None:
    from dawnpipe.argtypes import seed

    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    variants = sub.add_parser("variants", help="list a study's variants (ids, overrides, which run)")
    variants.add_argument("study", type=Path, help="a study file (config/studies/<name>.yaml)")
    variants.add_argument("--entries-dir", type=Path, default=Path("config/entries"), help="where the base entry is (default config/entries)")
    summarize = sub.add_parser("summarize", help="a study's results as JSON and a self-contained page")
    summarize.add_argument("--study", type=Path, required=True, help="the study file")
    summarize.add_argument("--entries-dir", type=Path, default=Path("config/entries"), help="where the base entry is (default config/entries)")
    summarize.add_argument("--runs", type=Path, default=Path("results/runs"), help="the runs directory (<entry>/seed<k>/)")
    summarize.add_argument(
        "--same-as", action="append", nargs=2, metavar=("VARIANT", "ENTRY"), help="a variant whose runs are that entry's (the pipeline's; repeatable)"
    )
    summarize.add_argument(
        "--seeds", type=seed, nargs="+", help="the seeds to read in place of the study file's (the pipeline passes the config's study_seeds)"
    )
    summarize.add_argument("--json", type=Path, required=True, help="output: the study's JSON")
    summarize.add_argument("--html", type=Path, required=True, help="output: the study's page")
    summarize.add_argument("--prices", type=Path, help="the price table (config/prices.yaml) for the cost to accuracy; without it, no cost")


def median_hours(times: list[float | None]) -> float | None:
    values = sorted(math.inf if t is None else t for t in times)
    if not values:
        return None
    m = statistics.median(values)
    return None if math.isinf(m) else m


def cov(values: list[float]) -> float | None:
    """Coefficient of variation (sample std / mean), None under two values."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) >= 2 and statistics.mean(values) > 0 else None


def run_record(run_dir: Path, task, ladder: list[float]) -> dict[str, Any]:
    from dawnpipe.logs import HELD_OUT_PREFIX, read_run_parquet
    from dawnpipe.metrics.tta import time_to_accuracy
    from dawnpipe.runfiles import read_run_file

    for name in ("train.parquet", "run.json"):
        if not (run_dir / name).is_file():
            raise DawnpipeError(f"{run_dir}: missing {name} (did the train stage run?)")
    # checked as the extract stage checks it, with the columns read below (every trainer writes them)
    log = read_run_parquet(run_dir / "train.parquet", task, ("epoch_train_seconds", "train_loss"))
    run = read_run_file(run_dir / "run.json", "run_complete")
    metric = log[task.metric_column].astype(float).tolist()
    epochs, hours = log["epoch"].astype(float).tolist(), log["hours"].astype(float).tolist()
    reached = {str(t): time_to_accuracy(epochs, hours, metric, t) for t in ladder}
    held = HELD_OUT_PREFIX + task.metric_column
    items = run.get("result", {}).get("train_items")
    throughput = items * epochs[-1] / (hours[-1] * 3600.0) if items and hours and hours[-1] > 0 else None
    epoch_seconds = log["epoch_train_seconds"].astype(float).tolist()
    return {
        "seed": int(run["seed"]),
        "time_to_accuracy_hours": {t: r.hours for t, r in reached.items()},
        "epochs_to_accuracy": {t: r.epoch for t, r in reached.items()},
        "final_accuracy": metric[-1] if metric else None,
        # with a held-out split (entry field held_out): its accuracy at the last epoch
        "final_held_out_accuracy": float(log[held].iloc[-1]) if held in log and len(log) else None,
        "epochs_run": int(epochs[-1]) if epochs else 0,
        "items_per_second": throughput,
        # the training clock of one epoch (evaluation excluded), median over the run's epochs
        "seconds_per_epoch": statistics.median(epoch_seconds) if epoch_seconds else None,
        "hardware": run.get("hardware_price_tag", run.get("hardware")),
        "nodes": int(run.get("nodes", 1)),
        "world_size": int(run.get("world_size", 1)),
        "threads_per_process": int(run.get("threads_per_process", run["environment"]["threads"])),  # what the run used (run.json)
        # null where the run does not know its loss (a program entry's is inside the program)
        "curve": {"hours": hours, "metric": metric, "train_loss": [x if math.isfinite(x) else None for x in log["train_loss"].astype(float)]},
    }


# Entry fields that change where and how wide a run trains, not its recipe:
# a study varying one of them is a scaling study.
LAYOUT_FIELDS = ("distributed", "threads", "device", "hardware")


def batch_size_of(recipe: dict[str, Any]) -> int | None:
    """An entry's batch size: a zoo entry's hyperparameter; a program entry's, where its free-form hyperparameters name one ``batch_size``."""
    value = recipe["hyperparameters"].get("batch_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def figure_kind(study) -> str:
    """Which figure the study's page draws: its ``figure:`` key, or else the
    rule of the module docstring (layout fields, then batch sizes, then design)."""
    if study.doc.get("figure"):
        return study.doc["figure"]
    if any(key.split(".")[0] in LAYOUT_FIELDS for v in study.variants for key in v.overrides):
        return "scaling"
    sizes = {batch_size_of(study.base_recipe), *(batch_size_of(v.recipe) for v in study.variants)} - {None}
    if len(sizes) >= 3:
        return "batch-size"
    if study.doc["design"] in ("combination", "lesion"):
        return "tricks"
    return "none"


def _ratio(base: float | None, value: float | None) -> float | None:
    return base / value if base is not None and value else None


def summarize(study, runs_dir: Path, prices: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``prices``: the price table (dawnpipe.prices.load_prices); None: no cost."""
    from dawnpipe.prices import price_per_hour
    from dawnpipe.runinfo import now_iso
    from dawnpipe.studies.checks import held_out_gap
    from dawnpipe.tasks import all_tasks

    base_recipe = study.base_recipe
    task = all_tasks()[base_recipe["task"]]
    ladder = study.ladder
    rows = [(study.base, {}, None), *((v.id, v.overrides, v.same_as) for v in study.variants)]
    batch_sizes = {study.base: batch_size_of(study.base_recipe), **{v.id: batch_size_of(v.recipe) for v in study.variants}}
    variants = []
    for vid, overrides, same_as in rows:
        ran_as = same_as or vid
        runs = [run_record(runs_dir / ran_as / f"seed{s}", task, ladder) for s in study.seeds]
        med = {str(t): median_hours([r["time_to_accuracy_hours"][str(t)] for r in runs]) for t in ladder}
        finals = [r["final_accuracy"] for r in runs if r["final_accuracy"] is not None]
        held = [r["final_held_out_accuracy"] for r in runs if r["final_held_out_accuracy"] is not None]
        gaps = [g for g in map(held_out_gap, runs) if g is not None]  # each seed's, as the study's checks read it
        top = str(ladder[-1])
        top_times = [r["time_to_accuracy_hours"][top] for r in runs if r["time_to_accuracy_hours"][top] is not None]
        speeds = [r["items_per_second"] for r in runs if r["items_per_second"]]
        epoch_seconds = [r["seconds_per_epoch"] for r in runs if r["seconds_per_epoch"]]
        # prices are per machine (node): a run on several nodes pays for each (as the extract stage does)
        price = price_per_hour(prices, runs[0]["hardware"]) if prices is not None and runs[0]["hardware"] else None
        usd_per_hour = price * runs[0]["nodes"] if price is not None else None
        variants.append(
            {
                "id": vid,
                "overrides": overrides,
                "same_as": same_as,
                "batch_size": batch_sizes.get(vid),
                "world_size": runs[0]["world_size"],
                "runs": runs,
                "median_time_to_accuracy_hours": med,
                "reached_fraction": {str(t): sum(r["time_to_accuracy_hours"][str(t)] is not None for r in runs) / len(runs) for t in ladder},
                "final_accuracy": statistics.median(finals) if finals else None,
                "final_held_out_accuracy": statistics.median(held) if held else None,
                "generalization_gap": statistics.median(gaps) if gaps else None,  # median of the seeds' gaps
                "median_epochs_to_accuracy": median_hours([r["epochs_to_accuracy"][top] for r in runs]),  # at the top rung
                "tta_cov": cov(top_times),  # of the seeds that reached the top rung (two at least)
                "items_per_second": statistics.median(speeds) if speeds else None,
                "median_seconds_per_epoch": statistics.median(epoch_seconds) if epoch_seconds else None,
                "hardware": runs[0]["hardware"],
                "usd_per_hour": usd_per_hour,
                "median_cost_to_accuracy_usd": {t: (h * usd_per_hour if h is not None and usd_per_hour is not None else None) for t, h in med.items()},
            }
        )
    base = variants[0]
    for v in variants:
        v["speedup"] = {t: _ratio(base["median_time_to_accuracy_hours"][t], h) for t, h in v["median_time_to_accuracy_hours"].items()}
        v["epoch_speedup"] = _ratio(base["median_seconds_per_epoch"], v["median_seconds_per_epoch"])
    from dawnpipe.studies.checks import evaluate_all

    return {
        "study": study.name,
        "description": study.doc.get("description", ""),
        "claim": study.doc.get("claim", ""),
        "base": study.base,
        "design": study.doc["design"],
        "figure": figure_kind(study),
        "seeds": list(study.seeds),
        # the study file's own seeds where others ran in their place (the config's study_seeds), else null
        "study_file_seeds": study.file_seeds,
        "ladder": ladder,
        "continue_past_threshold": study.full_budget,
        "metric": task.metric_label,
        "generated": now_iso(),
        # the claim as checks, each decided from the runs below by one rule (dawnpipe.verdict)
        "checks": study.checks,
        "verdicts": evaluate_all(study.checks, variants),
        "variants": variants,
    }


def study_figure(summary: dict[str, Any]) -> tuple[str, Any]:
    """The study's own figure (its ``figure`` kind, see figure_kind): a title and the charts."""
    from markupsafe import Markup

    from dawnpipe.report.charts import bar_chart, line_chart

    top = str(summary["ladder"][-1])
    kind = summary.get("figure", "none")
    variants = summary["variants"]
    if kind == "batch-size":
        batch = sorted(((v["batch_size"], v) for v in variants if v.get("batch_size")), key=lambda bv: bv[0])
        speed = line_chart(
            [("median items/s", [b for b, v in batch if v["items_per_second"]], [v["items_per_second"] for _, v in batch if v["items_per_second"]])],
            x_label="batch size",
            y_label="training items/s",
            title="Throughput against batch size",
            log_x=True,
        )
        reached = [(b, v["median_time_to_accuracy_hours"][top]) for b, v in batch if v["median_time_to_accuracy_hours"][top] is not None]
        tta = line_chart(
            [(f"median minutes to {top}", [b for b, _ in reached], [60.0 * h for _, h in reached])],
            x_label="batch size",
            y_label=f"minutes to {top}",
            title=f"Time to {top} against batch size (a batch that did not reach it has no point)",
            log_x=True,
        )
        return "Throughput and time to accuracy against batch size", Markup(speed + tta)
    if kind == "tricks":
        bars = [(v["id"], v["speedup"][top]) for v in variants[1:]]
        chart = bar_chart(bars, y_label=f"speed-up to {top} over the base", hline=1.0, missing=f"did not reach {top}")
        return f"Speed-up of each variant to {top} over the base (a cross: did not reach)", chart
    if kind == "scaling":
        return "Scaling: speed-up of time per epoch against speed-up of time to accuracy, and cost against time", scaling_figure(summary)
    return "", None


def scaling_figure(summary: dict[str, Any]):
    """Two charts (docs/rules.md#analysis-metrics, scaling): each variant's speed-up of time
    per epoch against its speed-up of time to the top rung, the diagonal
    where both are equal (the extra epochs a layout needs cost nothing); and
    its median cost to the top rung against its median time, where priced."""
    from markupsafe import Markup

    from dawnpipe.report.charts import empty, scatter

    top = str(summary["ladder"][-1])
    variants = summary["variants"]
    both = [(v, v["epoch_speedup"], v["speedup"][top]) for v in variants if v["epoch_speedup"] and v["speedup"][top]]
    span = [x for _, e, t in both for x in (e, t)]
    diagonal = [("equal speed-ups", [min(span) * 0.9, max(span) * 1.1], [min(span) * 0.9, max(span) * 1.1])] if span else []
    speedups = scatter(
        [(v["id"], f"{v['world_size']} process{'es' if v['world_size'] != 1 else ''}", e, t) for v, e, t in both],
        x_label="speed-up of time per epoch over the base",
        y_label=f"speed-up of time to {top} over the base",
        title=f"Speed-up per epoch against speed-up to {top}",
        lines=diagonal,
    )
    missing = [v["id"] for v in variants if not (v["epoch_speedup"] and v["speedup"][top])]
    note = Markup("<p class='muted'>Not drawn (did not reach {} or no epoch time): {}</p>").format(top, ", ".join(missing)) if missing else Markup("")
    priced = [(v, v["median_time_to_accuracy_hours"][top], v["median_cost_to_accuracy_usd"][top]) for v in variants]
    priced = [(v, h, c) for v, h, c in priced if h is not None and c is not None]
    if priced:
        cost = scatter(
            [(v["id"], f"{v['world_size']} process{'es' if v['world_size'] != 1 else ''}", 60.0 * h, c) for v, h, c in priced],
            x_label=f"median minutes to {top}",
            y_label=f"median cost to {top} (USD)",
            title=f"Cost against time to {top}",
        )
    else:
        tags = sorted({str(v["hardware"]) for v in variants if v["usd_per_hour"] is None})
        cost = empty(f"no cost: no variant reached {top} with a price known" + (f" (no price for {', '.join(tags)} in the price table)" if tags else ""))
    return Markup(speedups + note + cost)


def drawn_variants(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows whose runs the page draws as curves: each run directory once.
    A variant run as another row of this study (``same_as`` names the base or
    one of its variants) is that row's curves; one run as another study's
    variant or a config entry has no other row here, so its curves are its own
    (under the first such row, should two share it)."""
    ids = {v["id"] for v in summary["variants"]}
    drawn, seen = [], set()
    for v in summary["variants"]:
        ran_as = v["same_as"] or v["id"]
        if (v["same_as"] in ids) or ran_as in seen:
            continue
        seen.add(ran_as)
        drawn.append(v)
    return drawn


def render(summary: dict[str, Any], machine: dict[str, Any] | None = None) -> str:
    import jinja2

    from dawnpipe.display import format_hours, format_usd
    from dawnpipe.report.charts import line_chart, time_axis, with_scripts
    from dawnpipe.studies import checks

    drawn = drawn_variants(summary)
    curves = [(f"{v['id']} seed {r['seed']}", r["curve"]["hours"], r["curve"]["metric"], v["id"]) for v in drawn for r in v["runs"]]
    label, factor = time_axis(max((max(h, default=0.0) for _, h, _, _ in curves), default=1.0) or 1.0)
    chart = line_chart(
        [(name, [x * factor for x in xs], ys, group) for name, xs, ys, group in curves],
        x_label=label,
        y_label=summary["metric"],
        hline=summary["ladder"][-1],
        hline_label=f"top rung {summary['ladder'][-1]:g}",
        markers=False,
    )
    losses = [
        (f"{v['id']} seed {r['seed']}", list(range(1, len(r["curve"]["train_loss"]) + 1)), r["curve"]["train_loss"], v["id"]) for v in drawn for r in v["runs"]
    ]
    loss_chart = line_chart([c for c in losses if c[1]], x_label="epoch", y_label="training loss", markers=False)
    figure_title, figure = study_figure(summary)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["hours"] = format_hours
    env.filters["usd"] = format_usd
    env.globals.update(verdict_cells=checks.cells, verdict_compared=checks.compared, verdict_claimed=checks.claimed)
    machine = machine or {}
    page = env.from_string(HTML).render(
        s={**summary, "commit": ((machine.get("git") or {}).get("commit") or "")[:12], "machine": machine.get("cpu_model", "")},
        chart=chart,
        loss_chart=loss_chart,
        figure=figure,
        figure_title=figure_title,
        held=any(v["final_held_out_accuracy"] is not None for v in summary["variants"]),
    )
    return with_scripts(page)  # plotly.js and the chart script, once


def run(args) -> int:
    import json

    from dawnpipe.fileio import write_json, write_text
    from dawnpipe.prices import load_prices
    from dawnpipe.studies import load_study

    study = load_study(args.study, args.entries_dir, dict(getattr(args, "same_as", None) or ()))
    if args.verb == "variants":
        print(json.dumps([{"id": v.id, "overrides": v.overrides, "same_as": v.same_as} for v in study.variants], indent=1))
        return 0
    if args.seeds:
        study.use_seeds(args.seeds)
    summary = summarize(study, args.runs, load_prices(args.prices) if args.prices else None)
    machine = {}
    base_run = args.runs / study.base / f"seed{study.seeds[0]}" / "run.json"
    if base_run.is_file():
        from dawnpipe.runfiles import read_run_file

        machine = read_run_file(base_run, "run_complete").get("environment", {})
    # the curves are for the page only
    doc = {**summary, "variants": [{**v, "runs": [{k: x for k, x in r.items() if k != "curve"} for r in v["runs"]]} for v in summary["variants"]]}
    write_json(args.json, doc)
    write_text(args.html, render(summary, machine))
    best = max(summary["variants"][1:], key=lambda v: v["speedup"][str(summary["ladder"][-1])] or 0.0, default=None)
    top = f"; fastest variant to {summary['ladder'][-1]}: {best['id']}" if best and best["speedup"][str(summary["ladder"][-1])] else ""
    from dawnpipe.display import terminal_safe

    print(terminal_safe(f"study: {study.name}: {len(summary['variants'])} variants (base included) over seeds {list(study.seeds)}{top} -> {args.html}"))
    from dawnpipe.studies.checks import line

    for result in summary["verdicts"]:
        print(terminal_safe(f"  {line(result)}"))
    return 0
