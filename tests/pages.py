"""Leaderboard pages built from records the real record code makes, and the
browser that opens them: what tests/test_page_browser.py and
bench/page_load.py share, so that the bench times the very pages the tests
check, opened the same way.

Records: ``result`` is an inference result made by the real
``latency_record`` (answers timed on a virtual clock, no framework), ``run``
a run around such results; tests/test_infer_report.py builds its pages from
them too. Pages: ``many_runs_page`` (the 1,000-run page of the browser test)
and ``default_page`` (the shape of config/config.yaml's run: its entries and
seeds, one result per PyTorch backend it lists). Browser: the Debian
``chromium`` that Playwright drives (``executable_path``), launched with
``LAUNCH_ARGS``, and a context that blocks and records every request leaving
the page's file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from dawnpipe import leaderboard
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_parquet
from dawnpipe.infer.items import KINDS, InferenceSet
from dawnpipe.infer.predictor import Predictor
from dawnpipe.infer.result import latency_record
from dawnpipe.infer.summary import headline
from dawnpipe.infer.throughput import measure_throughput
from dawnpipe.infer.timing import time_items
from dawnpipe.report.render import render_html
from dawnpipe.report.rows import objective_rows
from dawnpipe.tasks import get_task

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_ARGS = ["--no-sandbox"]  # the sandbox needs user namespaces, which containers and CI runners often lack
VIEWPORT = {"width": 1400, "height": 1000}
HANG_GUARD_MS = 60_000  # a wait in the browser this long is a hang, not a slow page: never a claim on speed

# JavaScript: the charts in the window (not in a closed <details>); and
# whether every one of them holds plotly's SVG with its traces (vacuously true
# while the document is still being parsed, so the page must be past that).
CHARTS_IN_WINDOW = """() => [...document.querySelectorAll('div.chart')]
    .filter(c => c.closest('details:not([open])') === null)
    .filter(c => { const r = c.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; })"""
CHARTS_IN_WINDOW_DRAWN = f"""() => document.readyState !== 'loading'
    && ({CHARTS_IN_WINDOW})().every(c => c.querySelector('svg.main-svg .trace'))"""


def result(directory: Path, entry: str, seed: int, backend: str, cost_ms: float, accuracy: float, threshold: float, demo: bool = True) -> dict:
    """A real result record + per-item Parquet: ``accuracy`` percent of 200 items right, each costing about ``cost_ms``."""
    n = 200
    labels = np.arange(n) % 10
    right = int(round(accuracy / 100 * n))
    answers = np.where(np.arange(n) < right, labels, (labels + 1) % 10)
    clock = [0.0]
    rng = np.random.default_rng(seed)
    costs = cost_ms * rng.lognormal(0, 0.3, size=n) / 1000

    def predict(i):
        clock[0] += costs[i]
        return int(answers[i])

    times = time_items(predict, list(range(n)), warmup=3, clock=lambda: clock[0])
    predictor = Predictor(
        backend=backend,
        predict=predict,
        device="cpu",
        threads=1,
        precision="fp32",
        framework_version="test 1.0",
        export_check={"items": 64, "max_abs_diff": 1e-7, "differing_predictions": 0, "atol": 1e-3, "rtol": 1e-3},
    )
    run_info = {
        "entry": entry,
        "seed": seed,
        "model": "fastnet",
        "framework": "pytorch",
        "hardware": "local-cpu",
        "threshold": threshold,
        "official_threshold": 93.0,
        "demo_threshold": demo,
    }

    def predict_batch(batch):  # 1 ms a batch + 0.1 ms an item; batches of 8 and more answer item 0 wrongly
        clock[0] += (1.0 + 0.1 * len(batch)) / 1000
        return [int(answers[i]) if (i or len(batch) < 8) else -1 for i in batch]

    # batch sizes out of order on purpose: the page lists the smallest first
    throughput = measure_throughput(
        predict_batch, list(range(n)), single_answers=times.answers, batch_sizes=(64, 8, 1, 256), min_seconds=0.01, clock=lambda: clock[0]
    )
    task, kind = get_task("fashion-mnist"), KINDS["image"]
    scored = kind.score(task, times.answers, InferenceSet(items=list(range(n)), truth=labels, data=directory))
    record, per_item = latency_record(
        run_info=run_info,
        task=task,
        kind=kind,
        predictor=predictor,
        times=times,
        scored=scored,
        usd_per_hour=0.1,
        checkpoint=directory / "model.pt",
        cpu_model="test cpu",
        measured="2026-01-01T00:00:00+00:00",
        throughput=throughput if backend == "onnxruntime" else None,
    )
    path = directory / f"{entry}-{seed}-{backend}.parquet"
    write_parquet(path, per_item)
    return {**record, "per_item_path": str(path)}


def run(
    entry: str, seed: int, tta_hours: float | None, latencies: list[dict], threshold: float = 90.0, demo: bool = True, usd_per_hour: float | None = None
) -> dict:
    env = {"cpu_model": "test cpu", "threads": 2, "framework": "pytorch", "framework_version": "2", "git": {"commit": None, "dirty": None}}
    info = {
        "entry": entry,
        "seed": seed,
        "task": "fashion-mnist",
        "model": "fastnet",
        "hardware": "local-cpu",
        "framework": "pytorch",
        "threshold": threshold,
        "demo_threshold": demo,
        "finished": "2026-01-01T00:00:00+00:00",
        "environment": env,
        "config_hash": "x",
    }
    tta = {
        "task": "fashion-mnist",
        "threshold": threshold,
        "demo_threshold": demo,
        "reached": tta_hours is not None,
        "time_to_accuracy_hours": tta_hours,
        "wall_time_to_accuracy_hours": tta_hours,
        "epochs_to_accuracy": 3 if tta_hours else None,
        "cost_usd": None if tta_hours is None or usd_per_hour is None else tta_hours * usd_per_hour,
        "best_metric": 91.0,
        "reason": None if tta_hours else "did not converge",
    }
    log = pd.DataFrame({"epoch": [1, 2, 3], "hours": [0.01, 0.02, 0.03], "top1Accuracy": [80.0, 88.0, 91.0]})
    latencies = sorted(latencies, key=lambda r: r["latency_mean_ms"])
    return {"run": info, "tta": tta, "log": log, "latencies": latencies, "latency": headline(latencies)}


# Seconds to the threshold of each seed (None: never reached) of entries whose
# seeds tie and beat each other by the rule of dawnpipe.verdict: A beats C, B
# ties both; D has one seed; E has no median (2 of 4 never); F has a seed that
# never reached; G has five seeds; H is slow.
SEED_SECONDS = {
    "entry-a": [10.0, 11.0, 12.0],
    "entry-b": [11.5, 12.5, 13.5],
    "entry-c": [13.0, 14.0, 15.0],
    "entry-d": [5.0],
    "entry-e": [8.0, 9.0, None, None],
    "entry-f": [9.0, 9.5, None],
    "entry-g": [9.0, 10.0, 11.0, 12.0, 13.0],
    "entry-h": [20.0, 21.0, 22.0],
}


def seeds_runs(usd_per_hour: float | None = None) -> list[dict]:
    """Runs of SEED_SECONDS (tests/test_leaderboard_seeds.py, tests/test_page_browser.py)."""
    return [run(e, s, None if t is None else t / 3600, [], usd_per_hour=usd_per_hour) for e, times in SEED_SECONDS.items() for s, t in enumerate(times)]


def write_page(runs: list[dict], path: Path, config_name: str) -> Path:
    """The leaderboard page of ``runs`` (no submissions), rendered by the report stage's own code."""
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    board.update(generated="now", config=config_name)
    path.write_text(render_html(board, runs, [], config_name=config_name), encoding="utf-8")
    return path


def many_runs_page(directory: Path, runs: int = 1000) -> Path:
    """A page of ``runs`` runs: 50 entries, seeds 0, 1, ... of each, every run
    with one eager result (seven real records, reused)."""
    timed = [result(directory, "entry", k, "eager", 1.0 + k / 10, 92.0, 90.0) for k in range(7)]
    made = [run(f"entry{k % 50}", k // 50, 0.01 + 0.0001 * k, [{**timed[k % 7], "entry": f"entry{k % 50}", "seed": k // 50}]) for k in range(runs)]
    return write_page(made, directory / f"leaderboard-{runs}-runs.html", "thousand" if runs == 1000 else f"{runs} runs")


# Per-item cost (ms) of each backend on the default page: the order of the
# default run's measured latencies (README, "The default run"), not their values.
BACKEND_COST_MS = {"eager": 2.0, "torchscript": 1.9, "compile": 1.5, "onnxruntime": 1.1, "onnxruntime-int8": 0.4}


def default_page(directory: Path) -> tuple[Path, int]:
    """A page of the shape of config/config.yaml's run: each of its entries on
    each of its seeds, one result per PyTorch backend it lists, at its demo
    threshold. Returns the page and its number of runs."""
    from dawnpipe.infer.backends import backends_for
    from dawnpipe.pipeline.config import resolve

    config = resolve([], root=ROOT).values
    threshold = float(config["thresholds"]["fashion-mnist"])
    backends = backends_for("pytorch", "image", list(config["inference"]["backends"]))
    made = []
    for i, entry in enumerate(config["entries"]):
        for seed in config["seeds"]:
            results = [result(directory, entry, seed, b, BACKEND_COST_MS.get(b, 1.0) * (1 + i / 2), 91.0, threshold) for b in backends]
            made.append(run(entry, seed, 0.03 * (1 + i), results, threshold=threshold))
    return write_page(made, directory / "leaderboard-default.html", str(config["name"])), len(made)


def chromium_path() -> str:
    """The Debian package's Chromium (Playwright's own download is not used: one browser, the system's)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise DawnpipeError("no chromium on PATH: `make setup` installs the Debian package chromium where apt is usable (apt-get install chromium)")
    return path


def launch(playwright):
    """Headless Chromium, as every browser test and bench/page_load.py open it."""
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=LAUNCH_ARGS)


def page_context(browser, url: str, outside: list[str], viewport: dict = VIEWPORT):
    """A fresh context (nothing cached or compiled from another) in which only
    ``url`` itself loads: any other request is aborted and appended to ``outside``.
    Its waits give up after HANG_GUARD_MS."""
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(HANG_GUARD_MS)

    def route(r):
        if r.request.url == url:
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return context
