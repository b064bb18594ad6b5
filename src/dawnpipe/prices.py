"""The price table (config/prices.yaml): USD per hour of on-demand use per
hardware tag, each with the source and date it was read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dawnpipe.fileio import read_yaml
from dawnpipe.schemas import jsonschema_check


def load_prices(path: str | Path) -> dict[str, dict[str, Any]]:
    """The price table by hardware tag; a problem is one line naming the file and the field
    (a price given as ``true`` is not a number)."""
    path = Path(path)
    doc = read_yaml(path)
    jsonschema_check.check(doc, jsonschema_check.package_schema("prices"), str(path))
    return {str(tag): dict(row, usd_per_hour=None if row["usd_per_hour"] is None else float(row["usd_per_hour"])) for tag, row in doc["hardware"].items()}


def price_per_hour(table: dict[str, dict[str, Any]], tag: str) -> float | None:
    """The known price of ``tag``, or None (cost is then not computed, not zero)."""
    row = table.get(tag)
    return None if row is None else row["usd_per_hour"]
