"""Page load: how long the leaderboard page takes to open in a real browser.

    python bench/page_load.py [--runs 1000] [--repeats 5] [--record]

Builds the pages tests/test_page_browser.py checks (tests/pages.py makes both
for the test and for this script): one of --runs runs, and one of the shape
of config/config.yaml's run (its entries and seeds, a result per PyTorch
backend it lists). Opens each --repeats times, pages alternating, in one
headless Chromium (the Debian package, driven by Playwright, launched as the
tests launch it), every opening in a fresh browser context: nothing cached
or compiled by an earlier one, as a reader opening the page for the first
time. The browser's own start-up is not the page's: a small page is opened
first and not timed.

Three times per opening, on the browser's clock: from navigation start, the
load event (``loadEventEnd``) and the first animation frame at which every
chart in the window holds plotly's drawn traces (a chart is drawn when it
comes near the window; the count of charts in the window is printed: where
it is 0, as at the top of both pages today, this is the first frame after
the document was parsed, and says only that nothing in the window waits on
a chart); then, after scrolling the first chart into the window, the time
until it is drawn. Every request leaving the page's file is blocked; one, or
a console error, makes the opening an error, not a number. Prints every
opening, then per page the medians, whether the --runs page meets the goal
(for 1,000 runs: load event and charts in the window within 2 s, the first
chart drawn within 1 s of being scrolled to) and,
last:

    page load (1,000 runs): <seconds> s median, charts in window <seconds> s

The goal is checked here and nowhere else: a test of the page checks what
it does, not how fast (a loaded machine would fail it, and a quiet one would
prove little). ``--record`` writes every opening's times, the medians and the
verdict, with the machine (load average included), commit and command, to
docs/measurements/page_load.json (bench/record.py). Take a record only on a
quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT / "tests")]

from pages import CHARTS_IN_WINDOW, CHARTS_IN_WINDOW_DRAWN, HANG_GUARD_MS, default_page, launch, many_runs_page, page_context  # noqa: E402
from record import add_record_flag, write_record  # noqa: E402

from dawnpipe.errors import DawnpipeError  # noqa: E402

GOAL_S = 2.0  # load event and charts in the window, 1,000-run page, median
CHART_GOAL_S = 1.0  # a chart drawn after it is scrolled to, median
GOAL_RUNS = 1000

# Records performance.now() at the first animation frame at which the charts
# in the window are drawn; installed before any of the page's own code runs.
WATCH_CHARTS = f"""(() => {{
    const drawn = {CHARTS_IN_WINDOW_DRAWN};
    const check = () => {{
        if (drawn()) window.__dawnpipeChartsInWindow = performance.now();
        else requestAnimationFrame(check);
    }};
    requestAnimationFrame(check);
}})();"""
COUNT_IN_WINDOW = f"() => ({CHARTS_IN_WINDOW})().length"
# Scrolls the first chart (not in a closed <details>) into the window; the
# seconds until its traces are drawn, on the first animation frame that shows them.
SCROLL_TO_FIRST_CHART = f"""() => new Promise((resolve, reject) => {{
    const chart = [...document.querySelectorAll('div.chart')].find(c => c.closest('details:not([open])') === null);
    if (!chart) return resolve(null);
    chart.scrollIntoView({{block: 'center'}});
    const started = performance.now();
    const check = () => chart.querySelector('svg.main-svg .trace') ? resolve((performance.now() - started) / 1000) : requestAnimationFrame(check);
    requestAnimationFrame(check);
    setTimeout(() => reject(new Error('the first chart was not drawn within a minute of being scrolled to')), {HANG_GUARD_MS});
}})"""


def open_once(browser, path: Path) -> dict:
    """One opening of ``path`` in a fresh context: seconds to the load event, to the charts in
    the window (and how many there are) and from scrolling to the first chart to its drawing."""
    url = path.resolve().as_uri()
    outside: list[str] = []
    errors: list[str] = []
    context = page_context(browser, url, outside)
    try:
        context.add_init_script(WATCH_CHARTS)
        page = context.new_page()
        page.on("console", lambda msg: msg.type == "error" and errors.append(f"console: {msg.text}"))
        page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
        page.goto(url, wait_until="load")
        page.wait_for_function("() => window.__dawnpipeChartsInWindow !== undefined")
        load_ms, charts_ms = page.evaluate("() => [performance.getEntriesByType('navigation')[0].loadEventEnd, window.__dawnpipeChartsInWindow]")
        in_window = page.evaluate(COUNT_IN_WINDOW)
        first_chart = page.evaluate(SCROLL_TO_FIRST_CHART)
    finally:
        context.close()
    if errors or outside:
        raise DawnpipeError(f"{path}: {'; '.join(errors + [f'request left the page: {u}' for u in outside])}")
    return {"load_event_s": load_ms / 1000, "charts_in_window_s": charts_ms / 1000, "charts_in_window": in_window, "first_chart_s": first_chart}


def summary(openings: list[dict]) -> dict:
    """Every opening's times and their medians."""
    loads = [o["load_event_s"] for o in openings]
    charts = [o["charts_in_window_s"] for o in openings]
    first = [o["first_chart_s"] for o in openings]
    return {
        "charts_in_window": max(o["charts_in_window"] for o in openings),
        "load_event_s": loads,
        "charts_in_window_s": charts,
        "first_chart_s": first,
        "median_load_event_s": statistics.median(loads),
        "median_charts_in_window_s": statistics.median(charts),
        "median_first_chart_s": None if None in first else statistics.median(first),
    }


def times(o: dict, prefix: str = "") -> str:
    """An opening's times (or, with prefix ``median_``, a page's medians) as printed."""
    first = o[f"{prefix}first_chart_s"]
    return (
        f"load event {o[f'{prefix}load_event_s']:.3f} s, charts in window {o[f'{prefix}charts_in_window_s']:.3f} s, "
        f"first chart {'none' if first is None else f'{first:.3f} s'} after scrolled to"
    )


def goal_line(runs: int, page: dict) -> tuple[str, bool | None]:
    """Whether the --runs page meets the goal (None: not a 1,000-run page, not checked)."""
    if runs != GOAL_RUNS:
        return f"goal: not checked (it is for a page of {GOAL_RUNS:,} runs, not {runs:,})", None
    load, charts, first = page["median_load_event_s"], page["median_charts_in_window_s"], page["median_first_chart_s"]
    met = load <= GOAL_S and charts <= GOAL_S and first is not None and first <= CHART_GOAL_S
    return (
        f"goal: load event and charts in window within {GOAL_S:g} s, a chart scrolled to drawn within {CHART_GOAL_S:g} s: "
        f"{'met' if met else 'not met'} (medians {load:.2f} s, {charts:.2f} s, {'no chart' if first is None else f'{first:.2f} s'})"
    ), met


def last_line(runs: int, page: dict) -> str:
    return f"page load ({runs:,} runs): {page['median_load_event_s']:.2f} s median, charts in window {page['median_charts_in_window_s']:.2f} s"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=GOAL_RUNS, help=f"runs on the large page (the goal is for {GOAL_RUNS:,})")
    p.add_argument("--repeats", type=int, default=5, help="openings of each page, each in a fresh browser context")
    add_record_flag(p, "page_load")
    args = p.parse_args(argv)
    if args.runs < 1 or args.repeats < 1:
        p.error(f"--runs and --repeats must be at least 1 (got {args.runs} and {args.repeats})")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise DawnpipeError("playwright is not installed: `make setup` installs requirements.txt") from e

    with tempfile.TemporaryDirectory(prefix="dawnpipe-page-load-") as tmp:
        work = Path(tmp)
        with contextlib.redirect_stderr(io.StringIO()):  # the records' own progress bars
            large = many_runs_page(work, args.runs)
            default, default_runs = default_page(work)
        pages = {f"{args.runs:,} runs": large, f"default config ({default_runs} runs)": default}
        for name, path in pages.items():
            print(f"{name}: {path.stat().st_size / 1e6:.2f} MB", flush=True)
        openings: dict[str, list[dict]] = {name: [] for name in pages}
        with sync_playwright() as pw:
            browser = launch(pw)
            try:
                warm_up = work / "warm-up.html"
                warm_up.write_text("<!DOCTYPE html><title>warm-up</title><p>starting the browser</p>", encoding="utf-8")
                open_once(browser, warm_up)
                version = browser.version
                for i in range(args.repeats):
                    order = list(pages) if i % 2 == 0 else list(pages)[::-1]  # alternating, to share the machine's state fairly
                    for name in order:
                        o = open_once(browser, pages[name])
                        openings[name].append(o)
                        print(f"repeat {i + 1}/{args.repeats}  {name}: {times(o)}", flush=True)
            finally:
                browser.close()
        results = {name: {"bytes": pages[name].stat().st_size, **summary(openings[name])} for name in pages}
    for name, page in results.items():
        print(f"{name}: median {times(page, 'median_')} ({page['charts_in_window']} charts in the window)")
    large_result = results[f"{args.runs:,} runs"]
    goal, met = goal_line(args.runs, large_result)
    if args.record:
        record = {
            "runs": args.runs,
            "repeats": args.repeats,
            "chromium": version,
            "goal_s": GOAL_S,
            "chart_goal_s": CHART_GOAL_S,
            "goal_met": met,
            "pages": results,
        }
        write_record("page_load", record, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(goal)
    print(last_line(args.runs, large_result))


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("page_load", lambda _: main(), None, prog="bench/page_load"))
