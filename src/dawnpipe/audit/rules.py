"""The auditor's limits (rules.yaml beside this module): data, not code."""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import yaml


@functools.cache
def _default_rules() -> dict[str, Any]:
    return yaml.safe_load(resources.files(__package__).joinpath("rules.yaml").read_text(encoding="utf-8"))


def load_rules(max_bytes: int | None = None) -> dict[str, Any]:
    """The rules, with the size caps overridden by ``max_bytes`` when given."""
    rules = copy.deepcopy(_default_rules())
    if max_bytes is not None:
        rules["limits"]["max_json_bytes"] = rules["limits"]["max_tsv_bytes"] = int(max_bytes)
    return rules


def lookup(doc: Any, dotted: str) -> Any:
    """``doc['misc']['dawnpipe']['threshold']`` for 'misc.dawnpipe.threshold'; None when absent."""
    for key in dotted.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc
