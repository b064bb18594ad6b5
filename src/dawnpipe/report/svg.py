"""Small inline SVG charts (no JavaScript, no CDN: the page works offline).

Every piece of text is escaped here; the result is marked safe for Jinja.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
W, H, L, R, T, B = 640, 360, 60, 170, 20, 45


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    x_label: str,
    y_label: str,
    hline: float | None = None,
    hline_label: str = "",
    markers: bool = True,
    title: str = "",
    x_min: float | None = None,
) -> Markup:
    """series: (label, xs, ys). A horizontal line (the threshold) when ``hline`` is given.
    The x axis starts at 0 (or the smallest x below it) unless ``x_min`` is given."""
    xs = [x for _, sx, _ in series for x in sx if math.isfinite(x)]
    ys = [y for _, _, sy in series for y in sy if math.isfinite(y)] + ([hline] if hline is not None else [])
    if not xs or not ys:
        return Markup('<p class="empty">no data to plot</p>')
    x0, x1 = (x_min if x_min is not None else 0.0 if min(xs) >= 0 else min(xs)), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.05 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = W - L - R, H - T - B

    def px(x):
        return L + (x - x0) / ((x1 - x0) or 1.0) * pw

    def py(y):
        return T + ph - (y - y0) / ((y1 - y0) or 1.0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" role="img" aria-label="{escape(title or y_label)}">',
        f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>',
    ]
    for t in _ticks(x0, x1):
        out.append(
            f'<line x1="{px(t):.1f}" y1="{T + ph}" x2="{px(t):.1f}" y2="{T + ph + 4}" stroke="#666"/>'
            f'<text x="{px(t):.1f}" y="{T + ph + 16}" text-anchor="middle">{escape(_fmt(t))}</text>'
        )
    for t in _ticks(y0, y1):
        out.append(
            f'<line x1="{L - 4}" y1="{py(t):.1f}" x2="{L + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
            f'<text x="{L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{escape(_fmt(t))}</text>'
        )
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {T + ph / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>')
    if hline is not None:
        out.append(
            f'<line x1="{L}" y1="{py(hline):.1f}" x2="{L + pw}" y2="{py(hline):.1f}" stroke="#000" stroke-dasharray="5 4"/>'
            f'<text x="{L + pw - 4}" y="{py(hline) - 4:.1f}" text-anchor="end">{escape(hline_label)}</text>'
        )
    for i, (label, sx, sy) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy) if math.isfinite(x) and math.isfinite(y))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{pts}"><title>{escape(label)}</title></polyline>')
        if markers:
            out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{color}"/>' for x, y in zip(sx, sy) if math.isfinite(x) and math.isfinite(y))
        ly = T + 12 + 16 * i
        out.append(
            f'<rect x="{W - R + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/><text x="{W - R + 24}" y="{ly + 1}">{escape(label[:24])}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) if lo <= 10.0**e <= hi]


def _si(v: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def roofline_chart(points: Sequence[tuple[str, float, float]], ceilings: Sequence[tuple[str, float | None, float | None]], *, title: str = "") -> Markup:
    """Log-log roofline: points (label, FLOP/byte, FLOP/s); ceilings (label,
    peak FLOP/s, memory bytes/s), each drawn as min(peak, bandwidth x intensity)."""
    pts = [(lab, x, y) for lab, x, y in points if x and y and x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return Markup('<p class="empty">no run with counted FLOPs to plot</p>')
    xs = [x for _, x, _ in pts] + [p / b for _, p, b in ceilings if p and b]
    ys = [y for _, _, y in pts] + [p for _, p, _ in ceilings if p]
    x0, x1 = min(xs) / 4, max(xs) * 4
    y0, y1 = min(ys) / 4, max(ys) * 2
    pw, ph = W - L - R, H - T - B
    lx0, lx1, ly0, ly1 = math.log10(x0), math.log10(x1), math.log10(y0), math.log10(y1)

    def px(x):
        return L + (math.log10(x) - lx0) / (lx1 - lx0) * pw

    def py(y):
        return T + ph - (math.log10(y) - ly0) / (ly1 - ly0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" role="img" aria-label="{escape(title or "roofline")}">',
        f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>',
    ]
    for t in _log_ticks(x0, x1):
        out.append(
            f'<line x1="{px(t):.1f}" y1="{T}" x2="{px(t):.1f}" y2="{T + ph + 4}" stroke="#eee"/>'
            f'<text x="{px(t):.1f}" y="{T + ph + 16}" text-anchor="middle">{escape(f"{t:g}")}</text>'
        )
    for t in _log_ticks(y0, y1):
        out.append(
            f'<line x1="{L - 4}" y1="{py(t):.1f}" x2="{L + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
            f'<text x="{L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{escape(_si(t, "FLOP/s"))}</text>'
        )
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">arithmetic intensity (FLOP per byte of operand traffic)</text>')
    out.append(f'<text transform="translate(10 {T + ph / 2}) rotate(-90)" text-anchor="middle">achieved FLOP/s</text>')
    for label, peak, bw in ceilings:
        samples = [x0 * (x1 / x0) ** (i / 60) for i in range(61)]
        roof = [(x, min(v for v in (peak, (bw * x) if bw else None) if v)) for x in samples if peak or bw]
        roof = [(x, y) for x, y in roof if y0 <= y <= y1 * 10]
        if roof:
            line = " ".join(f"{px(x):.1f},{py(min(y, y1)):.1f}" for x, y in roof)
            out.append(
                f'<polyline fill="none" stroke="#000" stroke-width="1.4" stroke-dasharray="6 3" points="{line}"><title>{escape(label)}</title></polyline>'
            )
            lx, ly = roof[-1]
            out.append(f'<text x="{px(lx) - 4:.1f}" y="{py(min(ly, y1)) - 5:.1f}" text-anchor="end">{escape(label[:60])}</text>')
    for i, (label, x, y) in enumerate(pts):
        color = PALETTE[i % len(PALETTE)]
        out.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{color}"><title>{escape(label)}: {escape(_si(y, "FLOP/s"))} at {x:.3g} FLOP/byte</title></circle>'
        )
        ly = T + 12 + 16 * i
        out.append(f'<circle cx="{W - R + 15}" cy="{ly - 3}" r="4" fill="{color}"/><text x="{W - R + 24}" y="{ly + 1}">{escape(label[:24])}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# ---------------------------------------------------------------- log axes, histograms, scatters
def _log_ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks of a logarithmic axis from lo to hi (both > 0)."""
    for mantissas in ((1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):  # finer when the range spans less than a decade
        ticks = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in mantissas if lo <= m * 10.0**k <= hi]
        if len(ticks) >= 3:
            return ticks
    return ticks or [lo, hi]


class _Axis:
    """Maps data values to pixels along [p0, p1], linearly or logarithmically."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        self.lo, self.hi, self.p0, self.p1, self.log = lo, (hi if hi > lo else lo + 1.0), p0, p1, log

    def __call__(self, v: float) -> float:
        v = math.log10(v) if self.log else v
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        if self.log:
            return _log_ticks_125(10**self.lo, 10**self.hi)
        return _ticks(self.lo, self.hi)


def _frame(x: _Axis, y: _Axis, *, x_label: str, y_label: str, title: str, width: int = W, right: int = R) -> list[str]:
    pw, ph = width - L - right, H - T - B
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {H}" class="chart" role="img" aria-label="{escape(title or y_label)}">',
        f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>',
    ]
    for t in x.ticks():
        out.append(
            f'<line x1="{x(t):.1f}" y1="{T + ph}" x2="{x(t):.1f}" y2="{T + ph + 4}" stroke="#666"/>'
            f'<text x="{x(t):.1f}" y="{T + ph + 16}" text-anchor="middle">{escape(_fmt(t))}</text>'
        )
    for t in y.ticks():
        out.append(
            f'<line x1="{L - 4}" y1="{y(t):.1f}" x2="{L + pw}" y2="{y(t):.1f}" stroke="#eee"/>'
            f'<text x="{L - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{escape(_fmt(t))}</text>'
        )
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {T + ph / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>')
    return out


def histogram(values: Sequence[float], *, x_label: str, marks: Sequence[tuple[str, float]] = (), bins: int = 40, title: str = "", log_x: bool = True) -> Markup:
    """Counts of ``values`` in ``bins`` bins (log-spaced when ``log_x``: latency
    tails span decades), with labelled vertical lines at ``marks`` (label, value)."""
    vals = [v for v in values if math.isfinite(v) and (v > 0 or not log_x)]
    if not vals:
        return Markup('<p class="empty">no data to plot</p>')
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
    width, right = 480, 20
    x = _Axis(lo, hi, L, width - right, log_x)
    y = _Axis(0, max(counts) * 1.1, T + H - T - B, T, False)
    out = _frame(x, y, x_label=x_label, y_label="items", title=title, width=width, right=right)
    for c, a, b in zip(counts, edges, edges[1:]):
        if c:
            out.append(
                f'<rect x="{x(a):.1f}" y="{y(c):.1f}" width="{max(x(b) - x(a) - 0.5, 0.5):.1f}" height="{y(0) - y(c):.1f}" fill="{PALETTE[0]}">'
                f"<title>{escape(f'{c} items in [{_fmt(a)}, {_fmt(b)})')}</title></rect>"
            )
    for i, (label, v) in enumerate(marks):
        if math.isfinite(v) and lo <= v <= hi:
            color = PALETTE[(i + 1) % len(PALETTE)]
            out.append(
                f'<line x1="{x(v):.1f}" y1="{T}" x2="{x(v):.1f}" y2="{y(0):.1f}" stroke="{color}" stroke-dasharray="4 3"/>'
                f'<text x="{x(v) + 3:.1f}" y="{T + 12 + 13 * i}" fill="{color}">{escape(label)}</text>'
            )
    if title:
        out.append(f'<text x="{L + 4}" y="{T - 6}">{escape(title)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def scatter(
    points: Sequence[tuple[str, str, float, float]], *, x_label: str, y_label: str, title: str = "", log_x: bool = False, log_y: bool = False
) -> Markup:
    """points: (group, label, x, y); one colour per group (legend), ``label`` on hover."""
    pts = [p for p in points if math.isfinite(p[2]) and math.isfinite(p[3]) and (p[2] > 0 or not log_x) and (p[3] > 0 or not log_y)]
    if not pts:
        return Markup('<p class="empty">no data to plot</p>')

    def span(vs, log):
        lo, hi = min(vs), max(vs)
        if log:
            return lo / 1.3, hi * 1.3
        pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
        return (0.0 if lo >= 0 and lo - pad < 0 else lo - pad), hi + pad

    x = _Axis(*span([p[2] for p in pts], log_x), L, W - R, log_x)
    y = _Axis(*span([p[3] for p in pts], log_y), T + H - T - B, T, log_y)
    out = _frame(x, y, x_label=x_label, y_label=y_label, title=title)
    groups = list(dict.fromkeys(p[0] for p in pts))
    for group, label, px, py in pts:
        color = PALETTE[groups.index(group) % len(PALETTE)]
        out.append(
            f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="4" fill="{color}" fill-opacity="0.8">'
            f"<title>{escape(f'{label} ({group}): {_fmt(px)}, {_fmt(py)}')}</title></circle>"
        )
    for i, group in enumerate(groups):
        ly = T + 12 + 16 * i
        out.append(
            f'<circle cx="{W - R + 15}" cy="{ly - 3}" r="4" fill="{PALETTE[i % len(PALETTE)]}"/><text x="{W - R + 24}" y="{ly + 1}">{escape(group[:24])}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def time_axis(max_hours: float) -> tuple[str, float]:
    """A readable unit for a training-time axis: (label, factor from hours)."""
    if max_hours * 3600 < 600:
        return "training time (s)", 3600.0
    if max_hours * 60 < 600:
        return "training time (min)", 60.0
    return "training time (h)", 1.0
