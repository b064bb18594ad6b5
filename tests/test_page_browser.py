"""The leaderboard page in a real browser: headless Chromium (the Debian
package), driven by Playwright, opens the page from its file with every
request leaving that file blocked and recorded. The page must load without a
console error, render every section, sort and filter its tables, and (1,000
runs) load within two seconds on this machine. A screenshot of the page of
the real test workflow is kept in test-artifacts/ (git-ignored)."""

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
        charts = page.eval_on_selector_all("svg.chart", "svgs => svgs.map(s => s.getBoundingClientRect().height)")
        assert charts and all(h > 50 for h in charts)
        assert page.locator("#summary-table tbody tr").count() >= 2

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
    browser = OpenPage(path)
    try:
        browser.load()  # once to start the browser's own machinery; the timed load is the second
        started = time.perf_counter()
        load_event = browser.load()
        wall = time.perf_counter() - started
        assert browser.errors == [] and browser.outside == []
        assert browser.page.locator("#runs-table tbody tr").count() == 1000
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
