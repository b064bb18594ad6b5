"""Display rules of the published DAWNBench leaderboard (docs/rules.md#display-rules).

Times are rounded *up* to whole seconds (a 9.43 s run shows as 0:00:10),
costs show dollars with two decimals, latencies milliseconds with four: the
published leaderboard's rules. Where those would hide every digit that
carries information (a CPU run's cost of a fraction of a cent, a latency of
microseconds), three significant digits are shown instead ($0.000412), and a
ranked value shows its unit (``format_value``: '0.0779 ms'). Ordering always
uses the unrounded value; these functions only format.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal, localcontext


def format_hours(hours: float) -> str:
    """Hours -> 'H:MM:SS', whole seconds rounded up."""
    if hours is None or not math.isfinite(hours) or hours < 0:
        raise ValueError(f"not a duration in hours: {hours!r}")
    # Round to nanoseconds first so that 10 s given as 10/3600 h is not
    # pushed to 0:00:11 by binary floating-point noise.
    seconds = math.ceil(round(hours * 3600.0, 9))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _significant(value: float, digits: int = 3) -> str:
    """A positive value with ``digits`` significant digits, half-up, in plain decimals ('0.000412')."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = digits, ROUND_HALF_UP
        rounded = +Decimal(repr(float(value)))  # 0.0009996 -> 0.00100, one place up
    return f"{rounded.quantize(Decimal(1).scaleb(rounded.adjusted() - digits + 1)):f}"  # trailing zeros kept: 0.004 -> 0.00400


def format_usd(usd: float) -> str:
    """USD -> '$1,234.57' (two decimals, half-up); under half a cent, where
    that shows '$0.00', three significant digits: '$0.000412'."""
    if usd is None or not math.isfinite(usd) or usd < 0:
        raise ValueError(f"not a cost in USD: {usd!r}")
    cents = Decimal(repr(float(usd))).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    if cents == 0 and usd > 0:
        return f"${_significant(usd)}"
    return f"${cents:,.2f}"


def format_ms(ms: float) -> str:
    """Milliseconds -> '12.3457' (four decimals); under 0.001 ms, where that
    keeps one digit or none, three significant digits: '0.000123'."""
    if ms is None or not math.isfinite(ms) or ms < 0:
        raise ValueError(f"not a latency in ms: {ms!r}")
    if 0 < ms < 0.001:
        return _significant(ms)
    return f"{Decimal(repr(float(ms))).quantize(Decimal('0.0001'), rounding=ROUND_HALF_UP)}"


def format_joules(joules: float) -> str:
    """Joules -> '812 J', '12.3 kJ', '4.56 MJ' (three significant digits)."""
    if joules is None or not math.isfinite(joules) or joules < 0:
        raise ValueError(f"not an energy in joules: {joules!r}")
    rounded = float(f"{joules:.3g}")  # so that 999.6 J shows as 1 kJ, not 1e+03 J
    for factor, unit in ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ")):
        if rounded >= factor:
            return f"{rounded / factor:.3g} {unit}"
    return f"{rounded:.3g} J"


# Characters that steer a terminal or reorder what it shows: C0 controls, DEL,
# C1 controls (0x80-0x9f), and Unicode's bidirectional overrides and isolates.
_CONTROLS = {*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C}


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """Untrusted text (from a submission, a log, a file name) as a terminal
    may show it: every control character as a visible escape (``\x1b``,
    ``\u202e``), so an escape sequence in a JSON key or a file name cannot
    move the cursor, recolour or rewrite the auditor's own output. Lone
    surrogates (undecodable bytes of a file name) are escaped too."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif code in _CONTROLS:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def format_minutes(minutes: float) -> str:
    """MLPerf's unit: minutes with three decimals, as MLCommons publishes scores."""
    return f"{minutes:.3f} min"


def format_ms_unit(ms: float) -> str:
    """A ranked latency with its unit: '0.0779 ms'."""
    return f"{format_ms(ms)} ms"


# How a ranked value shows, by its unit (every one with its unit: H:MM:SS, $, min, ms, J)
FORMATTERS = {
    "minutes": format_minutes,
    "hours": format_hours,
    "USD": format_usd,
    "ms": format_ms_unit,
    "USD per 10,000 items": format_usd,
    "J": format_joules,
}


def format_value(value: float, unit: str) -> str:
    return FORMATTERS[unit](value)
