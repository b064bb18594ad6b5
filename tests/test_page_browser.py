"""The leaderboard page in a real browser: headless Chromium (the Debian
package), driven by Playwright, opens the page from its file with every
request leaving that file blocked and recorded. The page must load without a
console error, render every section and every chart (plotly.js, embedded
once; a chart is drawn when it comes near the window), show the run under
the pointer and hide a series from its legend, sort and filter its tables;
a page of 1,000 runs too. How fast it does so is measured by
bench/page_load.py, not here: a test's clock on shared cores measures the
neighbours (its waits are hang guards of a minute, never a claim). A
full-page screenshot of the real test workflow's page and of a study's page
goes to the test's temporary directory, or is kept in
DAWNPIPE_TEST_ARTIFACTS=<dir> (test-artifacts/ is git-ignored for that);
DAWNPIPE_SCREENSHOT=<path> also saves the top of the workflow's page, one
window of it, as the docs show it (docs/images/leaderboard.png):

    DAWNPIPE_SCREENSHOT=docs/images/leaderboard.png python -m pytest tests/test_page_browser.py -k real_run
    DAWNPIPE_TEST_ARTIFACTS=test-artifacts python -m pytest tests/test_page_browser.py
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pytest
from conftest import ROOT
from pages import CHARTS_IN_WINDOW, CHARTS_IN_WINDOW_DRAWN, chromium_path, launch, many_runs_page, page_context

from dawnpipe.errors import DawnpipeError


def artifacts(tmp_path: Path) -> Path:
    """Where a test's screenshots go: DAWNPIPE_TEST_ARTIFACTS when set (to keep them), else its temporary directory."""
    where = Path(os.environ.get("DAWNPIPE_TEST_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


class OpenPage:
    """The page of ``path`` in headless Chromium, its console errors, page errors and any request that left the file."""

    def __init__(self, path: Path):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            pytest.fail("playwright is not installed: `make setup` installs requirements.txt")
        try:
            chromium_path()
        except DawnpipeError as e:
            pytest.fail(str(e))
        self.url = path.resolve().as_uri()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self._pw = sync_playwright().start()
        self.browser = launch(self._pw)
        context = page_context(self.browser, self.url, self.outside)
        self.page = context.new_page()
        self.page.on("request", lambda req: req.url != self.url and self.outside.append(req.url))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"))
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))

    def load(self) -> None:
        self.page.goto(self.url, wait_until="load")

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
    hover.first.wait_for()
    return hover.first.text_content()


# Where the first vertex of a chart's first line is on the screen (SVG to screen coordinates).
FIRST_VERTEX = """c => { const line = c.querySelector('.scatterlayer .trace path.js-line'); const p = line.getPointAtLength(0);
    const m = line.getScreenCTM(); return [m.a * p.x + m.c * p.y + m.e, m.b * p.x + m.d * p.y + m.f]; }"""


SCREENSHOT_VIEWPORT = {"width": 1100, "height": 750}  # the page's column and its margins: a picture of about 120 KB


def save_top(browser: OpenPage, path: Path) -> None:
    """The top of the page as a reader first sees it, in a window of
    SCREENSHOT_VIEWPORT (a context of its own, so the test's page is left as
    it is), its charts there drawn: a PNG at ``path``, the docs' picture of
    the leaderboard, small enough to commit."""
    outside: list[str] = []
    context = page_context(browser.browser, browser.url, outside, viewport=SCREENSHOT_VIEWPORT)
    try:
        page = context.new_page()
        page.goto(browser.url, wait_until="load")
        page.wait_for_function(CHARTS_IN_WINDOW_DRAWN)
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path))
    finally:
        context.close()
    data = path.read_bytes()
    size = (SCREENSHOT_VIEWPORT["width"], SCREENSHOT_VIEWPORT["height"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == size and outside == [], path
    assert len(data) < 150_000, f"{path}: {len(data):,} bytes, over the 150 KB a picture in the docs may take"


def assert_drawn(c: dict) -> None:
    assert c["drawn"] and c["height"] > 50 and c["traces"] > 0, f"chart {c['title']!r} not drawn: {c}"


def draw_every_chart(page) -> list[dict]:
    """Scroll to each chart not in a closed <details>; each must then be
    drawn (a minute's wait for it is a hang guard). Returns the charts, drawn."""
    charts = drawn_charts(page)
    data = page.locator('script.chart-data[type="application/json"]').count()
    assert charts and len(charts) == data, f"{len(charts)} chart holders, {data} figures"
    assert page.locator("script#plotly-js").count() == 1 and page.evaluate("() => typeof Plotly") == "object"
    holders = page.locator("div.chart")
    for i, c in enumerate(charts):
        if c["hidden"]:
            continue
        holders.nth(i).scroll_into_view_if_needed()
        page.wait_for_function("i => document.querySelectorAll('div.chart')[i].querySelector('svg.main-svg .trace')", arg=i)
    charts = drawn_charts(page)
    for c in charts:
        if not c["hidden"]:
            assert_drawn(c)
    return charts


@pytest.mark.slow
def test_the_page_of_a_real_run_works_in_a_real_browser(test_workflow, tmp_path):
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
        if os.environ.get("DAWNPIPE_SCREENSHOT"):
            save_top(browser, Path(os.environ["DAWNPIPE_SCREENSHOT"]))
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

        page.screenshot(path=str(artifacts(tmp_path) / "leaderboard.png"), full_page=True)
        assert browser.errors == [] and browser.outside == []
    finally:
        browser.close()


@pytest.mark.slow
def test_a_page_of_a_thousand_runs_works_in_a_real_browser(tmp_path):
    """Opened as a reader opens it (a browser that has never seen it): no
    error, no outside request, every chart drawn once scrolled to (the
    accuracy curves one line per entry, a point naming its run under the
    pointer), and all 1,000 rows there and sorted both ways by clicks.
    bench/page_load.py times it."""
    browser = OpenPage(many_runs_page(tmp_path, 1000))
    try:
        browser.load()
        page = browser.page
        assert page.locator("#runs-table tbody tr").count() == 1000
        charts = draw_every_chart(page)
        assert any(c["traces"] >= 50 for c in charts)  # the accuracy curves: one line per entry
        # one line per entry, no markers: the pointer on a line's first vertex names that point's run
        curve = page.locator('div.chart[aria-label*="accuracy against training time"]').first
        curve.scroll_into_view_if_needed()
        # what bench/page_load.py counts and waits for sees the chart now in the window, drawn
        in_window = page.evaluate(f"() => ({CHARTS_IN_WINDOW})().map(c => c.getAttribute('aria-label'))")
        assert curve.get_attribute("aria-label") in in_window and page.evaluate(CHARTS_IN_WINDOW_DRAWN), in_window
        page.mouse.move(*curve.evaluate(FIRST_VERTEX))
        label = curve.locator(".hoverlayer .hovertext").first
        label.wait_for()
        assert re.search(r"entry\d+ seed \d+", label.text_content()), label.text_content()
        column = page.eval_on_selector_all("#runs-table thead th", "ths => ths.map(t => t.textContent)").index("Training time")
        header = page.locator("#runs-table thead th", has_text="Training time")
        before = numbers(column_keys(page, "#runs-table", column))
        header.click()
        up = numbers(column_keys(page, "#runs-table", column))
        header.click()  # the rows come fastest first already: descending is what shows a sort
        down = numbers(column_keys(page, "#runs-table", column))
        assert len(before) == 1000 and up == sorted(before) and down == sorted(before, reverse=True) and down != up
        assert header.get_attribute("aria-sort") == "descending"
        assert browser.errors == [] and browser.outside == []
    finally:
        browser.close()


@pytest.mark.slow
def test_entries_over_seeds_show_their_spread_and_ties_in_a_real_browser(tmp_path):
    """The ranked tables of entries over seeds (tests/pages.py SEED_SECONDS):
    ranks by the rule with the ties marked and visible, each entry's spread
    (range, the median's interval, one seed), its seeds linked to their runs,
    a cost under a cent with its digits, exact values on hover, the rank
    column sorting both ways, the entry without a median listed as excluded."""
    from pages import seeds_runs, write_page

    browser = OpenPage(write_page(seeds_runs(usd_per_hour=0.05), tmp_path / "seeds.html", "seeds"))
    try:
        browser.load()
        page = browser.page
        table = 'section[id="fashion-mnist-train_time-90.0"] table'
        ranks = column_keys(page, table, 0)
        assert ranks == ["1", "1", "1", "1", "1", "3", "5"], ranks  # D, F, A, G, B tie at the top; C, then H
        tied = page.locator(f"{table} tbody tr.tied")
        assert tied.count() == 5
        tag = tied.first.locator("span.tag.tie")
        assert tag.text_content() == "tied with the row above (3 seeds against 1 seed)" and tag.bounding_box()["height"] > 0
        seeds_column = page.eval_on_selector_all(f"{table} thead th", "ths => ths.map(t => t.textContent)").index("Seeds")
        spreads = [t.strip() for t in page.eval_on_selector_all(f"{table} tbody td.spread", "tds => tds.map(t => t.textContent)")]
        assert spreads[0] == "one seed: the rule cannot tell it apart from others" and seeds_column == 2
        assert "5 seeds, the median's 94% interval 0:00:09 to 0:00:13" in spreads and "3 seeds, range 0:00:09 to never; 1 did not reach" in spreads
        # the value's exact figure on hover, with what it is the median of
        value = page.locator(f"{table} tbody tr").nth(2).locator("td").nth(1)
        assert value.get_attribute("title") == f"{11 / 3600} hours (median of 3 seeds)" and value.text_content() == "0:00:11"
        # a seed's link goes to its run
        page.locator(f"{table} a[href='#run-entry-a-1']").click()
        page.wait_for_function("() => location.hash === '#run-entry-a-1'")
        assert page.locator("#runs-table tr#run-entry-a-1").is_visible()
        # the cost of 10 s at $0.05/h is a fraction of a cent: its digits, not $0.00
        cost = page.locator('section[id="fashion-mnist-train_cost-90.0"] table tbody tr').first.locator("td").nth(1)
        assert cost.text_content() == "$0.0000694" and cost.get_attribute("title").startswith("6.94")
        # the rank column sorts both ways
        header = page.locator(f"{table} thead th", has_text="Rank")
        header.click()
        header.click()
        assert numbers(column_keys(page, table, 0)) == [5, 3, 1, 1, 1, 1, 1] and header.get_attribute("aria-sort") == "descending"
        summary = page.locator("#summary-table tbody tr", has_text="Training time").first
        assert "tied for first with 4 others" in summary.text_content()
        excluded = page.locator("#excluded").locator("xpath=following-sibling::*[1]")
        assert "runs/entry-e" in excluded.text_content() and "no median" in excluded.text_content()
        assert browser.errors == [] and browser.outside == []
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
        page.screenshot(path=str(artifacts(tmp_path) / "study-scaling.png"), full_page=True)
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
