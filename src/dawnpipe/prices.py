"""The price table (config/prices.yaml): USD per hour of on-demand use per
hardware tag, each with the source and date it was read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from dawnpipe.errors import DawnpipeError


def load_prices(path: str | Path) -> dict[str, dict[str, Any]]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise DawnpipeError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hardware"), dict):
        raise DawnpipeError(f"{path}: expected a mapping 'hardware: {{tag: {{usd_per_hour, source, date}}}}'")
    table = {}
    for tag, row in doc["hardware"].items():
        if not isinstance(row, dict):
            raise DawnpipeError(f"{path}: hardware.{tag}: expected a mapping, got {type(row).__name__}")
        price = row.get("usd_per_hour")
        if price is not None and (not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0):
            raise DawnpipeError(f"{path}: hardware.{tag}.usd_per_hour: {price!r} is not a non-negative number")
        for key in ("source", "date"):
            if not row.get(key):
                raise DawnpipeError(f"{path}: hardware.{tag}.{key}: missing (every price says where and when it was read)")
        table[str(tag)] = dict(row, usd_per_hour=None if price is None else float(price))
    return table


def price_per_hour(table: dict[str, dict[str, Any]], tag: str) -> float | None:
    """The known price of ``tag``, or None (cost is then not computed, not zero)."""
    row = table.get(tag)
    return None if row is None else row["usd_per_hour"]
