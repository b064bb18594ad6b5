"""The leaderboard page in a real browser: headless Chromium (the Debian
package), driven by Playwright, opens the page from its file with every
request leaving that file blocked and recorded. The page must load without a
console error, render every section and every chart (plotly.js, embedded
once; a chart is drawn when it comes near the window), show the run under
the pointer and hide a series from its legend, sort and filter its tables,
and (1,000 runs) load, with every chart in the window drawn, within two
seconds on this machine in a browser that has never seen it, each further
chart drawn within a second of being scrolled to. A screenshot of
the page of the real test workflow is kept in test-artifacts/ (git-ignored)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import ROOT

ARTIFACTS = ROOT / "test-artifacts"
LOAD_BUDGET_S = 2.0


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("no chromium on PATH: `make setup` installs the Debian package chromium where apt is usable (apt-get install chromium)")
    return path


class OpenPage:
    """The page of ``path`` in headless Chromium, its console errors, page errors and any request that left the file."""

    def __init__(self, path: Path):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            pytest.fail("playwright is not installed: `make setup` installs requirements.txt")
        self.url = path.resolve().as_uri()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        context = self.browser.new_context(viewport={"width": 1400, "height": 1000})

        def route(r):
            if r.request.url == self.url:
                r.continue_()
            else:
                self.outside.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        self.page = context.new_page()
        self.page.on("request", lambda req: req.url != self.url and self.outside.append(req.url))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"))
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))

    def load(self) -> float:
        """Seconds from navigation to the load event, as the browser measured them."""
        self.page.goto(self.url, wait_until="load")
        return self.page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd / 1000; }")

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


def column_keys(page, table: str, column: int) -> list[str]:
    return page.eval_on_selector_all(
        f"{table} tbody tr:not([hidden])", f"rows => rows.map(r => r.cells[{column}].getAttribute('data-sort') ?? r.cells[{column}].textContent.trim())"
    )


def numbers(keys: list[str]) -> list[float]:
    return [float(k) for k in keys if k != ""]


CHARTS = """cs => cs.map(c => ({
    hidden: c.closest('details:not([open])') !== null,
    in_window: c.getBoundingClientRect().bottom > 0 && c.getBoundingClientRect().top < window.innerHeight,
    drawn: c.hasAttribute('data-drawn'),
    height: c.querySelector('svg.main-svg') ? c.querySelector('svg.main-svg').getBoundingClientRect().height : 0,
    traces: c.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length,
    title: c.getAttribute('aria-label')}))"""


def drawn_charts(page) -> list[dict]:
    """Every chart of the page: hidden (in a closed <details>), in the window,
    drawn, and (drawn) the height of plotly's SVG and its number of traces."""
    return page.eval_on_selector_all("div.chart", CHARTS)


def hover_label(page, chart, point) -> str:
    """The hover label plotly shows with the pointer on ``point`` of ``chart``."""
    chart.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = chart.locator(".hoverlayer .hovertext")
    hover.first.wait_for(timeout=5000)
    return hover.first.text_content()


def assert_drawn(c: dict) -> None:
    assert c["drawn"] and c["height"] > 50 and c["traces"] > 0, f"chart {c['title']!r} not drawn: {c}"


def draw_every_chart(page, *, budget_s: float = 5.0) -> list[dict]:
    """Scroll to each chart not in a closed <details>; each must be drawn
    within ``budget_s`` of coming into the window. Returns the charts, drawn."""
    charts = drawn_charts(page)
    data = page.locator('script.chart-data[type="application/json"]').count()
    assert charts and len(charts) == data, f"{len(charts)} chart holders, {data} figures"
    assert page.locator("script#plotly-js").count() == 1 and page.evaluate("() => typeof Plotly") == "object"
    holders = page.locator("div.chart")
    for i, c in enumerate(charts):
        if c["hidden"]:
            continue
        holders.nth(i).scroll_into_view_if_needed()
        started = time.perf_counter()
        page.wait_for_function("i => document.querySelectorAll('div.chart')[i].querySelector('svg.main-svg .trace')", arg=i, timeout=budget_s * 1000)
        assert time.perf_counter() - started < budget_s, f"chart {c['title']!r} took {time.perf_counter() - started:.2f} s to draw"
    charts = drawn_charts(page)
    for c in charts:
        if not c["hidden"]:
            assert_drawn(c)
    return charts


@pytest.mark.slow
def test_the_page_of_a_real_run_works_in_a_real_browser(test_workflow):
    page_file = test_workflow / "results/leaderboard.html"
    browser = OpenPage(page_file)
    try:
        browser.load()
        page = browser.page
        # every section renders: each h2 and the element after it take up room on the page
        headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.id)")
        assert {"summary", "task-fashion-mnist", "no-results", "inference", "runs"} <= set(headings), headings
        assert headings.index("summary") < headings.index("task-fashion-mnist") < headings.index("no-results")
        for h in headings:
            box = page.locator(f"h2#{h}").bounding_box()
            following = page.locator(f"h2#{h} + *").bounding_box()
            assert box and box["height"] > 0 and following and following["height"] > 0, f"section {h} does not render"
        draw_every_chart(page)
        assert page.locator("#summary-table tbody tr").count() >= 2

        # the accuracy chart: the pointer on a point names its run (entry, seed) and its value
        curve = page.locator('div.chart[aria-label*="accuracy against training time"]').first
        label = hover_label(page, curve, curve.locator(".scatterlayer .trace path.point").first)
        assert "seed" in label and ("fastnet" in label or "resnet" in label) and "accuracy" in label, label
        # its legend: a click hides the first series, a second click shows it again
        lines = curve.locator(".scatterlayer .trace")
        before = lines.count()
        curve.locator(".legend .traces").first.click()
        page.wait_for_function(
            "n => document.querySelector('div.chart[aria-label*=\"accuracy against\"]').querySelectorAll('.scatterlayer .trace').length === n - 1", arg=before
        )
        curve.locator(".legend .traces").first.click()
        page.wait_for_function(
            "n => document.querySelector('div.chart[aria-label*=\"accuracy against\"]').querySelectorAll('.scatterlayer .trace').length === n", arg=before
        )
        # a chart in a closed <details> is drawn when it is opened
        closed = page.locator("details:not([open])", has=page.locator("div.chart"))
        if closed.count():
            closed.first.locator("summary").click()
            closed.first.locator("div.chart").first.wait_for()
            page.wait_for_function("() => document.querySelector('details[open] div.chart[data-drawn] svg.main-svg .trace')")
        page.evaluate("() => window.scrollTo(0, 0)")

        # sorting: the runs table by training time, both ways; the rank table by value
        runs = "#runs-table"
        header = page.locator(f"{runs} thead th", has_text="Training time")
        column = page.eval_on_selector_all(f"{runs} thead th", "ths => ths.map(t => t.textContent)").index("Training time")
        header.click()
        up = numbers(column_keys(page, runs, column))
        assert len(up) == 4 and up == sorted(up)
        header.click()
        down = numbers(column_keys(page, runs, column))
        assert down == sorted(up, reverse=True) and header.get_attribute("aria-sort") == "descending"
        # filtering: only the rows of one entry, then all again
        box = page.locator(f"input.filter + {runs}").locator("xpath=preceding-sibling::input[1]")
        box.fill("fastnet")
        visible = column_keys(page, runs, 0)
        assert len(visible) == 2 and all("fastnet" in v for v in visible)
        box.fill("")
        assert len(column_keys(page, runs, 0)) == 4
        # a rounded value keeps its exact value one hover away
        assert page.locator("section table.sortable tbody td[title]").count() > 0

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "leaderboard.png"), full_page=True)
        assert browser.errors == [] and browser.outside == []
    finally:
        browser.close()


def thousand_runs_page(tmp_path: Path) -> Path:
    from test_infer_report import result, run

    from dawnpipe import leaderboard
    from dawnpipe.report.render import render_html
    from dawnpipe.report.rows import objective_rows

    timed = [result(tmp_path, "entry", k, "eager", 1.0 + k / 10, 92.0, 90.0) for k in range(7)]  # seven real records, reused
    runs = [run(f"entry{k % 50}", k // 50, 0.01 + 0.0001 * k, [{**timed[k % 7], "entry": f"entry{k % 50}", "seed": k // 50}]) for k in range(1000)]
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    board.update(generated="now", config="thousand")
    path = tmp_path / "leaderboard.html"
    path.write_text(render_html(board, runs, [], config_name="thousand"), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_page_of_a_thousand_runs_loads_within_two_seconds(tmp_path):
    path = thousand_runs_page(tmp_path)
    warm_up = tmp_path / "warm-up.html"
    warm_up.write_text("<!DOCTYPE html><title>warm-up</title><p>starting the browser</p>", encoding="utf-8")
    browser = OpenPage(warm_up)
    try:
        # the browser's own start-up is not the page's: a small page first; the
        # page itself is then opened once, as a reader would (no code of it,
        # plotly.js included, compiled or cached before)
        browser.load()
        browser.url = path.resolve().as_uri()
        started = time.perf_counter()
        load_event = browser.load()
        wall = time.perf_counter() - started
        assert browser.errors == [] and browser.outside == []
        # every chart in the window is drawn within the budget too (the page is
        # what a reader sees: its top); the others as they are scrolled to
        browser.page.wait_for_function(
            "() => [...document.querySelectorAll('div.chart')].filter(c => c.getBoundingClientRect().top < window.innerHeight).every(c => c.querySelector('svg.main-svg .trace'))",
            timeout=LOAD_BUDGET_S * 1000,
        )
        shown = time.perf_counter() - started
        assert browser.page.locator("#runs-table tbody tr").count() == 1000
        charts = draw_every_chart(browser.page, budget_s=1.0)
        assert any(c["traces"] >= 50 for c in charts)  # the accuracy curves: one line per entry, each run on hover
        assert shown < LOAD_BUDGET_S, f"the charts in the window drawn at {shown:.2f} s (load event at {load_event:.2f} s, {wall:.2f} s wall)"
        assert load_event < LOAD_BUDGET_S and wall < LOAD_BUDGET_S, (
            f"{path.stat().st_size / 1e6:.1f} MB page: load event at {load_event:.2f} s, {wall:.2f} s wall"
        )
        # and it still sorts: 1,000 rows by training time
        browser.page.locator("#runs-table thead th", has_text="Training time").click()
        column = browser.page.eval_on_selector_all("#runs-table thead th", "ths => ths.map(t => t.textContent)").index("Training time")
        keys = numbers(column_keys(browser.page, "#runs-table", column))
        assert len(keys) == 1000 and keys == sorted(keys)
    finally:
        browser.close()


@pytest.mark.slow
def test_snakemake_report_holds_the_leaderboard(test_workflow, tmp_path):
    """Outputs marked in the stage table (Output.report) are in Snakemake's own report."""
    import zipfile

    from conftest import run_snakemake

    out = tmp_path / "report.zip"
    run_snakemake(test_workflow, "results/leaderboard.html", "--configfile", "config/test.yaml", "--report", str(out))
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
    assert any(n.endswith("leaderboard.html") for n in names), names


@pytest.mark.slow
def test_a_scaling_study_page_draws_its_figures(tmp_path):
    """The study page of a scaling study: its table, its curves and its own
    figure drawn by the plotly.js it embeds; a point of the speed-up chart
    names its variant on hover."""
    from test_study_page import scaling_summary

    from dawnpipe.report.study import render

    path = tmp_path / "study.html"
    path.write_text(render(scaling_summary()), encoding="utf-8")
    browser = OpenPage(path)
    try:
        browser.load()
        page = browser.page
        charts = draw_every_chart(page)
        assert len(charts) == 4  # accuracy, training loss, speed-ups, cost against time
        speedups = page.locator('div.chart[aria-label*="Speed-up per epoch"]')
        assert "4 processes (base+procs=4)" in hover_label(page, speedups, speedups.locator(".scatterlayer .trace path.point").last)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "study-scaling.png"), full_page=True)
        assert browser.errors == [] and browser.outside == []
    finally:
        browser.close()


def test_the_embedded_plotly_is_the_pinned_release_of_the_version_the_tests_validate_against():
    import hashlib

    import plotly.offline

    from dawnpipe.report.charts import PLOTLY_JS, plotly_js

    data = (ROOT / "src/dawnpipe/report" / PLOTLY_JS["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == PLOTLY_JS["sha256"]
    assert f"plotly.js (basic - minified) v{PLOTLY_JS['version']}" in data[:200].decode()
    assert plotly.offline.get_plotlyjs_version() == PLOTLY_JS["version"]  # chart_specs validates against the same plotly.js
    assert "</" not in plotly_js() and plotly_js().count("<\\/") == data.decode().count("</") + data.decode().count("<\\/")
