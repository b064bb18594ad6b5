"""Charts of the report pages, drawn in the browser by plotly.js.

Each chart is a ``<div class="chart">`` followed by its figure (plotly's
``data`` and ``layout``) as JSON in a ``<script type="application/json"
class="chart-data">`` element; ``static/charts.js`` draws every chart of the
page with ``Plotly.newPlot`` when the chart comes near the window (so the
tables of a page of 1,000 runs are readable at once; a chart in a closed
``<details>`` is drawn when opened). plotly.js itself is embedded once per
page that has a chart (``with_scripts``), so a page works from its file
with no network.

The copy embedded is plotly.js's own *basic* bundle (scatter, bar and pie
traces: all these charts use), ``static/plotly-basic.min.js``, the file of
the npm package plotly.js-basic-dist-min at the version and sha256 of
``PLOTLY_JS`` (MIT licence beside it), checked before it is embedded. Not the
full bundle the ``plotly`` Python package ships: that is four times larger
(4.8 MB), and on the 2-core machines this runs on compiling it alone took
0.85 s of the main thread, so a page of 1,000 runs no longer opened within
two seconds (tests/test_page_browser.py); the basic bundle takes about 0.2 s.
The ``plotly`` Python package, pinned at the release that bundles the same
plotly.js version, is used by the tests to validate every figure's
attributes against plotly.js's schema.

Untrusted text (entry ids, labels) reaches plotly only HTML-escaped: plotly
renders a small HTML subset (``<b>``, ``<a href>``) in names, titles and
hover labels and decodes entities, so escaped text shows as written. The
JSON is escaped for a ``<script>`` element (no ``<``, ``>`` or ``&`` in it).
Hover labels name the run (or result) and both values; a click on a legend
item hides or shows its series.
"""

from __future__ import annotations

import bisect
import functools
import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any

from markupsafe import Markup

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
HEIGHT = 360
# Above this many series in one chart, the series of one group (an entry)
# share a trace, their runs told apart on hover: a thousand traces would make
# a page of 1,000 runs slow to draw and its legend unreadable.
MAX_TRACES = 30
CHART_MARK = 'class="chart-data"'  # a page holding this has charts and needs the scripts


# ---------------------------------------------------------------- the page's scripts
PLOTLY_JS = {
    "file": "static/plotly-basic.min.js",
    "package": "plotly.js-basic-dist-min",  # npm; `npm pack plotly.js-basic-dist-min@4.1.1` has this file
    "version": "4.1.1",
    "sha256": "99784e3abfb07b142a15e521a439e6d9addceadb3f79553fd24c72774f0649ba",
}


@functools.cache
def plotly_js() -> str:
    """The vendored plotly.js, checked against ``PLOTLY_JS`` and made safe
    inside a ``<script>`` element: its few ``</`` (all inside string literals,
    where ``<\\/`` is the same string) escaped; a copy with ``<!--`` or a
    ``<script`` in it is refused rather than embedded."""
    import hashlib
    import re

    data = resources.files("dawnpipe.report").joinpath(PLOTLY_JS["file"]).read_bytes()
    if hashlib.sha256(data).hexdigest() != PLOTLY_JS["sha256"]:
        raise AssertionError(f"{PLOTLY_JS['file']} is not plotly.js {PLOTLY_JS['version']} (sha256 {hashlib.sha256(data).hexdigest()})")
    text = data.decode("utf-8")
    if "<!--" in text or re.search(r"(?i)<script", text):
        raise AssertionError("plotly.js holds '<!--' or '<script': it cannot be embedded in a <script> element as it is")
    return text.replace("</", "<\\/")


@functools.cache
def charts_js() -> str:
    text = resources.files("dawnpipe.report").joinpath("static/charts.js").read_text(encoding="utf-8")
    if "</" in text or "<!--" in text:
        raise AssertionError("static/charts.js must not contain '</' or '<!--' (it is embedded in a <script> element)")
    return text


def scripts() -> Markup:
    """plotly.js and the script that draws the page's charts, each once."""
    return Markup(f'<script id="plotly-js">\n{plotly_js()}\n</script>\n<script id="dawnpipe-charts">\n{charts_js()}\n</script>\n')


def with_scripts(page: str) -> str:
    """``page`` with the chart scripts before its closing ``</body>``, when it has a chart."""
    if CHART_MARK not in page:
        return page
    head, body_end, tail = page.rpartition("</body>")
    if not body_end:
        raise AssertionError("a page with charts has no </body>")
    return head + str(scripts()) + body_end + tail


# ---------------------------------------------------------------- figures
def text(value: Any) -> str:
    """Text for plotly: HTML-escaped (plotly decodes the entities, and renders no tag of it)."""
    return html.escape(str(value), quote=False)


def _finite(value: Any) -> Any:
    """NaN and infinities become null (a gap in a line), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` as \\u escapes
    (they occur only inside strings, where JSON.parse reads the escapes back)."""
    out = json.dumps(_finite(value), allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    return out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def figure(data: list[dict[str, Any]], layout: dict[str, Any], *, label: str) -> Markup:
    """One chart: its holder and its figure as JSON (``label``: the holder's accessible name)."""
    return Markup('<div class="chart" role="img" aria-label="{}"></div><script type="application/json" class="chart-data">{}</script>').format(
        label, Markup(script_json({"data": data, "layout": layout}))
    )


def empty(message: str) -> Markup:
    return Markup('<p class="empty">{}</p>').format(message)


def _axis(label: str, *, log: bool = False, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": text(label)}, "type": "log" if log else "linear", "zeroline": False, "automargin": True, **extra}


def layout(title: str, x_label: str, y_label: str, *, log_x: bool = False, log_y: bool = False, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "xaxis": _axis(x_label, log=log_x),
        "yaxis": _axis(y_label, log=log_y),
        "height": HEIGHT,
        "margin": {"l": 60, "r": 20, "t": 36 if title else 16, "b": 48},
        "font": {"size": 11},
        "legend": {"font": {"size": 10}},
        "hovermode": "closest",
        "colorway": PALETTE,
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
    }
    if title:
        out["title"] = {"text": text(title), "font": {"size": 13}, "x": 0.01, "xanchor": "left"}
    for key, value in extra.items():
        out[key] = {**out[key], **value} if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def _hover(x_label: str, y_label: str, who: str = "%{fullData.name}") -> dict[str, Any]:
    """Hover label: who (the series, or a point's own text), then both values.
    The axis labels go through ``meta`` so nothing of theirs is read as a template."""
    return {"meta": [text(x_label), text(y_label)], "hovertemplate": who + "<br>%{meta[0]}: %{x:.4~g}<br>%{meta[1]}: %{y:.4~g}<extra></extra>"}


def _points(xs: Sequence[float], ys: Sequence[float], *, log_x: bool = False, log_y: bool = False) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in zip(xs, ys)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y) and (x > 0 or not log_x) and (y > 0 or not log_y)
    ]


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]] | tuple[str, Sequence[float], Sequence[float], str]],
    *,
    x_label: str,
    y_label: str,
    hline: float | None = None,
    hline_label: str = "",
    markers: bool = True,
    title: str = "",
    x_min: float | None = None,
    log_x: bool = False,
) -> Markup:
    """series: (label, xs, ys) or (label, xs, ys, group), one line each; above
    MAX_TRACES series, the series of one group (default: its label) share one
    line, each point still naming its own series on hover. A dashed
    horizontal line (the threshold) when ``hline`` is given. The x axis
    starts at 0 (or the smallest x below it) unless ``x_min`` is given."""
    kept = [(s[0], _points(s[1], s[2], log_x=log_x), s[3] if len(s) > 3 else s[0]) for s in series]
    kept = [k for k in kept if k[1]]
    if not kept:
        return empty("no data to plot")
    mode = "lines+markers" if markers else "lines"
    traces: list[dict[str, Any]] = []
    if len(kept) <= MAX_TRACES:
        for label, pts, _ in kept:
            traces.append(
                {"type": "scatter", "mode": mode, "name": text(label), "x": [p[0] for p in pts], "y": [p[1] for p in pts], **_hover(x_label, y_label)}
            )
    else:
        groups: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {}
        for label, pts, group in kept:
            groups.setdefault(group, []).append((label, pts))
        for group, members in groups.items():
            xs: list[float | None] = []
            ys: list[float | None] = []
            who: list[str | None] = []
            for label, pts in members:
                if xs:  # a gap between two series of the group
                    xs.append(None)
                    ys.append(None)
                    who.append(None)
                xs += [p[0] for p in pts]
                ys += [p[1] for p in pts]
                who += [text(label)] * len(pts)
            # lines alone: a marker per point of a thousand runs is most of the drawing time
            traces.append({"type": "scatter", "mode": "lines", "name": text(group), "x": xs, "y": ys, "text": who, **_hover(x_label, y_label, "%{text}")})
    for t in traces:
        t["line"] = {"width": 1.6}
        t["marker"] = {"size": 5}
    all_x = [p[0] for _, pts, _ in kept for p in pts]
    if hline is not None:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": text(hline_label or f"{hline:g}"),
                "x": [min(all_x), max(all_x)],
                "y": [hline, hline],
                "line": {"color": "#000", "dash": "dash", "width": 1.2},
                **_hover(x_label, y_label),
            }
        )
    x_axis: dict[str, Any] = {}
    if x_min is not None:
        x_axis["range"] = [x_min, max(all_x) + 0.03 * ((max(all_x) - x_min) or 1.0)]
    elif not log_x and min(all_x) >= 0:
        x_axis["rangemode"] = "tozero"
    return figure(traces, layout(title, x_label, y_label, log_x=log_x, xaxis=x_axis), label=title or y_label)


def _si(v: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def roofline_chart(points: Sequence[tuple[str, float, float]], ceilings: Sequence[tuple[str, float | None, float | None]], *, title: str = "") -> Markup:
    """Log-log roofline: points (label, FLOP/byte, FLOP/s), one per run;
    ceilings (label, peak FLOP/s, memory bytes/s), each drawn as
    min(peak, bandwidth x intensity)."""
    pts = [(lab, x, y) for lab, x, y in points if x and y and x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return empty("no run with counted FLOPs to plot")
    xs = [x for _, x, _ in pts] + [p / b for _, p, b in ceilings if p and b]
    ys = [y for _, _, y in pts] + [p for _, p, _ in ceilings if p]
    x0, x1 = min(xs) / 4, max(xs) * 4
    y0, y1 = min(ys) / 4, max(ys) * 2
    x_label = "arithmetic intensity (FLOP per byte of operand traffic)"
    traces: list[dict[str, Any]] = []
    for label, peak, bw in ceilings:
        samples = [x0 * (x1 / x0) ** (i / 60) for i in range(61)]
        roof = [(x, min(v for v in (peak, (bw * x) if bw else None) if v)) for x in samples if peak or bw]
        roof = [(x, y) for x, y in roof if y0 <= y <= y1 * 10]
        if roof:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": text(label),
                    "x": [x for x, _ in roof],
                    "y": [y for _, y in roof],
                    "line": {"color": "#000", "dash": "dash", "width": 1.4},
                    "hovertemplate": "%{fullData.name}<br>%{y:.3~s}FLOP/s at %{x:.3~g} FLOP/byte<extra></extra>",
                }
            )
    hover = "%{text}<br>%{y:.3~s}FLOP/s at %{x:.3~g} FLOP/byte<extra></extra>"
    groups = [[p] for p in pts] if len(pts) <= MAX_TRACES else [pts]
    for members in groups:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": text(members[0][0] if len(members) == 1 else "runs"),
                "x": [x for _, x, _ in members],
                "y": [y for _, _, y in members],
                "text": [text(f"{lab}: {_si(y, 'FLOP/s')}") for lab, _, y in members],
                "marker": {"size": 8},
                "hovertemplate": hover,
            }
        )
    lay = layout(
        title,
        x_label,
        "achieved FLOP/s",
        log_x=True,
        log_y=True,
        xaxis={"range": [math.log10(x0), math.log10(x1)]},
        yaxis={"range": [math.log10(y0), math.log10(y1)], "tickformat": "~s", "ticksuffix": "FLOP/s"},
    )
    return figure(traces, lay, label=title or "roofline")


def histogram_counts(values: Sequence[float], bins: int, log_x: bool) -> tuple[list[float], list[int]] | None:
    """(edges, counts) of ``values`` in ``bins`` bins, log-spaced when ``log_x``; None without a value."""
    vals = [v for v in values if math.isfinite(v) and (v > 0 or not log_x)]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    if hi <= lo:
        lo, hi = (lo / 1.5, hi * 1.5) if log_x else (lo - 0.5, hi + 0.5)
    if log_x:
        edges = [10 ** (math.log10(lo) + (math.log10(hi) - math.log10(lo)) * i / bins) for i in range(bins + 1)]
    else:
        edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
    counts = [0] * bins
    for v in vals:
        counts[min(max(bisect.bisect_right(edges, v) - 1, 0), bins - 1)] += 1
    return edges, counts


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def histogram(values: Sequence[float], *, x_label: str, marks: Sequence[tuple[str, float]] = (), bins: int = 40, title: str = "", log_x: bool = True) -> Markup:
    """Counts of ``values`` in ``bins`` bins (log-spaced when ``log_x``: latency
    tails span decades) drawn as steps, with dashed vertical lines at ``marks``
    (label, value), each a legend item."""
    counted = histogram_counts(values, bins, log_x)
    if counted is None:
        return empty("no data to plot")
    edges, counts = counted
    top = max(counts) * 1.1
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "items",
            "x": edges,
            "y": [*counts, counts[-1]],
            "line": {"shape": "hv", "width": 1, "color": PALETTE[0]},
            "fill": "tozeroy",
            "text": [text(f"{c} items in [{_fmt(a)}, {_fmt(b)})") for c, a, b in zip(counts, edges, edges[1:])] + [""],
            "hovertemplate": "%{text}<extra></extra>",
        }
    ]
    for i, (label, v) in enumerate(marks):
        if math.isfinite(v) and edges[0] <= v <= edges[-1]:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": text(label),
                    "x": [v, v],
                    "y": [0, top],
                    "line": {"dash": "dash", "width": 1.2, "color": PALETTE[(i + 1) % len(PALETTE)]},
                    "hovertemplate": "%{fullData.name}: %{x:.4~g}<extra></extra>",
                }
            )
    return figure(traces, layout(title, x_label, "items", log_x=log_x, yaxis={"rangemode": "tozero"}), label=title or x_label)


def scatter(
    points: Sequence[tuple[str, str, float, float]],
    *,
    x_label: str,
    y_label: str,
    title: str = "",
    log_x: bool = False,
    log_y: bool = False,
    lines: Sequence[tuple[str, Sequence[float], Sequence[float]]] = (),
) -> Markup:
    """points: (group, label, x, y); one colour and legend item per group,
    ``label`` and both values on hover. ``lines``: (label, xs, ys) dashed
    reference lines (an ideal), each a legend item."""
    pts = [p for p in points if _points([p[2]], [p[3]], log_x=log_x, log_y=log_y)]
    if not pts:
        return empty("no data to plot")
    traces: list[dict[str, Any]] = []
    for label, xs, ys in lines:
        ref = _points(xs, ys, log_x=log_x, log_y=log_y)
        if ref:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": text(label),
                    "x": [p[0] for p in ref],
                    "y": [p[1] for p in ref],
                    "line": {"color": "#888", "dash": "dash", "width": 1.2},
                    **_hover(x_label, y_label),
                }
            )
    for i, group in enumerate(dict.fromkeys(p[0] for p in pts)):
        mine = [p for p in pts if p[0] == group]
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": text(group),
                "x": [p[2] for p in mine],
                "y": [p[3] for p in mine],
                "text": [text(f"{p[1]} ({group})") for p in mine],
                "marker": {"size": 8, "opacity": 0.85, "color": PALETTE[i % len(PALETTE)]},  # a group's colour whatever the lines before it
                **_hover(x_label, y_label, "%{text}"),
            }
        )
    return figure(traces, layout(title, x_label, y_label, log_x=log_x, log_y=log_y), label=title or y_label)


def bar_chart(bars: Sequence[tuple[str, float | None]], *, y_label: str, title: str = "", hline: float | None = None, missing: str = "no value") -> Markup:
    """One bar per (label, value); a value of None is marked with a cross at 0
    named ``missing`` (a variant that did not reach the threshold)."""
    if not bars:
        return empty("no data to plot")
    labels = [text(label) for label, _ in bars]
    traces: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": text(y_label),
            "x": labels,
            "y": [v for _, v in bars],
            "marker": {"color": PALETTE[0]},
            "hovertemplate": "%{x}<br>%{meta[0]}: %{y:.3~g}<extra></extra>",
            "meta": [text(y_label)],
        }
    ]
    none = [label for label, (_, v) in zip(labels, bars) if v is None]
    if none:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": text(missing),
                "x": none,
                "y": [0] * len(none),
                "marker": {"symbol": "x", "size": 12, "color": PALETTE[1]},
                "meta": [text(missing)],
                "hovertemplate": "%{x}: %{meta[0]}<extra></extra>",
            }
        )
    if hline is not None:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": text(f"{hline:g}"),
                "x": [labels[0], labels[-1]],
                "y": [hline, hline],
                "line": {"color": "#000", "dash": "dash", "width": 1},
                "hoverinfo": "skip",
            }
        )
    return figure(traces, layout(title, "", y_label, xaxis={"type": "category"}, yaxis={"rangemode": "tozero"}), label=title or y_label)


def time_axis(max_hours: float) -> tuple[str, float]:
    """A readable unit for a training-time axis: (label, factor from hours)."""
    if max_hours * 3600 < 600:
        return "training time (s)", 3600.0
    if max_hours * 60 < 600:
        return "training time (min)", 60.0
    return "training time (h)", 1.0
