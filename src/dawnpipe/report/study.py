"""study: a study's variants, and its results as JSON and a page.

    python -m dawnpipe study variants config/studies/batch-size.yaml
    python -m dawnpipe study summarize --study config/studies/batch-size.yaml \\
        --runs results/runs --json results/studies/batch-size.json --html results/studies/batch-size.html

The summary reads each run's own per-epoch log (train.parquet, the training
clock) and run.json: time to accuracy at every rung of the study's ladder
(dawnpipe.tta, the extract stage's rule), the median over seeds with a seed
that did not reach a rung counted as infinitely slow (none when half or more
did not), the speed-up over the base (the base's median over the variant's;
null where either did not reach), the fraction of seeds reaching each rung,
the final accuracy and the training throughput.
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
td.num{text-align:right;font-variant-numeric:tabular-nums} .dnc{color:#a00} .muted{color:#666}</style></head><body>
<h1>Study {{ s.study }}</h1>
<p>{{ s.description }}</p>
{% if s.claim %}<p><strong>The paper's claim:</strong> {{ s.claim }}</p>{% endif %}
<p class="muted">Base entry <code>{{ s.base }}</code>, design {{ s.design }}, seeds {{ s.seeds | join(", ") }}; runs {{ "continue to their whole budget" if s.continue_past_threshold else "stop at the threshold" }}.
Medians over seeds; a seed that did not reach a rung counts as infinitely slow (no median when half or more did not). Speed-up: the base's median over the variant's.</p>
<table><tr><th>Variant</th><th>Overrides</th>{% for t in s.ladder %}<th>Median to {{ t }}</th><th>Speed-up</th><th>Reached</th>{% endfor %}<th>Epochs to {{ s.ladder[-1] }}</th><th>CoV to {{ s.ladder[-1] }}</th><th>Final accuracy (median)</th>{% if held %}<th>Held-out (final)</th><th>Gap</th>{% endif %}<th>Items/s</th></tr>
{% for v in s.variants %}<tr><td><code>{{ v.id }}</code>{% if v.same_as %} <span class="muted">(same recipe as {{ v.same_as }}: run once)</span>{% endif %}</td>
<td>{% for k, val in v.overrides.items() %}<code>{{ k }}={{ val }}</code> {% endfor %}</td>
{% for t in s.ladder %}{% set key = t | string %}<td class="num">{% if v.median_time_to_accuracy_hours[key] is none %}<span class="dnc">did not reach</span>{% else %}{{ v.median_time_to_accuracy_hours[key] | hours }}{% endif %}</td>
<td class="num">{{ "%.2fx" | format(v.speedup[key]) if v.speedup[key] is not none else "-" }}</td><td class="num">{{ "%.0f%%" | format(100 * v.reached_fraction[key]) }}</td>{% endfor %}
<td class="num">{{ "%g" | format(v.median_epochs_to_accuracy) if v.median_epochs_to_accuracy is not none else "-" }}</td><td class="num">{{ "%.3f" | format(v.tta_cov) if v.tta_cov is not none else "-" }}</td>
<td class="num">{{ "%.2f" | format(v.final_accuracy) if v.final_accuracy is not none else "-" }}</td>{% if held %}<td class="num">{{ "%.2f" | format(v.final_held_out_accuracy) if v.final_held_out_accuracy is not none else "-" }}</td><td class="num">{{ "%+.2f" | format(v.generalization_gap) if v.generalization_gap is not none else "-" }}</td>{% endif %}<td class="num">{{ "%.0f" | format(v.items_per_second) if v.items_per_second is not none else "-" }}</td></tr>
{% endfor %}</table>
<h2>Accuracy against training time</h2>
{{ chart }}
<h2>Training loss per epoch</h2>
{{ loss_chart }}
{% if figure %}<h2>{{ figure_title }}</h2>
{{ figure }}{% endif %}
<p class="muted">Generated {{ s.generated }}{% if s.commit %} at commit <code>{{ s.commit }}</code>{% endif %}{% if s.machine %} on {{ s.machine }}{% endif %}.</p>
</body></html>
"""


def configure(p) -> None:
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
    summarize.add_argument("--json", type=Path, required=True, help="output: the study's JSON")
    summarize.add_argument("--html", type=Path, required=True, help="output: the study's page")


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
    import pandas as pd

    from dawnpipe.runfiles import HELD_OUT_PREFIX, read_run_file
    from dawnpipe.tta import time_to_accuracy

    for name in ("train.parquet", "run.json"):
        if not (run_dir / name).is_file():
            raise DawnpipeError(f"{run_dir}: missing {name} (did the train stage run?)")
    log = pd.read_parquet(run_dir / "train.parquet")
    run = read_run_file(run_dir / "run.json", "run_complete")
    metric = log[task.metric_column].astype(float).tolist()
    epochs, hours = log["epoch"].astype(float).tolist(), log["hours"].astype(float).tolist()
    reached = {str(t): time_to_accuracy(epochs, hours, metric, t) for t in ladder}
    held = HELD_OUT_PREFIX + task.metric_column
    items = run.get("result", {}).get("train_items")
    throughput = items * epochs[-1] / (hours[-1] * 3600.0) if items and hours and hours[-1] > 0 else None
    return {
        "seed": int(run["seed"]),
        "time_to_accuracy_hours": {t: r.hours for t, r in reached.items()},
        "epochs_to_accuracy": {t: r.epoch for t, r in reached.items()},
        "final_accuracy": metric[-1] if metric else None,
        # with a held-out split (entry field held_out): its accuracy at the last epoch
        "final_held_out_accuracy": float(log[held].iloc[-1]) if held in log and len(log) else None,
        "epochs_run": int(epochs[-1]) if epochs else 0,
        "items_per_second": throughput,
        "world_size": int(run.get("world_size", 1)),
        "threads_per_process": int(run.get("threads_per_process", run["environment"]["threads"])),  # what the run used (run.json)
        "curve": {"hours": hours, "metric": metric, "train_loss": log["train_loss"].astype(float).tolist() if "train_loss" in log else []},
    }


def summarize(study, runs_dir: Path) -> dict[str, Any]:
    from dawnpipe.runinfo import now_iso
    from dawnpipe.tasks import all_tasks

    base_recipe = study.base_recipe
    task = all_tasks()[base_recipe["task"]]
    ladder = study.ladder
    rows = [(study.base, {}, None), *((v.id, v.overrides, v.same_as) for v in study.variants)]
    batch_sizes = {study.base: study.base_recipe["hyperparameters"]["batch_size"], **{v.id: v.recipe["hyperparameters"]["batch_size"] for v in study.variants}}
    variants = []
    for vid, overrides, same_as in rows:
        ran_as = same_as or vid
        runs = [run_record(runs_dir / ran_as / f"seed{s}", task, ladder) for s in study.seeds]
        med = {str(t): median_hours([r["time_to_accuracy_hours"][str(t)] for r in runs]) for t in ladder}
        finals = [r["final_accuracy"] for r in runs if r["final_accuracy"] is not None]
        held = [r["final_held_out_accuracy"] for r in runs if r["final_held_out_accuracy"] is not None]
        top = str(ladder[-1])
        top_times = [r["time_to_accuracy_hours"][top] for r in runs if r["time_to_accuracy_hours"][top] is not None]
        speeds = [r["items_per_second"] for r in runs if r["items_per_second"]]
        variants.append(
            {
                "id": vid,
                "overrides": overrides,
                "same_as": same_as,
                "batch_size": batch_sizes.get(vid),
                "runs": runs,
                "median_time_to_accuracy_hours": med,
                "reached_fraction": {str(t): sum(r["time_to_accuracy_hours"][str(t)] is not None for r in runs) / len(runs) for t in ladder},
                "final_accuracy": statistics.median(finals) if finals else None,
                "final_held_out_accuracy": statistics.median(held) if held else None,
                "generalization_gap": statistics.median(finals) - statistics.median(held) if held and finals else None,
                "median_epochs_to_accuracy": median_hours([r["epochs_to_accuracy"][top] for r in runs]),  # at the top rung
                "tta_cov": cov(top_times),  # of the seeds that reached the top rung (two at least)
                "items_per_second": statistics.median(speeds) if speeds else None,
            }
        )
    base = variants[0]["median_time_to_accuracy_hours"]
    for v in variants:
        v["speedup"] = {t: (base[t] / h if base[t] is not None and h else None) for t, h in v["median_time_to_accuracy_hours"].items()}
    return {
        "study": study.name,
        "description": study.doc.get("description", ""),
        "claim": study.doc.get("claim", ""),
        "base": study.base,
        "design": study.doc["design"],
        "seeds": list(study.seeds),
        "ladder": ladder,
        "continue_past_threshold": study.full_budget,
        "metric": task.metric_label,
        "generated": now_iso(),
        "variants": variants,
    }


def study_figure(summary: dict[str, Any]) -> tuple[str, Any]:
    """The study's own figure, where its design has one: items/s and time to
    the top rung against batch size (variants that change the batch size);
    speed-up of each trick alone against all of them together (combination
    and lesion designs), a variant that did not reach the top rung at 0."""
    from markupsafe import Markup

    from dawnpipe.report.svg import line_chart

    top = str(summary["ladder"][-1])
    batch = [(v["batch_size"], v) for v in summary["variants"] if v.get("batch_size")]
    if len({b for b, _ in batch}) >= 3:
        batch.sort(key=lambda bv: bv[0])
        speed = line_chart([("items/s", [b for b, _ in batch], [v["items_per_second"] or 0.0 for _, v in batch])], x_label="batch size", y_label="items/s")
        reached = [(b, v["median_time_to_accuracy_hours"][top]) for b, v in batch if v["median_time_to_accuracy_hours"][top] is not None]
        tta = line_chart(
            [(f"median minutes to {top}", [b for b, _ in reached], [60.0 * h for _, h in reached])], x_label="batch size", y_label=f"minutes to {top}"
        )
        return "Throughput and time to accuracy against batch size", Markup(speed + tta)
    if summary["design"] in ("combination", "lesion"):
        variants = summary["variants"][1:]
        xs = list(range(1, len(variants) + 1))
        ys = [v["speedup"][top] or 0.0 for v in variants]
        names = ", ".join(f"{i}: {v['id']}" + ("" if v["speedup"][top] else " (did not reach)") for i, v in zip(xs, variants))
        chart = line_chart([(f"speed-up to {top}", xs, ys)], x_label="variant (numbered below)", y_label="speed-up over the base", hline=1.0)
        return f"Speed-up of each variant to {top} (0: did not reach)", Markup(chart + Markup("<p class='muted'>{}</p>").format(names))
    return "", None


def render(summary: dict[str, Any], machine: dict[str, Any] | None = None) -> str:
    import jinja2

    from dawnpipe.display import format_hours
    from dawnpipe.report.svg import line_chart, time_axis

    curves = [(f"{v['id']} s{r['seed']}", r["curve"]["hours"], r["curve"]["metric"]) for v in summary["variants"] if not v["same_as"] for r in v["runs"]]
    label, factor = time_axis(max((max(h, default=0.0) for _, h, _ in curves), default=1.0) or 1.0)
    chart = line_chart(
        [(name, [x * factor for x in xs], ys) for name, xs, ys in curves], x_label=label, y_label=summary["metric"], hline=summary["ladder"][-1], markers=False
    )
    losses = [
        (f"{v['id']} s{r['seed']}", list(range(1, len(r["curve"]["train_loss"]) + 1)), r["curve"]["train_loss"])
        for v in summary["variants"]
        if not v["same_as"]
        for r in v["runs"]
    ]
    loss_chart = line_chart([c for c in losses if c[1]], x_label="epoch", y_label="training loss", markers=False)
    figure_title, figure = study_figure(summary)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["hours"] = format_hours
    machine = machine or {}
    return env.from_string(HTML).render(
        s={**summary, "commit": ((machine.get("git") or {}).get("commit") or "")[:12], "machine": machine.get("cpu_model", "")},
        chart=chart,
        loss_chart=loss_chart,
        figure=figure,
        figure_title=figure_title,
        held=any(v["final_held_out_accuracy"] is not None for v in summary["variants"]),
    )


def run(args) -> int:
    import json

    from dawnpipe.fileio import write_json, write_text
    from dawnpipe.studies import load_study

    study = load_study(args.study, args.entries_dir, dict(getattr(args, "same_as", None) or ()))
    if args.verb == "variants":
        print(json.dumps([{"id": v.id, "overrides": v.overrides, "same_as": v.same_as} for v in study.variants], indent=1))
        return 0
    summary = summarize(study, args.runs)
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
    print(f"study: {study.name}: {len(summary['variants'])} variants (base included) over seeds {list(study.seeds)}{top} -> {args.html}")
    return 0
