"""Small inline SVG charts (no JavaScript, no CDN: the page works offline).

Every piece of text is escaped here; the result is marked safe for Jinja.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

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


def line_chart(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], *, x_label: str, y_label: str,
               hline: float | None = None, hline_label: str = "", markers: bool = True, title: str = "") -> Markup:
    """series: (label, xs, ys). A horizontal line (the threshold) when ``hline`` is given."""
    xs = [x for _, sx, _ in series for x in sx if math.isfinite(x)]
    ys = [y for _, _, sy in series for y in sy if math.isfinite(y)] + ([hline] if hline is not None else [])
    if not xs or not ys:
        return Markup('<p class="empty">no data to plot</p>')
    x0, x1 = 0.0 if min(xs) >= 0 else min(xs), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.05 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = W - L - R, H - T - B

    def px(x):
        return L + (x - x0) / ((x1 - x0) or 1.0) * pw

    def py(y):
        return T + ph - (y - y0) / ((y1 - y0) or 1.0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" role="img" aria-label="{escape(title or y_label)}">',
           f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for t in _ticks(x0, x1):
        out.append(f'<line x1="{px(t):.1f}" y1="{T + ph}" x2="{px(t):.1f}" y2="{T + ph + 4}" stroke="#666"/>'
                   f'<text x="{px(t):.1f}" y="{T + ph + 16}" text-anchor="middle">{escape(_fmt(t))}</text>')
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{L - 4}" y1="{py(t):.1f}" x2="{L + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
                   f'<text x="{L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{escape(_fmt(t))}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {T + ph / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>')
    if hline is not None:
        out.append(f'<line x1="{L}" y1="{py(hline):.1f}" x2="{L + pw}" y2="{py(hline):.1f}" stroke="#000" stroke-dasharray="5 4"/>'
                   f'<text x="{L + pw - 4}" y="{py(hline) - 4:.1f}" text-anchor="end">{escape(hline_label)}</text>')
    for i, (label, sx, sy) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy) if math.isfinite(x) and math.isfinite(y))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{pts}"><title>{escape(label)}</title></polyline>')
        if markers:
            out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{color}"/>' for x, y in zip(sx, sy) if math.isfinite(x) and math.isfinite(y))
        ly = T + 12 + 16 * i
        out.append(f'<rect x="{W - R + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{W - R + 24}" y="{ly + 1}">{escape(label[:24])}</text>')
    out.append("</svg>")
    return Markup("".join(out))
