"""A study's claim as checks over its own results, and their verdicts.

A study file states its claim in words (``claim:``) and as ``checks:``, each
one comparison decided by the rule of dawnpipe.verdict (docs/rules.md,
"Verdicts over seeds"):

    checks:
      - claim: the narrow net saves time
        measure: time          # time, epochs, cost (to the rung), seconds_per_epoch,
        rung: 93.0             # final_accuracy, held_out_gap, reaches
        variant: fastnet-narrow
        against: fastnet       # default: the base
        direction: higher      # the variant's time is higher without the trick
      - claim: the held-out gap is small
        measure: held_out_gap
        variant: fastnet+held_out=5000
        below: 1.0             # one sample: the gap's median interval below 1 point
      - claim: Adam never reaches the top rung
        measure: reaches
        rung: 86.0
        variant: resnet20-short+optimizer=adam
        direction: never_reaches

``parse_checks`` checks a study's checks against its variants and ladder (one
line naming the file and the field); ``evaluate`` decides one from the
per-seed values of the study's JSON (dawnpipe.report.study.summarize) or of
its record (bench/studies.py): the same values, so the page, the JSON and
docs/studies.md show the same verdicts. Plain data in, plain data out: no
file is read here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dawnpipe import verdict
from dawnpipe.errors import DawnpipeError

RATIO_MEASURES = ("time", "epochs", "cost", "seconds_per_epoch")  # lower is better: C/V
DIFFERENCE_MEASURES = ("final_accuracy", "held_out_gap")  # V - C
AT_A_RUNG = ("time", "epochs", "cost", "reaches")
WORDS = {
    "time": "time to {rung}",
    "epochs": "epochs to {rung}",
    "cost": "cost to {rung}",
    "seconds_per_epoch": "seconds per epoch",
    "final_accuracy": "final accuracy",
    "held_out_gap": "held-out gap (test - held-out, points)",
    "reaches": "reaching {rung}",
}


def rung_key(rung: float) -> str:
    """A rung as the study's JSON keys it (``str`` of the float: 93 -> "93.0")."""
    return str(float(rung))


def parse_checks(checks: Sequence[Mapping[str, Any]] | None, ids: Sequence[str], base: str, ladder: Sequence[float], source: str) -> list[dict[str, Any]]:
    """The checks of a study (already checked by its schema), complete: every
    field present, ``against`` the base where left out. ``ids``: the study's
    rows (the base first, then its variants). A check that names no row of the
    study, a rung off its ladder or a field its measure does not take is one
    DawnpipeError naming ``source`` and the field."""
    out = []
    ladder = [float(t) for t in ladder]
    for i, raw in enumerate(checks or ()):
        field = f"checks.{i}"

        def bad(name: str, why: str, field=field) -> DawnpipeError:
            return DawnpipeError(f"{source}: field '{field}.{name}': {why}")

        c = dict(raw)
        measure = c["measure"]
        for name in ("variant", "against"):
            if name in c and c[name] not in ids:
                raise bad(name, f"no variant {c[name]!r} in the study (its rows: {', '.join(ids)})")
        one_sample = measure == "held_out_gap" and "below" in c
        categorical = measure == "reaches"
        if "below" in c and measure != "held_out_gap":
            raise bad("below", f"only the measure held_out_gap takes 'below', not {measure}")
        if one_sample or categorical:
            for name in ("against", "min_effect"):
                if name in c:
                    raise bad(name, f"a claim about one variant alone ({measure}{' below' if one_sample else ''}) compares it with nothing")
        else:
            c.setdefault("against", base)
            if c["against"] == c["variant"]:
                raise bad("against", f"the variant {c['variant']!r} against itself")
        if measure in AT_A_RUNG:
            if "rung" not in c:
                raise bad("rung", f"the measure {measure} needs a rung of the ladder ({', '.join(f'{t:g}' for t in ladder)})")
            if float(c["rung"]) not in ladder:
                raise bad("rung", f"{c['rung']:g} is not on the ladder ({', '.join(f'{t:g}' for t in ladder)})")
            c["rung"] = float(c["rung"])
        elif "rung" in c:
            raise bad("rung", f"the measure {measure} is not taken at a rung")
        direction = c.get("direction")
        if categorical:
            if direction not in ("reaches", "never_reaches"):
                raise bad("direction", "the measure reaches needs direction reaches or never_reaches")
        elif one_sample:
            if direction is not None:
                raise bad("direction", "a gap claimed below a value has no direction")
        elif direction not in ("lower", "higher"):
            raise bad("direction", f"the measure {measure} needs direction lower or higher (the variant's value against the comparison's)")
        if measure in RATIO_MEASURES and c.get("min_effect") is not None and c["min_effect"] < 1:
            raise bad(
                "min_effect",
                f"a ratio's smallest effect is a factor >= 1, not {c['min_effect']:g} (for 'slower by 1.5x' write direction higher, min_effect 1.5)",
            )
        out.append(
            {
                "claim": c["claim"],
                "measure": measure,
                "variant": c["variant"],
                "against": c.get("against"),
                "rung": c.get("rung"),
                "direction": direction,
                "min_effect": c.get("min_effect"),
                "below": c.get("below"),
            }
        )
    return out


def held_out_gap(run: Mapping[str, Any]) -> float | None:
    """A run's held-out gap: its test accuracy less its held-out accuracy, in
    points (None when it held nothing out)."""
    if run.get("final_held_out_accuracy") is None or run.get("final_accuracy") is None:
        return None
    return run["final_accuracy"] - run["final_held_out_accuracy"]


def seed_values(check: Mapping[str, Any], row: Mapping[str, Any]) -> list[float | None] | None:
    """The check's measure for each seed of a study row (a variant of the
    study JSON): a time, epochs or cost of a seed that never reached the rung
    is infinite; None where the runs lack the measure (no held-out split, no
    price)."""
    measure, runs = check["measure"], row["runs"]
    key = rung_key(check["rung"]) if check.get("rung") is not None else None
    if measure in ("time", "epochs", "reaches"):
        field = "epochs_to_accuracy" if measure == "epochs" else "time_to_accuracy_hours"
        return verdict.as_times(r[field][key] for r in runs)
    if measure == "cost":
        price = row.get("usd_per_hour")
        if price is None:
            return None
        return [t * price if math.isfinite(t) else t for t in verdict.as_times(r["time_to_accuracy_hours"][key] for r in runs)]
    if measure == "seconds_per_epoch":
        values = [r.get("seconds_per_epoch") for r in runs]
    elif measure == "final_accuracy":
        values = [r.get("final_accuracy") for r in runs]
    else:
        values = [held_out_gap(r) for r in runs]
    return None if not values or any(x is None for x in values) else [float(x) for x in values]


def evaluate(check: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One check's verdict from the study's rows (id -> variant of the study
    JSON, with its ``runs``): the check as stated, then ``verdict``, the kind
    of ``effect``, ``estimate``, ``low``, ``high`` (strict JSON: an infinity
    as "inf"), the exact ``confidence`` of the interval, the ``seeds`` of
    each side, whether the order was ``categorical`` and, where that says
    more, the ``reason``."""
    measure = check["measure"]
    out: dict[str, Any] = {**check, "verdict": verdict.INCONCLUSIVE, "estimate": None, "low": None, "high": None, "confidence": None}
    out.update(categorical=False, reason=None)
    v_row = rows[check["variant"]]
    v_values = seed_values(check, v_row)
    if measure == "reaches":
        reached = [math.isfinite(x) for x in v_values]
        out.update(
            effect="seeds reaching",
            seeds=[len(reached)],
            reached=sum(reached),
            categorical=True,
            verdict=verdict.categorical(reached, claimed=check["direction"] == "reaches"),
        )
        return out
    if v_values is None:
        out.update(effect=None, seeds=[len(v_row["runs"])], reason=_missing(measure, check["variant"]))
        return out
    if check.get("below") is not None:  # one sample
        iv = verdict.median_interval(v_values)
        out.update(effect="median", seeds=[len(v_values)])
        out.update(_numbers(iv))
        out["verdict"] = verdict.decide(iv, "below", float(check["below"]))
        if not iv.exists:
            out["reason"] = f"{len(v_values)} seed{'s' if len(v_values) != 1 else ''}: the median interval needs {verdict.fewest_seeds()['one_sample']}"
        return out
    c_row = rows[check["against"]]
    c_values = seed_values(check, c_row)
    if c_values is None:
        out.update(effect=None, seeds=[len(v_row["runs"]), len(c_row["runs"])], reason=_missing(measure, check["against"]))
        return out
    kind = verdict.RATIO if measure in RATIO_MEASURES else verdict.DIFFERENCE
    iv = verdict.two_sample(v_values, c_values, kind)
    side, bound = verdict.claimed_side(kind, check["direction"], check.get("min_effect"))
    out.update(effect=kind, seeds=[len(v_values), len(c_values)], side=side, bound=bound, categorical=iv.categorical)
    out.update(_numbers(iv))
    out["verdict"] = verdict.decide(iv, side, bound)
    if iv.categorical:
        never = check["variant"] if all(math.isinf(x) for x in v_values) else check["against"]
        out["reason"] = f"every seed of {never} never reached {check['rung']:g}, every seed of the other did: decided whatever the number of seeds"
    elif not iv.exists:
        out["reason"] = f"{len(v_values)} against {len(c_values)} seeds: no interval (the fewest is {verdict.fewest_seeds()['two_sample']} against as many)"
    return out


def _numbers(iv: verdict.Interval) -> dict[str, Any]:
    return {
        "estimate": verdict.json_number(iv.estimate),
        "low": verdict.json_number(iv.low),
        "high": verdict.json_number(iv.high),
        "confidence": None if iv.confidence is None else float(iv.confidence),
    }


def _missing(measure: str, row: str) -> str:
    return {"cost": f"no price for the hardware of {row}", "held_out_gap": f"{row}'s runs hold no data out"}.get(measure, f"{row}'s runs lack the {measure}")


def evaluate_all(checks: Sequence[Mapping[str, Any]], variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The verdict of every check, from the study's variants (its JSON's or its record's list)."""
    rows = {v["id"]: v for v in variants}
    return [evaluate(c, rows) for c in checks]


# --- in words ----------------------------------------------------------------------


def effect_text(x: float | str | None, effect: str | None) -> str:
    value = verdict.from_json_number(x)
    if value is None:
        return "-"
    if effect == verdict.RATIO:
        return "inf" if math.isinf(value) else f"{value:.2f}x"
    return ("inf" if value > 0 else "-inf") if math.isinf(value) else f"{value:+.2f}"


def compared(result: Mapping[str, Any]) -> str:
    """What the check compares, in words: 'time to 93: fastnet / fastnet-narrow'."""
    what = WORDS[result["measure"]].format(rung=f"{result['rung']:g}" if result.get("rung") is not None else "")
    if result["measure"] == "reaches":
        return f"{result['variant']}: {what}"
    if result.get("below") is not None:
        return f"{result['variant']}: {what}, median"
    if result.get("effect") == verdict.RATIO:
        return f"{what}: {result['against']} / {result['variant']}"
    return f"{what}: {result['variant']} - {result['against']}"


def claimed(result: Mapping[str, Any]) -> str:
    """The claimed effect, in words."""
    if result["measure"] == "reaches":
        return "every seed reaches it" if result["direction"] == "reaches" else "no seed reaches it"
    if result.get("below") is not None:
        return f"below {result['below']:g}"
    if result["measure"] in RATIO_MEASURES:
        f = result.get("min_effect") or 1.0
        return f"above {f:g}x" if result["direction"] == "lower" else f"below {1 / f:.3g}x"
    d = result.get("min_effect") or 0.0
    return (
        f"above {d:+g}" if result["direction"] == "higher" and d else f"below {-d:+g}" if d else f"{'above' if result['direction'] == 'higher' else 'below'} 0"
    )


def measured(result: Mapping[str, Any]) -> str:
    """The estimate and the interval (or what the seeds did), in words."""
    if result["measure"] == "reaches":
        return f"{result['reached']} of {result['seeds'][0]} seeds reached it"
    seeds = " against ".join(str(s) for s in result["seeds"]) + (" seed" if result["seeds"] == [1] else " seeds")
    kind = result.get("effect")
    est = effect_text(result["estimate"], kind)
    if result["low"] is None:
        return f"{est}, no interval, {seeds}"
    interval = f"[{effect_text(result['low'], kind)}, {effect_text(result['high'], kind)}]"
    label = "categorical" if result.get("categorical") and result.get("confidence") is None else f"{100 * result['confidence']:.0f}% interval"
    return f"{est}, {label} {interval}, {seeds}"


def cells(result: Mapping[str, Any]) -> dict[str, str]:
    """The page's cells of one verdict: estimate, interval (with its coverage) and seeds."""
    seeds = " against ".join(str(s) for s in result["seeds"])
    if result["measure"] == "reaches":
        return {"estimate": f"{result['reached']} of {result['seeds'][0]} reached", "interval": "-", "seeds": seeds}
    kind = result.get("effect")
    if result["low"] is None:
        interval = "none"
    else:
        label = "categorical" if result.get("categorical") and result.get("confidence") is None else f"{100 * result['confidence']:.0f}%"
        interval = f"[{effect_text(result['low'], kind)}, {effect_text(result['high'], kind)}] ({label})"
    return {"estimate": effect_text(result["estimate"], kind), "interval": interval, "seeds": seeds}


def line(result: Mapping[str, Any], markdown: bool = False) -> str:
    """One check's verdict as one line of text: the terminal's, or (``markdown``) the docs'."""
    why = f"; {result['reason']}" if result.get("reason") else ""
    claim, said = (f"*{result['claim']}*", f"**{result['verdict']}**") if markdown else (result["claim"], result["verdict"])
    if result["measure"] == "reaches":
        return f"{claim}: {said}: {result['variant']}: {result['reached']} of {result['seeds'][0]} seeds reached {result['rung']:g}; claimed {claimed(result)}{why}."
    return f"{claim}: {said}: {compared(result)} = {measured(result)}; claimed {claimed(result)}{why}."
