"""bench/page_load.py on a small page: the real browser opens both pages,
alternating, each opening printed; the medians it prints and records are the
medians of the openings it recorded, and its last line says so in the
agreed words (its correctness, not the page's speed: that is its number)."""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT, tool_env

from dawnpipe.pipeline.config import resolve

spec = importlib.util.spec_from_file_location("bench_page_load", ROOT / "bench/page_load.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

DEFAULT = resolve([], root=ROOT).values
OPENING = re.compile(r"^repeat (\d+)/3  (.+?): load event ([\d.]+) s, charts in window ([\d.]+) s, first chart ([\d.]+) s after scrolled to$", re.M)


@pytest.mark.slow
def test_bench_page_load_prints_the_medians_of_what_it_measured(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/page_load.py"), "--runs", "20", "--repeats", "3", "--record", "--record-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    record = json.loads((tmp_path / "page_load.json").read_text())
    assert record["name"] == "page_load" and record["command"] == "python bench/page_load.py --runs 20 --repeats 3"
    result = record["result"]
    assert result["runs"] == 20 and result["repeats"] == 3 and result["goal_met"] is None
    default = f"default config ({len(DEFAULT['entries']) * len(DEFAULT['seeds'])} runs)"  # config/config.yaml's entries x seeds
    assert set(result["pages"]) == {"20 runs", default}

    # every opening printed, the two pages alternating, as recorded
    openings = OPENING.findall(proc.stdout)
    assert [(r, name) for r, name, *_ in openings] == [
        ("1", "20 runs"),
        ("1", default),
        ("2", default),
        ("2", "20 runs"),
        ("3", "20 runs"),
        ("3", default),
    ]
    for name, page in result["pages"].items():
        printed = [tuple(float(x) for x in o[2:]) for o in openings if o[1] == name]
        measured = list(zip(page["load_event_s"], page["charts_in_window_s"], page["first_chart_s"], strict=True))
        assert printed == [tuple(round(x, 3) for x in m) for m in measured]
        assert all(min(m) > 0 for m in measured)
        # the medians are the medians of those openings, printed as recorded
        for key in ("load_event_s", "charts_in_window_s", "first_chart_s"):
            assert page[f"median_{key}"] == statistics.median(page[key])
        assert f"{name}: median {bench.times(page, 'median_')} ({page['charts_in_window']} charts in the window)" in lines
        assert page["bytes"] > 1_000_000  # plotly.js is in every page
    assert lines[-2] == "goal: not checked (it is for a page of 1,000 runs, not 20)"
    small = result["pages"]["20 runs"]
    assert lines[-1] == f"page load (20 runs): {small['median_load_event_s']:.2f} s median, charts in window {small['median_charts_in_window_s']:.2f} s"
    assert re.fullmatch(r"page load \(20 runs\): \d+\.\d\d s median, charts in window \d+\.\d\d s", lines[-1])


def medians(load: float, charts: float, first: float | None) -> dict:
    return {"median_load_event_s": load, "median_charts_in_window_s": charts, "median_first_chart_s": first}


def test_the_goal_is_met_only_when_every_median_is_within_it():
    line, met = bench.goal_line(1000, medians(1.1, 1.2, 0.4))
    assert met and line == "goal: load event and charts in window within 2 s, a chart scrolled to drawn within 1 s: met (medians 1.10 s, 1.20 s, 0.40 s)"
    assert bench.goal_line(1000, medians(2.01, 1.2, 0.4)) == (
        "goal: load event and charts in window within 2 s, a chart scrolled to drawn within 1 s: not met (medians 2.01 s, 1.20 s, 0.40 s)",
        False,
    )
    assert bench.goal_line(1000, medians(1.1, 2.4, 0.4))[1] is False
    assert bench.goal_line(1000, medians(1.1, 1.2, 1.3))[1] is False
    assert bench.goal_line(1000, medians(1.1, 1.2, None)) == (
        "goal: load event and charts in window within 2 s, a chart scrolled to drawn within 1 s: not met (medians 1.10 s, 1.20 s, no chart)",
        False,
    )
    assert bench.goal_line(50, medians(9.0, 9.0, 9.0)) == ("goal: not checked (it is for a page of 1,000 runs, not 50)", None)


def test_the_last_line_and_the_medians_of_an_even_count():
    page = bench.summary(
        [
            {"load_event_s": 1.0, "charts_in_window_s": 1.5, "charts_in_window": 0, "first_chart_s": 0.2},
            {"load_event_s": 3.0, "charts_in_window_s": 3.5, "charts_in_window": 0, "first_chart_s": None},
        ]
    )
    assert page["median_load_event_s"] == 2.0 and page["median_charts_in_window_s"] == 2.5 and page["median_first_chart_s"] is None
    assert bench.last_line(1000, page) == "page load (1,000 runs): 2.00 s median, charts in window 2.50 s"
