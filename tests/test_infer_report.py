"""The inference parts of the leaderboard page: backend and threads in the
latency/cost tables, a latency distribution per result, latency against
training time per task; every text escaped. Records come from the real
``latency_record`` (timed answers from a virtual clock, no framework; tests/pages.py)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import CHART_DATA, chart_specs, without_own_script
from pages import result, run

from dawnpipe import leaderboard
from dawnpipe.report.charts import histogram, scatter
from dawnpipe.report.render import render_html
from dawnpipe.report.rows import objective_rows

EVIL = '<script>alert("x")</script>'


@pytest.fixture
def page(tmp_path):
    runs = [
        run(EVIL, 0, 0.03, [result(tmp_path, EVIL, 0, "eager", 2.0, 92.0, 90.0), result(tmp_path, EVIL, 0, "onnxruntime-int8", 0.5, 89.0, 90.0)]),
        run("fastnet", 1, 0.02, [result(tmp_path, "fastnet", 1, "eager", 1.5, 91.0, 90.0), result(tmp_path, "fastnet", 1, "onnxruntime", 0.7, 91.0, 90.0)]),
    ]
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    board.update(generated="now", config="test")
    return runs, board, render_html(board, runs, [], config_name="test")


def test_latency_tables_show_backend_and_threads(page):
    runs, board, html = page
    latency = next(t for t in board["objectives"] if t["objective"] == "inference_latency" and t["rows"])
    assert [(r["backend"], r["threads"]) for r in latency["rows"]] == [("onnxruntime", 1), ("eager", 1), ("eager", 1)]
    assert [r["value"] for r in latency["rows"]] == sorted(r["value"] for r in latency["rows"])
    # a result over fewer items than the test set (here 200 of 10,000) says so where it is ranked
    assert '<td>onnxruntime, 1 thr. <span class="tag">200 of 10000 items</span></td>' in html
    assert all(r["items"] == 200 and r["official_items"] == 10000 for r in latency["rows"])
    # below the threshold: not ranked, listed with its accuracy
    assert [e["source"] for e in board["excluded"]] == [f"runs/{EVIL}/seed0"]
    assert "89.00% with backend onnxruntime-int8" in board["excluded"][0]["reason"]


def test_throughput_is_shown_beside_latency_smallest_batch_first(page):
    runs, board, html = page
    section = html[html.index('id="inference"') :]
    cells = re.findall(r'<td class="num">([^<]*<span class="muted">@\d+</span>.*?)</td>', section)
    assert len(cells) == 1  # one result measured it; the others say "not measured"
    assert re.findall(r"@(\d+)", cells[0]) == ["1", "8", "64", "256"]
    for b in (1, 8, 64, 256):
        assert f'{b / (1.0 + 0.1 * b) * 1000:,.0f} <span class="muted">@{b}</span>' in cells[0]
    assert cells[0].count("1 answers differ from one at a time") == 3  # batches of 8, 64, 256
    assert section.count("not measured") == 3


def test_page_has_a_distribution_per_result_and_a_scatter_per_task(page):
    runs, board, html = page
    section = html[html.index('<h2 id="inference">') :]
    n_results = sum(len(r["latencies"]) for r in runs)
    assert section.count("latency per item (ms, log scale)") == n_results
    scatter_chart = chart_specs(section)[0]
    assert scatter_chart["layout"]["title"]["text"] == "inference latency against training time"
    # ranked results (int8 is below the threshold), one legend item per backend, each point naming its run
    assert sorted(t["name"] for t in scatter_chart["data"]) == ["eager", "onnxruntime"]
    assert sum(len(t["x"]) for t in scatter_chart["data"]) == 3
    assert {h for t in scatter_chart["data"] for h in t["text"]} >= {"fastnet seed 1 (eager)", "fastnet seed 1 (onnxruntime)"}
    assert "below 90.0: not ranked" in section and "200 of 10000 items" in section and "built-in method" not in section
    assert "max |&Delta;| 1e-07 on 64 items" in section


@pytest.mark.parametrize("demo", [True, False])
def test_demo_threshold_is_labelled_in_the_chart_and_the_inference_section(tmp_path, demo):
    threshold = 90.0 if demo else 93.0
    runs = [
        run(
            "fastnet",
            0,
            0.02,
            [
                result(tmp_path, "fastnet", 0, "eager", 1.0, 95.0, threshold, demo=demo),
                result(tmp_path, "fastnet", 0, "onnxruntime", 0.5, 85.0, threshold, demo=demo),
            ],
            threshold=threshold,
            demo=demo,
        )
    ]
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    board.update(generated="now", config="test")
    html = render_html(board, runs, [], config_name="test")
    inference = html[html.index('<h2 id="inference">') :]
    inference = inference[: inference.index("</table>")]
    curve = next(c for c in chart_specs(html) if "accuracy against training time" in c["layout"]["title"]["text"])
    lines = {t["name"]: t for t in curve["data"]}
    if demo:
        assert f"threshold {threshold:g} (demo threshold)" in lines and lines[f"threshold {threshold:g} (demo threshold)"]["y"] == [threshold] * 2
        assert 'aria-label="Fashion-MNIST: accuracy against training time (demo threshold)"' in html
        assert inference.count("demo threshold 90.0 (official 93.0)") == 2  # each result, ranked or not
        assert "below 90.0: not ranked" in inference
    else:
        assert lines["threshold 93"]["y"] == [93.0, 93.0]
        assert "demo threshold" not in html.lower()


def test_every_text_is_escaped(page):
    runs, board, html = page
    assert EVIL not in html and "&lt;script&gt;" in html
    assert not re.search(r"<script", without_own_script(html))
    charts = scatter([(EVIL, EVIL, 1.0, 2.0)], x_label=EVIL, y_label=EVIL, title=EVIL) + histogram([1.0, 2.0], x_label=EVIL, marks=[(EVIL, 1.5)], title=EVIL)
    assert "<script" not in CHART_DATA.sub("", charts)  # the figures' JSON (no '<' in it) aside
    # in the figures, every text escaped for plotly, which decodes entities and renders a few tags
    specs = chart_specs(str(charts))
    texts = json.dumps(specs)
    assert "<script" not in texts and texts.count("&lt;script&gt;") >= 6
    assert specs[0]["layout"]["title"]["text"] == '&lt;script&gt;alert("x")&lt;/script&gt;'


def test_histogram_counts_every_value_once():
    values = [0.1] * 5 + [1.0] * 3 + [10.0]
    (spec,) = chart_specs(str(histogram(values, x_label="ms", bins=10)))
    counts = [int(m) for h in spec["data"][0]["text"] for m in re.findall(r"^(\d+) items in", h)]
    assert sum(counts) == len(values) and sorted(c for c in counts if c) == [1, 3, 5] and len(counts) == 10
    assert "no data" in histogram([], x_label="ms")
