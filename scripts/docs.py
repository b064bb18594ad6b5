"""Generate the measured tables of the docs from the records the bench scripts
wrote (docs/measurements/<name>.json, bench/record.py), so that no measured
number in the docs is typed by hand.

    python scripts/docs.py            # rewrite every generated block (what `make docs` runs)
    python scripts/docs.py --check    # exit 1 naming each page whose blocks differ from a fresh generation

A generated block sits between two marker comments on a Markdown page of docs/:

    <!-- generated: measurements/tta.json -->
    ... replaced by each generation ...
    <!-- end generated -->

The path is relative to the page. Everything outside the markers is
hand-written prose; everything inside comes from the record: its machine,
commit, date and command first, then its table. A record that does not exist
renders as one line saying how to measure it. How a record renders is chosen
by its name (``tta``, ``overhead``, ``latency``, ``audit``,
``telemetry_overhead``, ``study-<name>``); a record of another name renders as
a table of its result's fields.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- generated: (?P<path>[^ ]+?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)

# How each record is made, for the line of a record not measured yet.
COMMANDS = {
    "tta": "python bench/tta.py --record",
    "overhead": "python bench/overhead.py --record",
    "latency": "python bench/latency.py --record",
    "audit": "python bench/audit.py --record",
    "telemetry_overhead": "python bench/telemetry_overhead.py --record",
    "program_overhead": "python bench/program_overhead.py --record",
    "program_clock": "python bench/program_clock.py --record",
    "default_run": "python bench/default_run.py --record",
    "gpu_check": "bash bench/gpu_check.sh --out DIR` on a machine with one NVIDIA GPU, then `python bench/gpu_record.py DIR/gpu_check.json",
}


# --- numbers -----------------------------------------------------------------


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def seconds_list(values: list[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:.1f}" for v in values)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(r) for r in rows)]


# --- where and when ----------------------------------------------------------


def machine_text(m: dict[str, Any]) -> str:
    family = f" (family {m['cpu_family']}, model {m.get('cpu_model_number')})" if m.get("cpu_family") else ""
    flags = f" with {', '.join(m['cpu_flags'])}" if m.get("cpu_flags") else ""
    parts = [(m.get("cpu_model") or "unknown CPU") + family + flags, f"{m.get('cpu_count')} CPUs"]
    if m.get("memory_gib"):
        parts.append(f"{m['memory_gib']:g} GiB")
    gpus = m.get("gpus") or []
    parts.append(", ".join(gpus) if gpus else "no GPU")
    parts.append(m.get("platform") or "unknown platform")
    parts.append(f"Python {m.get('python')}")
    if m.get("torch"):
        parts.append(f"torch {m['torch']}")
    return ", ".join(parts)


def load_text(load: dict[str, Any] | None) -> str:
    if not load:
        return ""
    start, end = load.get("start"), load.get("end")
    shown = " / ".join(f"{x:.2f}" for x in start) if start else "?"
    return f"; load average (1, 5, 15 min) {shown} at the start" + (f", {end[0]:.2f} (1 min) at the end" if end else "")


def commit_text(commit: str | None, dirty: bool | None) -> str:
    shown = f"`{commit[:12]}`" if commit else "an unknown commit"
    return shown + (" with uncommitted changes" if dirty else "" if dirty is False else " (clean or not: unknown)")


def quiet_text(record: dict[str, Any]) -> str:
    """Why a record says its machine was not quiet: the load at its start, other processes' work while it ran."""
    why = []
    start = (record.get("load_average") or {}).get("start") or [None]
    if start[0] is not None and start[0] > record["load_ceiling"]:
        why.append(f"the load average at the start ({start[0]:.2f}) was above the ceiling of {record['load_ceiling']:g}")
    foreign = record.get("foreign_cores")
    if foreign is not None and foreign > record.get("foreign_ceiling", float("inf")):
        why.append(f"other processes kept {foreign:.2f} cores busy on average while it ran (ceiling {record['foreign_ceiling']:g})")
    return f"**Not a quiet machine:** {'; '.join(why) or 'the record says so'}; other work shared the cores."


def provenance(record: dict[str, Any], link: str) -> list[str]:
    """The line every generated table starts with: machine, commit, date, command, and the record."""
    return [
        f"Measured on {machine_text(record.get('machine') or {})}; at commit {commit_text(record.get('commit'), record.get('dirty'))}; "
        f"{record.get('date')}{load_text(record.get('load_average'))}; by `{record.get('command')}` (record: [{link}]({link})).",
        *([quiet_text(record)] if record.get("quiet") is False else []),
        *([unchecked] if (unchecked := unchecked_text(record)) else []),
        "",
    ]


def unchecked_text(record: dict[str, Any]) -> str | None:
    """For a record written before the bench checked quietness (no ``quiet``
    field): a line when its start load was above bench/record.py's ceiling
    for its machine's cores, else None."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    from record import LOAD_CEILING

    start = ((record.get("load_average") or {}).get("start") or [None])[0]
    cpus = (record.get("machine") or {}).get("cpu_count")
    if record.get("quiet") is not None or start is None or cpus is None or start <= LOAD_CEILING * cpus:
        return None
    return (
        f"**Quietness not checked:** this record predates the check; the load average at its start "
        f"({start:.2f}) was above today's ceiling of {LOAD_CEILING * cpus:g} "
        f"({LOAD_CEILING:g} per core): other work may have shared the cores."
    )


# --- one renderer per kind of record -----------------------------------------


def spread(cov: float | None, runs: int) -> str:
    """A coefficient of variation, or a dash where one run has none to show."""
    return "- (one seed)" if runs < 2 else pct(cov)


def render_tta(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    rows = []
    for key in ("fast", "seed_recipe"):
        e = res[key]
        rows.append(
            [
                f"`{e['entry']}`",
                seconds_list([run["time_to_accuracy_seconds"] for run in e["runs"]]),
                num(e["median_seconds"], 1, " s"),
                spread(e["cov"], e["runs_total"]),
                ", ".join("-" if run["epochs_to_accuracy"] is None else f"{run['epochs_to_accuracy']:g}" for run in e["runs"]),
                f"{e['reached_runs']} of {e['runs_total']}",
            ]
        )
    limits = [f"{k.replace('_', ' ')} {res[k]}" for k in ("train_limit", "test_limit", "threads") if res.get(k) is not None]
    threshold = f"{res['threshold']:g}%"
    seeds = "Seed 0" if res["seeds"] == 1 else f"Seeds 0..{res['seeds'] - 1}"
    out = table(
        ["entry", f"seconds to {threshold} per seed (training clock)", "median", "CoV", f"epochs to {threshold}", "seeds reaching"],
        rows,
    )
    return [
        *out,
        "",
        f"{seeds}{' (' + ', '.join(limits) + ')' if limits else ''}; "
        f"speed-up of the fast entry over the seed recipe (ratio of the medians): **{ratio(res['speedup'])}**.",
        "",
        tta_goal(res),
    ]


# The fast entry's goal (docs/measurements.md): at least this speed-up over the seed recipe ...
GOAL_SPEEDUP = 10.0
# ... with at most this coefficient of variation of its own times.
GOAL_COV = 0.05


def tta_goal(res: dict[str, Any]) -> str:
    """The goal decided from the record's per-seed times: the speed-up by the
    interval of dawnpipe.verdict's rule (docs/rules.md), a seed that never
    reached 93% counting as infinitely slow; the spread as measured."""
    _src_on_path()
    from dawnpipe.verdict import INCONCLUSIVE, NOT_REPRODUCED, RATIO, REPRODUCED, as_times, decide, two_sample

    fast, slow = (as_times(run["time_to_accuracy_seconds"] for run in res[key]["runs"]) for key in ("fast", "seed_recipe"))
    interval = two_sample(fast, slow, RATIO)
    # a goal's words, as bench/pairs.py's goal_verdict has them
    met = {REPRODUCED: "met", NOT_REPRODUCED: "not met", INCONCLUSIVE: "undecided"}[decide(interval, "above", GOAL_SPEEDUP)]
    sizes = f"{len(fast)} against {len(slow)} seed{'s' if len(slow) > 1 else ''}"

    def factor(x: float) -> str:  # a side that never reached makes a pair's ratio 0 or unbounded
        return "unbounded" if math.isinf(x) else f"{x:.2f}x"

    if interval.categorical:
        never = "the seed recipe" if all(math.isinf(x) for x in slow) else "the fast entry"
        shown = f"{never} reached {res['threshold']:g}% in none of its seeds, the other entry in every one ({sizes})"
    elif interval.exists:
        shown = f"{factor(interval.estimate)} [{factor(interval.low)}, {factor(interval.high)}] ({100 * float(interval.confidence):.1f}% interval, {sizes})"
    else:
        shown = f"{factor(interval.estimate)}, no interval from {sizes}"
    runs = res["fast"]["runs_total"]
    if runs < 2:
        spread_text = "one seed has no spread: **not judged**"
    elif res["fast"]["cov"] is None:
        spread_text = "fewer than two seeds reached the threshold: **not judged**"
    else:
        within = "met" if res["fast"]["cov"] <= GOAL_COV else "not met"
        spread_text = f"{pct(res['fast']['cov'])} over the {res['fast']['reached_runs']} seeds that reached it: **{within}** (a point estimate, no interval)"
    return (
        f"The fast entry's goal, from these seeds: a speed-up of at least {GOAL_SPEEDUP:g}x, decided by the interval of the rule in "
        f"[rules.md](rules.md#verdicts-over-seeds) (Hodges-Lehmann estimate of the seed recipe's time over the fast entry's): {shown}: "
        f"**{met}**; a coefficient of variation of the fast entry's times of at most {pct(GOAL_COV, 0)}: {spread_text}."
    )


def render_overhead(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    out = table(
        ["side", f"training clock per repeat (s), {res['epochs']} epochs x {res['items']:,} items, {res['threads']} threads", "median"],
        [
            ["bare loop", seconds_list(res["bare_seconds"]), num(res["median_bare_seconds"], 2, " s")],
            ["pipeline (train stage)", seconds_list(res["pipeline_seconds"]), num(res["median_pipeline_seconds"], 2, " s")],
        ],
    )
    if "interval" not in res:  # a record of the bench before it ran in pairs
        return [*out, "", f"Entry `{res['entry']}`; harness overhead (pipeline median / bare median): **{res['overhead']:.3f}x**."]
    low, high = res["interval"]
    shown = f" [{low:.3f}, {high:.3f}] ({100 * res['confidence']:.1f}% interval)" if low is not None else " (too few pairs for an interval)"
    return [
        *out,
        "",
        f"Entry `{res['entry']}`; {res['repeats']} pairs, their ratios (pipeline / bare): {', '.join(f'{r:.3f}' for r in res['pair_ratios'])}; "
        f"harness overhead (the median of the pairs' ratios): **{res['overhead']:.3f}x**{shown}.",
    ]


def render_latency(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    rows = [
        [
            f"`{b['backend']}`",
            b["precision"],
            *(num(b[f"latency_{k}_ms"], 4) for k in ("mean", "p50", "p90", "p99", "max")),
            f"{b['accuracy']:.2f}%",
            str(b["answers_differing_from_eager"]),
        ]
        for b in res["backends"]
    ]
    out = table(["backend", "precision", "mean ms", "p50", "p90", "p99", "max", "accuracy", "answers differing from eager"], rows)
    best = f"best `{res['best']}`: **{ratio(res['speedup'])}** over eager" if res["best"] else "no backend kept eager's accuracy"
    fp32 = f"; best fp32 `{res['best_fp32']}`: {ratio(res['speedup_fp32'])}" if res.get("best_fp32") else ""
    return [
        *out,
        "",
        f"{res['items']:,} items one at a time, {res['threads']} thread(s), {res['warmup']} warm-up items, {res['rounds']} rounds; "
        f"checkpoint `{res['checkpoint']}` (threshold {res['threshold']:g}%); {best}{fp32}.",
    ]


def render_audit(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    rows = [
        [
            c["corpus"],
            f"{c['files']:,}",
            f"{c['wall_seconds_median']:.3f} (min {c['wall_seconds_min']:.3f}, of {c['repeats']})",
            f"{c['cpu_seconds_median']:.3f}",
            f"{c['files'] / c['wall_seconds_median']:,.0f}",
            str(c["exit_code"]),
        ]
        for c in res["corpora"]
    ]
    out = table(["corpus", "files", "wall s (median)", "CPU s", "files/s", "exit code"], rows)
    verdict = f"shared corpus against the 1.5 s target: {res['shared_corpus_verdict']}; " if res.get("shared_corpus_verdict") else ""
    per = res["cpu_ms_per_file"]
    return [
        *out,
        "",
        f"{verdict}CPU per file after start-up: {per['small']:.3f} ms (the smaller generated corpus), {per['large']:.3f} ms (the larger); "
        f"throughput **{res['files_per_second']:,.0f} files/s**.",
    ]


def render_telemetry_overhead(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    tick = res["tick"]
    lines = [
        f"Sampler CPU per tick: {tick['seconds_per_tick'] * 1e6:.0f} us over {tick['ticks']} ticks "
        f"({pct(tick['core_fraction_at_interval'], 3)} of one core at one tick per {res['interval_seconds']:g} s); "
        f"sources: {', '.join(f'{k} {v}' for k, v in tick['sources'].items())}.",
    ]
    if "overhead" in res:
        lines += [
            "",
            *table(
                ["telemetry", f"training clock per repeat (s), {res['epochs']} epoch(s) x {res['items']:,} items, {res['threads']} threads", "median"],
                [
                    ["off", seconds_list(res["off_seconds"]), num(res["median_off_seconds"], 2, " s")],
                    ["on", seconds_list(res["on_seconds"]), num(res["median_on_seconds"], 2, " s")],
                ],
            ),
            "",
            f"Spread of the 'off' runs {pct(res['off_spread'])}; telemetry overhead (on / off medians): **{res['overhead']:.3f}x**.",
        ]
    return lines


def seed_gap_median(runs: list[dict[str, Any]]) -> str:
    """The median of the seeds' held-out gaps, the measure the study's checks
    decide on, shown signed; from the runs, so that records whose study stage
    took the gap of the medians read the same."""
    _src_on_path()
    from dawnpipe.studies.checks import held_out_gap

    gaps = [g for g in map(held_out_gap, runs) if g is not None]
    return f"{statistics.median(gaps):+.2f}" if gaps else "-"


def render_study(r: dict[str, Any], link: str) -> list[str]:
    s = r["result"]
    ladder = [str(t) for t in s["ladder"]]
    top = ladder[-1]
    held = any(v.get("final_held_out_accuracy") is not None for v in s["variants"])
    header = ["variant", *(f"median s to {float(t):g}% (seeds reaching)" for t in ladder), f"speed-up to {float(top):g}%"]
    header += [f"epochs to {float(top):g}% per seed", "s/epoch", "items/s", "final accuracy per seed"]
    header += ["held-out gap, median of the seeds' (points)"] if held else []
    rows = []
    for v in s["variants"]:
        same = f" (runs of `{v['same_as']}`)" if v.get("same_as") else ""
        cells = [f"`{v['id']}`{same}"]
        for t in ladder:
            h = v["median_time_to_accuracy_hours"][t]
            reached = sum(run["time_to_accuracy_hours"][t] is not None for run in v["runs"])
            cells.append(f"{'never' if h is None else f'{h * 3600:.1f}'} ({reached} of {len(v['runs'])})")
        cells.append(ratio(v["speedup"][top]))
        cells.append(", ".join("-" if run["epochs_to_accuracy"][top] is None else f"{run['epochs_to_accuracy'][top]:g}" for run in v["runs"]))
        cells.append(num(v.get("median_seconds_per_epoch"), 1))
        cells.append(num(v.get("items_per_second"), 0))
        cells.append(", ".join(num(run.get("final_accuracy"), 2) for run in v["runs"]))
        if held:
            cells.append(seed_gap_median(v["runs"]))
        rows.append(cells)
    runs = s["runs"]
    commits = "; ".join(f"{commit_text(c['commit'], c['dirty'])} ({c['runs']} runs)" for c in runs["commits"])
    machines = "; ".join(
        f"{m.get('cpu_model')}, {m.get('cpu_count')} CPUs, {m.get('platform')}, Python {m.get('python')}, {m.get('framework')} {m.get('framework_version')}, {m.get('device')} ({m['runs']} runs)"
        for m in runs["machines"]
    )
    seeds = ", ".join(str(x) for x in s["seeds"])
    file_seeds = f" (in place of the study file's {', '.join(str(x) for x in s['study_file_seeds'])})" if s.get("study_file_seeds") else ""
    missing = f" {runs['runs_without_run_json']} runs had no run.json." if runs.get("runs_without_run_json") else ""
    made = f"`{s['made_by']}`" if s.get("made_by") else "the study stage"
    verdicts = study_verdicts(s)
    return [
        f"Runs made by {made}, between {runs['first_started']} and {runs['last_finished']}, at {commits}; on {machines}.{missing} "
        f"Summarised by the study stage ({s['generated']}) and recorded by `{r['command']}` on {r['date']} at {commit_text(r.get('commit'), r.get('dirty'))}"
        f"{', on ' + machine_text(r['machine']) if r.get('machine') else ''} (record: [{link}]({link})).",
        "",
        f"Base `{s['base']}`, design {s['design']}, seeds {seeds}{file_seeds}; medians over seeds, a seed that did not reach a rung "
        f"counting as infinitely slow; speed-up: the base's median over the variant's.",
        "",
        *table(header, rows),
        "",
        *verdicts,
    ]


def study_checks(s: dict[str, Any], root: Path = ROOT) -> tuple[list[dict[str, Any]], str]:
    """A study record's checks: its own, or (a record made before studies
    had checks) the study file's of today, said so; and where they came from."""
    _src_on_path(root)
    from dawnpipe.fileio import read_yaml
    from dawnpipe.studies.checks import parse_checks

    if s.get("checks") is not None:
        return s["checks"], "the record's"
    path = root / "config" / "studies" / f"{s['study']}.yaml"
    doc = read_yaml(path) if path.is_file() else {}
    ids = [v["id"] for v in s["variants"]]
    return parse_checks(
        doc.get("checks"), ids, s["base"], s["ladder"], str(path.relative_to(root))
    ), f"`config/studies/{s['study']}.yaml`'s (the record has none)"


def study_verdicts(s: dict[str, Any], root: Path = ROOT) -> list[str]:
    """The verdict line of a study record: every check decided again from
    the record's per-run values by dawnpipe.verdict's rule (docs/rules.md),
    never copied from prose or from the record's own verdicts."""
    from dawnpipe.studies.checks import evaluate_all, line

    checks, whose = study_checks(s, root)
    if not checks:
        return ["**Verdict**: none computed: the study states its claim in words only (no `checks:`)."]
    results = evaluate_all(checks, s["variants"])
    counts = {k: sum(r["verdict"] == k for r in results) for k in ("reproduced", "not reproduced", "inconclusive")}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    return [
        f"**Verdict** ({summary}), each of {whose} checks decided from the runs above by the rule of "
        "[rules.md](rules.md#verdicts-over-seeds) (90% intervals; a seed that never reached a rung counts as infinitely slow):",
        "",
        *(f"- {line(r, markdown=True)}" for r in results),
    ]


def _src_on_path(root: Path = ROOT) -> None:
    if str(root / "src") not in sys.path:
        sys.path.insert(0, str(root / "src"))


def render_program_overhead(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    header = ["side", f"the program's training clock per run (s), {res['items']:,} items, {res['threads']} threads", "median"]
    ours = f"Entry `{res['entry']}`; dawnpipe's own clock of the harness runs: {seconds_list(res['harness_dawnpipe_seconds'])} s; "
    if "interval" not in res:  # a record of the bench before it ran in pairs and recorded its goal
        rows = [
            ["bare (the program alone)", seconds_list(res["bare_seconds"]), num(res["median_bare_seconds"], 2, " s")],
            ["through dawnpipe (train stage)", seconds_list(res["harness_seconds"]), num(res["median_harness_seconds"], 2, " s")],
        ]
        return [
            *table(header, rows),
            "",
            ours + f"program harness overhead (through dawnpipe / bare, medians): **{res['overhead']:.3f}x**; no interval, no goal in this record.",
        ]
    rows = [
        ["bare (the program alone)", seconds_list(res["bare_seconds"]), num(res["median_bare_seconds"], 2, " s")],
        [
            "through dawnpipe, training (its clock less the export)",
            seconds_list(res["harness_training_seconds"]),
            num(res["median_harness_training_seconds"], 2, " s"),
        ],
        [
            "through dawnpipe, the export of its weights (on its clock)",
            seconds_list(res["harness_export_seconds"]),
            num(res["median_harness_export_seconds"], 2, " s"),
        ],
    ]

    def shown(estimate: float, interval: list[float | None]) -> str:
        low, high = interval
        return f"**{estimate:.3f}x**" + (
            f" [{low:.3f}, {high:.3f}] ({100 * res['confidence']:.1f}% interval)" if low is not None else " (too few pairs for an interval)"
        )

    return [
        *table(header, rows),
        "",
        ours + f"{res['repeats']} pairs, their ratios (training through dawnpipe / bare): {', '.join(f'{x:.3f}' for x in res['pair_ratios'])}; "
        f"program harness overhead (the median of the pairs' ratios): {shown(res['overhead'], res['interval'])}; "
        f"goal at most {res['goal']:g}, decided by the interval: **{res['goal_verdict']}**. "
        f"With the export of the weights counted, as the clock counts it: {shown(res['overhead_with_export'], res['interval_with_export'])}.",
    ]


def render_program_clock(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    rows = []
    for run in res["runs"]:
        for e in run["epochs"]:
            rows.append(
                [
                    f"{run['contract']}",
                    f"{run['repeat']}",
                    f"{e['epoch']}",
                    num(e["self_seconds"], 3),
                    num(e["dawnpipe_seconds"], 3),
                    f"{e['error_seconds']:+.3f}",
                    num(e["goal_seconds"], 3),
                ]
            )
    out = table(["contract", "repeat", "epoch", "the program's own (s)", "dawnpipe's clock (s)", "error (s)", "goal (s)"], rows)
    return [
        *out,
        "",
        f"`{res['program']}`, {res['items']:,} training items, hidden width {res['hidden']}, {res['threads']} threads; goal: {res['goal']}. "
        f"Largest error **{res['max_error_seconds']:.3f} s**, {res['max_share_of_goal']:.2f} of the goal: "
        f"**{'met' if res['within_goal'] else 'not met'}**.",
    ]


def render_stability(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    threshold = f"{res['threshold']:g}%"
    limits = [f"{k.replace('_', ' ')} {res[k]}" for k in ("train_limit", "test_limit", "threads") if res.get(k) is not None]
    out = table(
        ["seed", f"seconds to {threshold} (training clock)", f"epochs to {threshold}"],
        [
            [
                str(run["seed"]),
                num(run["time_to_accuracy_seconds"], 1) if run["reached"] else "did not reach",
                "-" if run["epochs_to_accuracy"] is None else f"{run['epochs_to_accuracy']:g}",
            ]
            for run in res["runs"]
        ],
    )
    return [
        *out,
        "",
        f"`{res['entry']}` ({res['framework']}){' (' + ', '.join(limits) + ')' if limits else ''}: median **{num(res['median_seconds'], 1, ' s')}**, "
        f"coefficient of variation {spread(res['cov'], res['runs_total'])}, **{res['reached_runs']} of {res['runs_total']}** seeds reached {threshold}.",
    ]


def render_page_load(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    rows = [
        [
            name,
            f"{page['bytes'] / 1e6:.2f} MB",
            num(page["median_load_event_s"], 2, " s"),
            f"{page['charts_in_window']}: {num(page['median_charts_in_window_s'], 2, ' s')}",
            num(page["median_first_chart_s"], 2, " s"),
        ]
        for name, page in res["pages"].items()
    ]
    out = table(["page", "size", "load event (median)", "charts in the window: all drawn (median)", "first chart drawn once scrolled to (median)"], rows)
    verdict = "met" if res["goal_met"] else "**not met**"
    return [
        *out,
        "",
        f"{res['repeats']} openings of each page in fresh contexts of one Chromium {res['chromium']}, the pages alternating; "
        f"goal for {res['runs']:,} runs (load event and the charts in the window within {res['goal_s']:g} s, "
        f"a chart within {res['chart_goal_s']:g} s of being scrolled to): {verdict}.",
    ]


def render_default_run(r: dict[str, Any]) -> list[str]:
    res = r["result"]
    stages = table(["stage", "its jobs' seconds, summed"], [[f"`{k}`", num(v, 1)] for k, v in sorted(res["stages"].items(), key=lambda kv: -kv[1])])
    runs = table(
        ["run", "time to its threshold (training clock)", "epochs"],
        [
            [
                f"`{x['entry']}` seed {x['seed']}",
                f"{x['seconds']:.1f} s to {x['threshold']:g}%" if x["reached"] else f"did not reach {x['threshold']:g}%",
                "-" if x["epochs"] is None else f"{x['epochs']:g}",
            ]
            for x in res["runs"]
        ],
    )
    configs = " with " + ", ".join(f"`{c}`" for c in res["configfiles"]) if res["configfiles"] else ""
    verdict = "met" if res["budget_met"] else "**not met**"
    return [
        f"`snakemake --cores {res['cores']} results/leaderboard.html`{configs} in a fresh clone, from no data and no results: "
        f"**{num(res['seconds'], 0, ' s')}** of wall-clock time; the budget of {res['budget_seconds'] // 60:g} minutes: {verdict}.",
        "",
        *stages,
        "",
        *runs,
    ]


def _verdict(within: bool | None, tolerance: list[float]) -> str:
    shown = f"{tolerance[0]:g}-{tolerance[1]:g}"
    return "-" if within is None else f"yes ({shown})" if within else f"**no** ({shown})"


def render_gpu_check(r: dict[str, Any]) -> list[str]:
    """The GPU check (bench/gpu_check.sh): what it ran on, its figures, each beside its reference."""
    s = r["result"]
    m, steps = s["machine"], s["steps"]
    gpu = (m.get("gpu") or {}).get("name") or "no GPU"
    torch = m.get("torch") or {}
    counts = ", ".join(f"{n} {k}" for k in ("ok", "failed", "timeout", "skipped", "interrupted") if (n := sum(st["status"] == k for st in steps.values())))
    out = [
        f"**{gpu}**, driver {m.get('driver') or '-'} (CUDA {m.get('driver_cuda') or '-'}); torch {torch.get('version') or '-'} built for CUDA "
        f"{torch.get('cuda') or '-'} ({torch.get('origin') or '-'}); steps: {counts}.",
        "",
    ]
    rows = [
        [
            f"`{run}`",
            t.get("device") or "-",
            t.get("precision") or "-",
            f"{num(t['time_to_accuracy_s'], 1, ' s')} to {t['threshold']:g}%"
            if t.get("reached")
            else f"did not reach {t['threshold']:g}%"
            if t.get("reached") is False
            else "-",
            "-" if t.get("epochs_to_accuracy") is None else f"{t['epochs_to_accuracy']:g}",
            num(t.get("epoch_seconds_median"), 2),
            num(t.get("epoch_seconds_after_first"), 2),
        ]
        for run, t in s["training"].items()
    ]
    out += table(["run", "device", "precision", "time to the threshold", "epochs", "s / epoch", "after the first"], rows) + [""]
    rows = []
    for run, inf in s["inference"].items():
        for backend, b in (inf.get("backends") or {}).items():
            tp = b.get("throughput_items_per_second") or {}
            rows.append(
                [f"`{run}` {backend}", b["device"], num(b["latency_mean_ms"], 3), num(b["latency_p99_ms"], 3)]
                + [num(tp.get(k), 0) for k in ("1", "8", "64", "256")]
            )
        rows += [[f"`{run}` {f['backend']}", "failed", f["reason"][:80], "", "", "", "", ""] for f in inf.get("failed") or []]
    if rows:
        out += table(["inference", "device", "ms / item", "p99 ms", "items/s at 1", "8", "64", "256"], rows) + [""]
    rows = []
    for run, t in s["telemetry"].items():
        u, ref = s["utilization"][run], s["references"]["utilization"]["runs"].get(run, {})
        rows.append(
            [
                f"`{run}`",
                num(t.get("power_w_mean"), 0),
                num(t.get("energy_to_accuracy_j"), 0, " J"),
                num(u.get("achieved_tflops_median"), 3),
                pct(ref.get("fraction_of_datasheet")),
                pct(ref.get("achieved_over_matmul")),
            ]
        )
    out += table(["run", "mean power W", "energy to the threshold", "achieved TFLOP/s", "of the datasheet peak", "of the measured matrix product"], rows) + [""]
    refs = s["references"]
    rows = []
    for precision, p in (refs["peak"].get("precisions") or {}).items():
        rows.append(
            [
                f"{precision} matrix product, {p['n']}²: {num(p['measured_tflops'], 1)} TFLOP/s",
                f"the datasheet's {num(p['datasheet_tflops'], 1)} TFLOP/s",
                ratio(p["measured_over_datasheet"]),
                _verdict(p["within"], refs["peak"]["tolerance"]),
            ]
        )
    for run, u in refs["utilization"]["runs"].items():
        if u.get("achieved_over_matmul") is not None:
            rows.append(
                [
                    f"`{run}`'s achieved rate",
                    f"the {u['precision']} matrix product",
                    ratio(u["achieved_over_matmul"]),
                    _verdict(u["within"], refs["utilization"]["tolerance"]),
                ]
            )
    tc = refs["training_clock"]
    if tc.get("clock_over_events") is not None:
        rows.append(
            [
                f"`{tc['entry']}`'s training clock, {len(tc['epochs'])} epochs: {num(tc['clock_total_s'], 3, ' s')}",
                f"CUDA events around the same epochs: {num(tc['events_total_s'], 3, ' s')}",
                ratio(tc["clock_over_events"]),
                _verdict(tc["within"], tc["tolerance"]),
            ]
        )
    for backend, b in (refs["inference_latency"].get("backends") or {}).items():
        rows.append(
            [
                f"`fastnet` {backend}, one item: {num(b['clock_mean_ms'], 4)} ms (the stage: {num(b['stage_mean_ms'], 4)} ms)",
                f"CUDA events around the same items: {num(b['events_mean_ms'], 4)} ms",
                ratio(b["clock_over_events"]),
                _verdict(b["within"], refs["inference_latency"]["tolerance"]),
            ]
        )
    for run, e in refs["energy"].items():
        if e.get("counter_over_power_time") is not None:
            rows.append(
                [
                    f"`{run}`: NVML's energy counter to the threshold, {num(e['energy_to_accuracy_j'], 0, ' J')}",
                    f"mean power x time, same epochs: {num(e['mean_power_times_time_j'], 0, ' J')}",
                    ratio(e["counter_over_power_time"]),
                    _verdict(e["within"], e["tolerance"]),
                ]
            )
    if rows:
        out += table(["figure", "its reference, measured on the card in the same run", "ratio", "within"], rows) + [""]
    d, g, p = s["ddp"], s["gpu_vs_cpu"], s["program"]
    out.append(
        f"DDP at world size 1: backend {d.get('backend') or '-'}"
        + (f" (NCCL {d['nccl_version']})" if d.get("nccl_version") else "")
        + f", launcher {d.get('launcher') or '-'}, {num(d.get('epoch_seconds_median'), 2)} s an epoch against {num(d.get('single_process_epoch_seconds_median'), 2)} "
        "in one process; one rank, so the launcher and the process group are exercised, not communication between GPUs."
    )
    out.append("")
    out.append(
        f"The same entry on the machine's CPU: {num(g.get('cpu_epoch_seconds_median'), 1)} s an epoch over {g.get('cpu_epochs') or '-'} epoch(s), "
        f"{ratio(g.get('cpu_over_gpu_epoch_time'))} the GPU's; to the threshold: {ratio(g.get('cpu_over_gpu_time_to_accuracy'))}"
        + (f" ({g['reasons']['cpu_over_gpu_time_to_accuracy']})" if g.get("cpu_over_gpu_time_to_accuracy") is None and g.get("reasons") else "")
        + "."
    )
    out.append("")
    out.append(
        f"The program entry `torch-fmnist` trained on {p.get('device') or '-'}, its model scored by {p.get('scored_by') or '-'}; "
        f"inference: {', '.join(f'{b} on {dev}' for b, dev in (p.get('inference_devices') or {}).items()) or '-'}."
    )
    bad = [(n, st) for n, st in steps.items() if st["status"] not in ("ok",) and not st.get("by_design")]
    if bad:
        out += ["", "Steps that did not succeed:", ""] + [f"- `{n}`: {st['status']}: {st.get('reason', '')}" for n, st in bad]
    return out


def render_generic(r: dict[str, Any]) -> list[str]:
    rows = [[f"`{k}`", json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else str(v)] for k, v in sorted(r.get("result", {}).items())]
    return table(["field", "value"], rows)


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "tta": render_tta,
    "overhead": render_overhead,
    "latency": render_latency,
    "audit": render_audit,
    "telemetry_overhead": render_telemetry_overhead,
    "program_overhead": render_program_overhead,
    "program_clock": render_program_clock,
    "page_load": render_page_load,
    "default_run": render_default_run,
    "gpu_check": render_gpu_check,
}


# --- blocks ------------------------------------------------------------------


def missing_line(name: str, root: Path = ROOT) -> str:
    if name.startswith("study-"):
        study = name.removeprefix("study-")
        if str(root / "bench") not in sys.path:
            sys.path.insert(0, str(root / "bench"))
        from studies import made_by

        if made_by(study, root=root) is None:
            run = f"snakemake --cores all results/studies/{study}.html --configfile <the config naming it>"
            return f"Not measured yet: run `{run}`, then `python bench/studies.py {study} --record` and `make docs`."
        return f"Not measured yet: run `python bench/studies.py {study} --run --record` (it runs the study's Snakemake command first), then `make docs`."
    if name.startswith("stability-"):
        entry = name.removeprefix("stability-")
        return f"Not measured yet: run `python bench/stability.py config/entries/{entry}.yaml --seeds 5 --record`, then `make docs`."
    return f"Not measured yet: run `{COMMANDS.get(name, f'python bench/{name}.py --record')}`, then `make docs`."


def render_block(page: Path, link: str, root: Path = ROOT) -> str:
    """The body of one generated block of ``page``: the record at ``link`` (relative
    to the page) rendered, or the line saying how to make it."""
    record_path = page.parent / link
    name = record_path.stem
    if not record_path.is_file():
        return missing_line(name, root) + "\n"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if name.startswith("study-"):
        body = render_study(record, link)
    else:
        render = render_stability if name.startswith("stability-") else RENDERERS.get(name, render_generic)
        body = provenance(record, link) + render(record)
    return "\n".join(body) + "\n"


def generate(text: str, page: Path, root: Path = ROOT) -> str:
    """``text`` of ``page`` with every generated block made afresh from its record."""

    def block(m: re.Match) -> str:
        return m.group(1) + render_block(page, m.group("path"), root) + m.group(4)

    return BLOCK.sub(block, text)


def pages(docs: Path = DOCS) -> list[Path]:
    return sorted(p for p in docs.glob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page differs from a fresh generation")
    p.add_argument("--docs", type=Path, default=DOCS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    stale = []
    for page in pages(args.docs):
        text = page.read_text(encoding="utf-8")
        fresh = generate(text, page)
        if fresh != text:
            stale.append(page)
            if not args.check:
                page.write_text(fresh, encoding="utf-8")
                print(f"docs: regenerated {page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}")
    if args.check and stale:
        names = ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in stale)
        print(f"docs: generated tables out of date in {names}: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
